"""Every trainer command on the jax engine (--engine=jax): the tf engine's flags, outputs and
exit codes.

The engine picks Keras' backend when its process starts (trainers/engine_env.py) and pytest's
process runs TensorFlow's, so the jax engine runs here are in a child process on Keras' JAX
backend: one child for the module's runs (`jax_runs`), shared by the tests; the tf engine's runs
are in this process. The digits need no download; the model is tests/fixtures.py's digits shape.
"""

import glob
import os

import numpy as np
import pytest
from fixtures import TINY_DIGITS_FLAGS
from jax_engine_losses import LOSSES
from trainer_cli import plugin_tags, read_results, run_cli, run_in_one_child, scalar_tags

from trainers import demo, errors, finetune, validation
from trainers import flags as trainer_flags

DIGITS = ["--dataset=digits", *TINY_DIGITS_FLAGS, "--batch_size=32", "--warmup_steps=2", "--seed=3"]
FINETUNE = DIGITS + [
    "--total_steps=8",
    "--steps_per_loop=4",
    "--eval_every=4",
    "--checkpoint_every=4",
    "--mixup=0.2",  # soft targets through the jax engine's loss
    "--grad_norm_clip=1",
    "--fewshot_datasets=digits:5-9",
    "--fewshot_shots=1,2",
    "--fewshot_seeds=1",
    "--fewshot_every=4",
]
PRETRAIN = DIGITS + [
    "--objective=masked_patch",
    "--pre_logits=false",  # as the demo's: the objective trains no pre-logits layer
    "--total_steps=6",
    "--steps_per_loop=3",
    "--eval_every=3",
    "--checkpoint_every=3",
]
FEWSHOT = ["--dataset=digits:5-9", *TINY_DIGITS_FLAGS, "--shots=1,5", "--seeds=2"]


def _ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def jax_runs(tmp_path_factory):
    """{name: (workdir, CompletedProcess)} of the module's jax engine runs, in ONE child process:
    a short fine-tuning, a masked patch pre-training, and few-shot probes of its weights."""
    root = tmp_path_factory.mktemp("jax")
    workdirs = {name: str(root / name) for name in ("finetune", "pretrain", "fewshot")}
    runs = {
        "finetune": ("trainers.finetune", FINETUNE + ["--engine=jax", f"--workdir={workdirs['finetune']}"]),
        "pretrain": ("trainers.pretrain", PRETRAIN + ["--engine=jax", f"--workdir={workdirs['pretrain']}"]),
        "fewshot": ("trainers.fewshot", _fewshot_args(workdirs["pretrain"], "jax", workdirs["fewshot"])),
    }
    procs = run_in_one_child(list(runs.values()), env={"KERAS_BACKEND": "jax"})
    return {name: (workdirs[name], _ok(proc)) for name, proc in zip(runs, procs)}


def _fewshot_args(pretrained_workdir, engine, workdir):
    weights = os.path.join(pretrained_workdir, "model.npz")
    return FEWSHOT + [f"--weights={weights}", f"--engine={engine}", f"--workdir={workdir}"]


@pytest.fixture(scope="module")
def finetuned(jax_runs, tmp_path_factory):
    """{engine: (workdir, stdout)} of the same short fine-tuning run on each engine."""
    workdir = str(tmp_path_factory.mktemp("finetune") / "tf")
    proc = _ok(run_cli("finetune", FINETUNE + ["--engine=tf", f"--workdir={workdir}"]))
    jax_dir, jax_proc = jax_runs["finetune"]
    return {"tf": (workdir, proc.stdout), "jax": (jax_dir, jax_proc.stdout)}


@pytest.fixture(scope="module")
def pretrained(jax_runs):
    """(workdir, stdout) of a masked patch pre-training on the jax engine."""
    workdir, proc = jax_runs["pretrain"]
    return workdir, proc.stdout


@pytest.mark.slow
def test_finetune_on_the_jax_engine_writes_what_the_tf_engine_writes(finetuned):
    (tf_dir, _), (jax_dir, stdout) = finetuned["tf"], finetuned["jax"]
    assert "hardware: jax engine, JAX data parallel: 1 replica(s)" in stdout
    assert "final test: accuracy" in stdout
    tf_results, jax_results = read_results(tf_dir), read_results(jax_dir)
    assert set(jax_results) == set(tf_results)
    assert jax_results["steps"] == 8 and jax_results["replicas"] == 1
    assert jax_results["eval"]["test"]["examples"] == tf_results["eval"]["test"]["examples"]
    assert 0 <= jax_results["eval"]["test"]["accuracy"] <= 1
    assert np.isfinite(jax_results["train_loss"])
    for key in ("fewshot/digits_5-9/1shot_accuracy", "fewshot/digits_5-9/2shot_accuracy"):
        assert 0 < jax_results[key] <= 1
    assert sorted(os.listdir(jax_dir)) == sorted(os.listdir(tf_dir))


