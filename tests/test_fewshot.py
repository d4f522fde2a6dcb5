"""trainers.fewshot: features of frozen models, the evaluator, the command line and its errors."""

import errno
import json
import os

import command_server
import keras
import numpy as np
import pytest
import tensorflow as tf
from fixtures import flags
from trainer_cli import make_fake_tfds, read_results, run_as_a_user, run_cli, scalar_tags

import keras_vit
from keras_vit import fileio
from keras_vit import weights as weights_lib
from trainers import data, distribute, errors, features, fewshot, finetune, linear_probe, workdir_lock
from trainers import plan as plan_lib
from trainers.flags import config_to_json

# The digits' own 8 px in 4 px patches, width 16: the accuracies below are this model's.
SHAPE = dict(image_size=8, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)
TINY = dict(SHAPE, include_preprocessing=False)
TINY_FLAGS = ["--model=ViT-Ti_16", *flags(SHAPE)]


def tiny_vit(**overrides):
    keras.utils.set_random_seed(0)
    return keras_vit.ViT(**{**TINY, "num_classes": 5, **overrides})


@pytest.mark.parametrize(
    "kwargs,dims",
    [
        (dict(representation_size=12), 12),  # head + pre-logits: the pre-logits
        (dict(), 16),  # head only: the class token
        (dict(classifier="gap"), 16),
        (dict(include_top=False, pooling="token", representation_size=12), 12),
    ],
)
def test_representation_is_what_the_head_sees(kwargs, dims):
    model = tiny_vit(**kwargs)
    images = np.random.default_rng(0).uniform(-1, 1, (3, 8, 8, 3)).astype("float32")
    out = np.asarray(features.representation_model(model)(images))
    assert out.shape == (3, dims)
    if "representation_size" in kwargs and kwargs.get("include_top", True):
        expected = model.get_layer("head").input
        np.testing.assert_allclose(out, keras.Model(model.input, expected)(images), atol=1e-6)


def test_representation_of_other_keras_models():
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Dense(6, name="features")(keras.layers.Flatten()(inputs))
    classifier = keras.Model(inputs, keras.layers.Dense(5, name="head")(hidden))
    assert features.representation_model(classifier).output_shape == (None, 6)
    maps = keras.Model(inputs, keras.layers.Conv2D(4, 3)(inputs), name="maps")
    with pytest.raises(errors.IncompatibleModelError, match="no 'head' or 'pre_logits' layer"):
        features.representation_model(maps)


def test_extract_features_drops_padding_and_agrees_across_replicas():
    spec = data.get_spec("digits:5-9")
    model = tiny_vit(representation_size=12)
    x1, y1 = fewshot.extract_features(model, spec, "test", image_size=8, batch_size=64)
    assert x1.shape == (spec.num_examples["test"], 12) and len(y1) == len(x1)
    assert set(np.unique(y1)) == set(range(5))
    mirrored = distribute.create_strategy("cpu", cpu_devices=2)
    x2, y2 = fewshot.extract_features(model, spec, "test", image_size=8, batch_size=64, strategy=mirrored)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(x1, x2, atol=1e-5)


def test_evaluator_on_pixels_reports_every_shot_above_chance():
    evaluator = fewshot.FewShotEvaluator(
        ["digits:5-9"], image_size=8, batch_size=128, shots="1,5,10", seeds=2
    )
    results = evaluator.run(fewshot.PIXELS)
    assert sorted(results) == sorted(
        f"fewshot/digits_5-9/{k}shot_accuracy{s}" for k in (1, 5, 10) for s in ("", "_std")
    )
    assert results["fewshot/digits_5-9/1shot_accuracy"] > 0.4  # chance is 0.2
    assert results["fewshot/digits_5-9/10shot_accuracy"] > 0.8
    # Features are cached; a second call gives the same numbers.
    assert evaluator.run(fewshot.PIXELS) == results


def test_pixel_features_are_the_flattened_images(tmp_path):
    spec = data.get_spec("digits:5-9")
    x, y = fewshot.extract_features(fewshot.PIXELS, spec, "test", image_size=8, batch_size=64)
    input_fn = data.make_input_fn(spec, "test", image_size=8, global_batch_size=64, training=False)
    images, labels = [], []
    for batch_images, batch_labels, weights in input_fn(tf.distribute.InputContext()):
        keep = weights.numpy() > 0
        images.append(batch_images.numpy()[keep])
        labels.append(batch_labels.numpy()[keep])
    np.testing.assert_array_equal(x, np.concatenate(images).reshape(len(x), 8 * 8 * 3))
    np.testing.assert_array_equal(y, np.concatenate(labels))