@pytest.mark.slow
def test_the_jax_engine_logs_the_same_tensorboard_tags(finetuned):
    (tf_dir, _), (jax_dir, _) = finetuned["tf"], finetuned["jax"]
    for part in ("train", "eval"):
        assert glob.glob(os.path.join(jax_dir, part, "events.out.tfevents.*"))
        assert set(scalar_tags(os.path.join(jax_dir, part))) == set(scalar_tags(os.path.join(tf_dir, part)))
    pictures = plugin_tags(os.path.join(jax_dir, "eval"), "images")
    assert pictures == plugin_tags(os.path.join(tf_dir, "eval"), "images")
    assert "pictures/test/attention_rollout" in pictures and "fewshot/accuracy_by_shots_plot" in pictures
    loss = scalar_tags(os.path.join(jax_dir, "train"))["loss"]
    assert [step for step, _ in loss] == [1, 4, 8]


@pytest.mark.slow
def test_the_jax_engines_model_npz_loads_and_classifies_as_evaluated(finetuned):
    from keras_vit import run_dir

    jax_dir, _ = finetuned["jax"]
    model = run_dir.load_run(jax_dir, include_preprocessing=False).model
    assert model.output.shape[-1] == 10
    assert np.isfinite(np.asarray(model(np.zeros((1, 16, 16, 3), np.float32)))).all()


@pytest.mark.slow
def test_masked_patch_pretraining_on_the_jax_engine(pretrained):
    workdir, stdout = pretrained
    assert "hardware: jax engine" in stdout and "masked_patch_accuracy" in stdout
    results = read_results(workdir)
    assert results["steps"] == 6
    assert 0 <= results["eval"]["test"]["masked_patch_accuracy"] <= 1
    assert "masked_patch_accuracy" in scalar_tags(os.path.join(workdir, "train"))


@pytest.mark.slow
def test_fewshot_probes_agree_between_the_engines_on_the_same_weights(jax_runs, pretrained, tmp_path):
    tf_dir = str(tmp_path / "tf")
    tf_proc = _ok(run_cli("fewshot", _fewshot_args(pretrained[0], "tf", tf_dir)))
    results = {}
    for engine, (workdir, proc) in {"tf": (tf_dir, tf_proc), "jax": jax_runs["fewshot"]}.items():
        assert "1-shot accuracy" in proc.stdout
        results[engine] = read_results(workdir)
        assert glob.glob(os.path.join(workdir, "eval", "events.out.tfevents.*"))
    assert set(results["jax"]) == set(results["tf"])
    for k in (1, 5):
        for key in (f"{k}shot_accuracy", f"{k}shot_accuracy_std"):
            assert results["jax"][key] == pytest.approx(results["tf"][key], abs=1e-5)
    assert results["jax"]["feature_dim"] == results["tf"]["feature_dim"] == 32


def test_the_demo_passes_the_engine_to_every_stage(tmp_path):
    stages = demo.stage_configs(str(tmp_path), **demo.SMALL, engine="jax")
    assert {config.engine for _, config in stages.values()} == {"jax"}
    # The jax engine always compiles with XLA: its stages leave --jit_compile alone.
    assert {config.get("jit_compile", "auto") for _, config in stages.values()} == {"auto"}
    tf_stages = demo.stage_configs(str(tmp_path), **demo.SMALL)
    assert {config.engine for _, config in tf_stages.values()} == {"tf"}
    assert demo.command(demo.SMALL | {"small": True}, "jax").endswith("--engine=jax --small")


def test_a_demo_workdir_is_resumed_by_its_own_engine_only(tmp_path):
    demo._check_workdir(str(tmp_path), dict(demo.SMALL))
    with pytest.raises(demo.UsageError, match="holds a demo run with other settings"):
        demo._check_workdir(str(tmp_path), dict(demo.SMALL), "jax")