# The demo's probes in one process: four models, then the raw pixels.
PROBES_IN_ONE_PROCESS = """
from trainers import fewshot
import keras, keras_vit
evaluator = fewshot.FewShotEvaluator("digits:5-9", image_size=8, batch_size=512, shots=(1,), seeds=1)
for seed in range(4):
    keras.utils.set_random_seed(seed)
    evaluator.run(keras_vit.ViT(**{tiny}, num_classes=5))
evaluator.run(fewshot.PIXELS)
"""


@pytest.mark.slow  # 21 s: a child imports TensorFlow and probes five times
def test_probing_several_models_in_one_process_keeps_stderr_clean():
    """Each model's features need a compiled step of their own; the raw pixels need none. Once a
    process has compiled the same code five times in a few calls, TensorFlow warns on stderr
    that it is "retracing" (the demo's pixel probe did, after a pre-training run and three probes)."""
    script = PROBES_IN_ONE_PROCESS.format(tiny=TINY)
    # As a user runs it (the trainers hide TensorFlow's own lines), forked: the warning counts the
    # compilations of the process's own run, which the server's import made none of.
    proc = run_as_a_user(command_server.CODE, [script])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == "", proc.stderr[-2000:]


def test_evaluator_follows_a_model_that_keeps_training():
    model = tiny_vit(representation_size=12)
    evaluator = fewshot.FewShotEvaluator("digits:5-9", image_size=8, batch_size=128, shots=(2,), seeds=1)
    before = evaluator.run(model)
    # New random pre-logits weights (a sign flip or a rescale would not do: whitened ridge probes
    # are invariant to both).
    kernel = model.get_layer("pre_logits").kernel
    kernel.assign(np.random.default_rng(7).normal(size=kernel.shape).astype("float32"))
    after = evaluator.run(model)
    assert before.keys() == after.keys()
    assert before != after  # the new weights were used, not stale cached features


def test_sweep_and_too_many_shots(tmp_path):
    evaluator = fewshot.FewShotEvaluator(
        "digits:5-9", image_size=8, batch_size=128, shots=(5,), seeds=1, l2_reg="sweep"
    )
    results = evaluator.run(fewshot.PIXELS)
    assert results["fewshot/digits_5-9/5shot_accuracy"] > 0.6
    assert evaluator.l2_used[("digits_5-9", 5)] in linear_probe.L2_SWEEP
    too_many = fewshot.FewShotEvaluator("digits:5-9", image_size=8, batch_size=128, shots=(1, 500), seeds=1)
    with pytest.raises(errors.FewShotError, match="500-shot .* use --shots no larger than 1[0-9][0-9]"):
        too_many.run(fewshot.PIXELS)


def run_main(argv, capsys):
    code = fewshot.main(["fewshot", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--dataset=digits:5-9", "--model=pixels", "--shots=1,500"], "500-shot needs 500 examples"),
        (["--dataset=no_such_dataset_xyz", "--model=pixels"], "no_such_dataset_xyz"),
        (["--dataset=digits:5-9", "--model=ViT-Q_99"], "unknown --model 'ViT-Q_99'"),
        (["--dataset=digits:5-9", "--model=pixels", "--l2_reg=-1"], "--l2_reg must be a positive number"),
        (["--dataset=digits:5-9", "--model=pixels", "--shots=a,b"], "--shots must be comma-separated"),
    ],
)
def test_errors_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    workdir = tmp_path / "run"
    code, err = run_main(argv + [f"--workdir={workdir}", "--image_size=8"], capsys)
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not os.path.exists(workdir / "results.json")


def test_a_workdir_that_cannot_be_created_is_one_line(tmp_path, capsys, monkeypatch):
    """Under a file (a usage error, found before the features are extracted) or refused by the disk
    (at the run's first write): both were tracebacks from TensorBoard's file writer."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    argv = ["--dataset=digits:5-9", "--model=pixels", "--image_size=8"]
    code, err = run_main([*argv, f"--workdir={notes / 'run'}"], capsys)
    assert code == 2 and err.count("\n") == 1 and f"'{notes}' is a file, not a folder" in err

    def refuse(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(fileio, "makedirs", refuse)
    code, err = run_main([*argv, f"--workdir={tmp_path / 'run'}"], capsys)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"fewshot: error: cannot create the workdir {tmp_path}/run: permission denied;")


@pytest.mark.parametrize(
    "split, message",
    [("--train_split=trian", "bad split 'trian'"), ("--test_split=test[:0]", "has no examples")],
)
def test_a_bad_split_is_one_line_before_the_workdir_is_made(split, message, tmp_path, capsys):
    """The TensorBoard writers made the workdir before the probes found the split."""
    workdir = tmp_path / "run"
    code, err = run_main(
        ["--dataset=digits:5-9", "--model=pixels", "--image_size=8", split, f"--workdir={workdir}"], capsys
    )
    assert code == 2 and message in err and err.count("\n") == 1
    assert not workdir.exists()


def test_the_probes_write_over_earlier_probes_only(tmp_path, capsys):
    """The probes write config.json and results.json at their end: into a training run's workdir
    they replaced that run's own (its results gone, its resume checked against the probes'
    settings), and into the demo's or the sweep's workdir its results.json. Now those are refused
    before anything runs, and a rerun of the probes replaces their own files."""
    argv = ["--dataset=digits:5-9", "--model=pixels", "--image_size=8", "--shots=1", "--seeds=1"]
    training = tmp_path / "training"
    training.mkdir()
    finetune_config = config_to_json(finetune.get_config("digits"))
    (training / "config.json").write_text(finetune_config)
    (training / "results.json").write_text('{"steps": 500}\n')
    code, err = run_main([*argv, f"--workdir={training}"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(
        f"fewshot: error: {training} holds a training run, whose config.json and results.json"
    )
    assert (training / "config.json").read_text() == finetune_config
    assert (training / "results.json").read_text() == '{"steps": 500}\n'

    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "results.json").write_text('{"stages": 15}\n')
    code, err = run_main([*argv, f"--workdir={demo}"], capsys)
    assert code == 2 and f"{demo} holds results.json but no config.json" in err and err.count("\n") == 1
    assert sorted(os.listdir(demo)) == ["results.json"]

    probes = tmp_path / "probes"
    assert run_main([*argv, f"--workdir={probes}"], capsys)[0] == 0
    assert run_main([*argv, "--shots=2", f"--workdir={probes}"], capsys)[0] == 0
    assert read_results(probes)["shots"] == [2]
    assert json.loads((probes / "config.json").read_text())["shots"] == "2"
    # A run holding the folder (a training run started there as the probes began) keeps it: the
    # probes took no lock, and their end replaced that run's config.json.
    with workdir_lock.held(str(probes)):
        code, err = run_main([*argv, "--shots=3", f"--workdir={probes}"], capsys)
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"fewshot: error: {probes} is in use by another run (process {os.getpid()} on")
    assert read_results(probes)["shots"] == [2]


def test_checkpoint_of_another_variant_is_a_one_line_error(tmp_path, capsys):
    other = tiny_vit(hidden_size=24, representation_size=24)
    path = str(tmp_path / "other.npz")
    weights_lib.save_npz(other, path)
    code, err = run_main(
        ["--dataset=digits:5-9", *TINY_FLAGS, f"--weights={path}", f"--workdir={tmp_path / 'run'}"], capsys
    )
    assert code == 2 and err.count("\n") == 1
    assert "ViT-Ti_16" in err and "does not fit this model" in err and "hidden_size=24" in err


def test_probes_of_pretrained_npz_use_its_pre_logits(tmp_path):
    model = tiny_vit(representation_size=12)
    path = str(tmp_path / "model.npz")
    weights_lib.save_npz(model, path)
    config = fewshot.get_config("digits:5-9")
    config.update(SHAPE, model="ViT-Ti_16")
    config.update(weights=path, pre_logits=False, shots="1,3", seeds=2, workdir=str(tmp_path / "run"))
    results = fewshot.run(config)
    assert results["feature_dim"] == 12  # the file's pre-logits, not the 16-dim class token
    assert {"1shot_accuracy", "3shot_accuracy_std"} <= set(results)
    config.l2_reg = "sweep"
    config.workdir = str(tmp_path / "sweep")
    assert fewshot.run(config)["3shot_l2_reg"] in linear_probe.L2_SWEEP


def test_tensorboard_tags_are_the_documented_ones(tmp_path):
    # docs/guides/fewshot.md: fewshot/{k}shot_accuracy (and _std) at step 0, and
    # fewshot/accuracy_by_shots whose step is k; not the evaluator's fewshot/data/... names.
    config = fewshot.get_config("digits:5-9")
    config.update(model="pixels", image_size=8, shots="1,3", seeds=2, workdir=str(tmp_path / "run"))
    results = fewshot.run(config)
    tags = scalar_tags(tmp_path / "run" / "eval")
    expected = {f"fewshot/{k}shot_accuracy{s}" for k in (1, 3) for s in ("", "_std")}
    assert set(tags) == expected | {"fewshot/accuracy_by_shots"}
    for k in (1, 3):
        assert tags[f"fewshot/{k}shot_accuracy"] == [(0, pytest.approx(results[f"{k}shot_accuracy"]))]
    assert [step for step, _ in tags["fewshot/accuracy_by_shots"]] == [1, 3]


def test_probes_build_no_head_and_report_none(tmp_path, caplog):
    # A checkpoint with a 5-class head, probed on 10 classes: the probe fits its own classifier,
    # so no "new zero-initialised head" (there is none) may be reported.
    model = tiny_vit()
    path = str(tmp_path / "model.npz")
    weights_lib.save_npz(model, path)
    config = fewshot.get_config("digits")
    for flag in TINY_FLAGS:
        name, value = flag[2:].split("=")
        config[name] = type(config[name])(value)
    config.update(weights=path, pre_logits=False)
    with caplog.at_level("INFO", logger="keras_vit"):
        probe = fewshot.build_feature_model(plan_lib.resolve_probes(config, tf.distribute.get_strategy()), 10)
    assert "head" not in caplog.text, caplog.text
    assert "head" not in [layer.name for layer in probe.layers]
    images = np.random.default_rng(0).uniform(-1, 1, (2, 8, 8, 3)).astype("float32")
    # The representation is the one a model with the checkpoint's head would give its head.
    expected = features.representation_model(model)(images)
    np.testing.assert_allclose(features.representation_model(probe)(images), expected, atol=1e-6)


@pytest.fixture(scope="module")
def cifar10_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tfds")
    make_fake_tfds(path, "cifar10", per_class=12, test_per_class=8)
    return str(path)


@pytest.mark.slow
def test_cli_on_tfds_data_with_a_trained_model(cifar10_dir, tmp_path):
    from trainers import finetune

    train = finetune.get_config("cifar10")
    for flag in TINY_FLAGS:
        name, value = flag[2:].split("=")
        train[name] = type(train[name])(value)
    train.update(
        data_dir=cifar10_dir,
        workdir=str(tmp_path / "train"),
        weights="none",
        total_steps=60,
        warmup_steps=5,
        batch_size=40,
        base_lr=0.05,
        steps_per_loop=20,
        eval_every=0,
        checkpoint_every=0,
        train_split="train",
        eval_splits="test=test",
        jit_compile="false",
    )
    finetune.run(train)

    workdir = tmp_path / "fewshot"
    proc = run_cli(
        "fewshot",
        [
            "--dataset=cifar10",
            f"--data_dir={cifar10_dir}",
            *TINY_FLAGS,
            f"--weights={tmp_path / 'train' / 'model.npz'}",
            "--shots=1,2,5,10",
            "--seeds=3",
            "--batch_size=32",
            f"--workdir={workdir}",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = read_results(workdir)
    for k in (1, 2, 5, 10):
        assert 0 <= results[f"{k}shot_accuracy_std"] < 0.5
        assert results[f"{k}shot_accuracy"] > 0.1  # chance
    assert results["10shot_accuracy"] > 0.3
    assert results["test_examples"] == 80 and results["train_examples"] == 120
    tags = scalar_tags(workdir / "eval")
    assert {"fewshot/1shot_accuracy", "fewshot/10shot_accuracy", "fewshot/accuracy_by_shots"} <= set(tags)
    assert [step for step, _ in tags["fewshot/accuracy_by_shots"]] == [1, 2, 5, 10]
    with open(workdir / "config.json") as f:
        assert json.load(f)["shots"] == "1,2,5,10"

    # The real command line reports bad input as one line, exit code 2, nothing written.
    bad = run_cli(
        "fewshot",
        [
            "--dataset=cifar10",
            f"--data_dir={cifar10_dir}",
            "--model=pixels",
            "--image_size=8",
            "--shots=13",
            f"--workdir={tmp_path / 'bad'}",
        ],
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "13-shot needs 13 examples" in bad.stderr.strip().splitlines()[-1]
    assert not os.path.exists(tmp_path / "bad" / "results.json")