def test_an_unknown_engine_is_a_one_line_error(tmp_path, capsys):
    # An unknown engine starts the tf engine's backend (trainers/engine_env.py), as this process.
    code = finetune.main(["finetune", *DIGITS, "--engine=nope", f"--workdir={tmp_path / 'run'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["finetune: error: flag --engine=nope: value should be one of <tf|jax>"]
    assert not os.path.exists(tmp_path / "run")


def test_a_run_does_not_move_to_the_other_engine_even_when_changes_are_allowed(tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    config = finetune.get_config("digits")
    config.update(workdir=str(workdir), engine="jax")
    (workdir / "config.json").write_text(trainer_flags.config_to_json(config))
    config.update(engine="tf", allow_config_change=True)
    with pytest.raises(errors.UsageError, match="holds a run of --engine=jax, whose checkpoints --engine=tf"):
        validation.check_rerun(config)


@pytest.fixture(scope="module")
def jax_side(tmp_path_factory):
    """The quick checks' jax side, in ONE child on Keras' JAX backend: the jax engine's losses
    (tests/jax_engine_losses.py, saved to LOSSES.npz) and a float16 run on the jax engine.
    {"losses": path, "float16": (workdir, CompletedProcess)}."""
    root = tmp_path_factory.mktemp("jax_side")
    losses, workdir = str(root / "jax.npz"), str(root / "float16")
    float16 = [*DIGITS, "--engine=jax", "--mixed_precision=float16", f"--workdir={workdir}"]
    procs = run_in_one_child(
        [("jax_engine_losses", [losses]), ("trainers.finetune", float16)], env={"KERAS_BACKEND": "jax"}
    )
    assert procs[0].returncode == 0, procs[0].stderr[-2000:]
    return {"losses": losses, "float16": (workdir, procs[1])}


@pytest.mark.slow  # with the next test, 12 s on the 2-core Xeon: the module's JAX child
def test_float16_on_the_jax_engine_is_a_one_line_error(jax_side):
    """A float16 run on the jax engine (which has no loss scaling) must not start: exactly this
    one line, status 2, no workdir. (With tests/test_engines.py's former
    test_jax_engine_refuses_float16_in_one_line, which checked the same line in a child of its own.)"""
    workdir, proc = jax_side["float16"]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "finetune: error: --mixed_precision=float16 (loss scaling) is for --engine=tf; the jax engine's "
        "reduced precision is bfloat16: use --mixed_precision=bfloat16 or auto"
    ]
    assert not os.path.exists(workdir)


# The losses (trainers/numerics.py, shared by the engines) on Keras' JAX backend against
# TensorFlow's, on the same numbers: mixup's soft targets,
# the sigmoid loss on multi-hot and on integer labels, masked patch prediction's per-patch loss
# and hits for each target, and the patches it replaces others by (each tf replica chooses among
# its own micro-batch; the jax step, holding every replica's rows, must choose the same). The jax
# side (tests/jax_engine_losses.py) runs in the module's child on Keras' JAX backend and saves its
# inputs and results; the tf side runs here.
@pytest.mark.slow  # shares the JAX child above
def test_the_jax_engines_losses_match_the_tf_engines(jax_side):
    import tensorflow as tf

    from keras_vit import masked_patches
    from trainers import numerics

    computed = dict(np.load(jax_side["losses"]))
    for loss, labels in LOSSES:
        labels_tensor, logits = tf.constant(computed[labels]), tf.constant(computed["logits"])
        theirs = numerics.per_example_loss(loss, labels_tensor, logits)
        np.testing.assert_allclose(computed[f"{loss}_{labels}"], theirs.numpy(), rtol=1e-5, atol=1e-6)
    for target in ("mean_color", "downsampled", "l2"):
        outputs, targets = (tf.constant(computed[f"{target}_{part}"]) for part in ("outputs", "targets"))
        loss, hits = numerics.masked_patch_per_patch(outputs, targets, target, 3)
        np.testing.assert_allclose(computed[f"{target}_loss"], loss.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(computed[f"{target}_hits"], hits.numpy())
    noise, sources = computed["noise"], computed["sources"]
    for replica in range(2):
        rows = slice(3 * replica, 3 * replica + 3)
        own = masked_patches.replacement_sources(tf.constant(noise[rows])).numpy() + 12 * replica
        np.testing.assert_array_equal(sources[rows], own)
        assert ((sources[rows] >= 12 * replica) & (sources[rows] < 12 * replica + 12)).all()
    # The global norm on JAX is optax's, bit for bit (the jax engine's steps equal optax's), and
    # TensorFlow's to float32 rounding.
    from test_numerics import gradients

    for seed in range(5):
        ours = computed[f"global_norm_{seed}"]
        assert ours == computed[f"optax_global_norm_{seed}"], seed
        theirs = tf.linalg.global_norm([tf.constant(g) for g in gradients(seed)]).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
