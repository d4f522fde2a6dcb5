"""Re-running a workdir: same flags resume; other settings stop with one line unless accepted."""

import json
import os
import shutil

import pytest
from fixtures import TINY_SHAPE, flags

from trainers import finetune
from trainers import flags as trainer_flags

TINY = [
    "--dataset=digits",
    *flags(TINY_SHAPE),
    "--batch_size=32",
    "--total_steps=4",
    "--warmup_steps=1",
    "--steps_per_loop=2",
    "--eval_every=0",
    "--checkpoint_every=0",
]


def _run(capsys, workdir, *extra):
    code = finetune.main(["finetune", f"--workdir={workdir}", *TINY, *extra])
    return code, capsys.readouterr()


@pytest.fixture(scope="module")
def _finished_once(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("rerun") / "run"
    assert finetune.main(["finetune", f"--workdir={workdir}", *TINY]) == 0
    return workdir


@pytest.fixture
def finished(_finished_once, tmp_path):
    """A finished run's workdir of this test's own: one run trained per module, copied for each
    test, since each re-runs it with other flags and rewrites its files."""
    return shutil.copytree(_finished_once, tmp_path / "run")


def test_other_settings_stop_with_one_line_listing_them(capsys, finished):
    before = (finished / "config.json").read_text()
    code, out = _run(capsys, finished, "--base_lr=0.3", "--seed=5")
    assert code == 2
    err = out.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("finetune: error: "), err
    assert "--base_lr: 0.1 -> 0.3" in err[0] and "--seed: 0 -> 5" in err[0]
    assert "--allow_config_change" in err[0]
    assert (finished / "config.json").read_text() == before  # nothing rewritten


def test_another_commands_files_are_not_written_over(capsys, tmp_path):
    """A run's end writes results.json, model.npz and class_names.json, and its start config.json:
    in a workdir of the few-shot probes it replaced their config.json and results.json, and in a
    folder of files no run made (model.npz, a results.json: the demo's, the sweep's) it wrote over
    them. Refused before anything is written, even with --allow_config_change: no run is here to
    resume."""
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "config.json").write_text('{"shots": "1,5", "seeds": 3}\n')
    code, out = _run(capsys, probes, "--allow_config_change")
    assert code == 2 and out.err.count("\n") == 1
    assert out.err.startswith(f"finetune: error: {probes / 'config.json'} is no training run's")
    assert sorted(os.listdir(probes)) == ["config.json"]

    other = tmp_path / "other"
    other.mkdir()
    (other / "model.npz").write_bytes(b"weights of some other program")
    (other / "results.json").write_text("{}\n")
    code, out = _run(capsys, other)
    assert code == 2 and out.err.count("\n") == 1
    assert f"{other} holds results.json and model.npz but no config.json" in out.err
    assert sorted(os.listdir(other)) == ["model.npz", "results.json"]
    assert (other / "model.npz").read_bytes() == b"weights of some other program"


def test_allow_config_change_resumes_under_the_new_settings(capsys, finished):
    code, out = _run(capsys, finished, "--base_lr=0.3", "--allow_config_change")
    assert code == 0 and "Resumed from" in out.out
    assert json.loads((finished / "config.json").read_text())["base_lr"] == 0.3


@pytest.mark.parametrize("change", [["--mlp_dim=80"], ["--optimizer=adam"]], ids=["model", "optimizer"])
def test_allow_config_change_to_what_the_checkpoint_cannot_hold_is_one_line(capsys, finished, change):
    # A checkpoint holds the model and optimizer of its settings: restoring it under another
    # shape or optimizer had ended in a traceback, with config.json already rewritten to the new
    # settings, so that the run's own command was refused after.
    before = (finished / "config.json").read_text()
    code, out = _run(capsys, finished, *change, "--allow_config_change")
    assert code == 2 and out.err.count("\n") == 1, out.err
    assert "does not fit this run's model or optimizer (" in out.err
    assert "rerun with those (the workdir's config.json), or use another --workdir" in out.err
    assert (finished / "config.json").read_text() == before
    code, out = _run(capsys, finished, "--total_steps=6")
    assert code == 0 and "at step 4" in out.out, out.err


def test_another_trainers_run_is_not_resumed(capsys, finished):
    # A pre-training run resumed by trainers.finetune listed pre-training's own flags as changes
    # and offered --allow_config_change, whose restore cannot fit the other trainer's model.
    path = finished / "config.json"
    recorded = json.loads(path.read_text())
    del recorded["new_head"], recorded["sweep_lrs"]
    path.write_text(json.dumps({**recorded, "objective": "classification", "recipe": "imagenet2012"}))
    code, out = _run(capsys, finished, "--allow_config_change")
    assert code == 2 and out.err.count("\n") == 1
    assert out.err.startswith(
        f"finetune: error: {finished} holds a trainers.pretrain run: resume it with python -m "
        f"trainers.pretrain, or start from its model with --weights={finished} and another --workdir"
    )


def test_a_config_from_before_a_field_existed_resumes_at_its_default(capsys, finished):
    # A workdir written by an earlier release has no entry for a field added since: it ran as the
    # field's default does, so only another value is a change.
    path = finished / "config.json"
    recorded = json.loads(path.read_text())
    del recorded["posemb"], recorded["augreg"]
    path.write_text(json.dumps(recorded))
    code, out = _run(capsys, finished, "--total_steps=6")
    assert code == 0 and "Resumed from" in out.out
    path.write_text(json.dumps(recorded))
    code, out = _run(capsys, finished, "--posemb=sincos_2d")
    assert code == 2 and "--posemb: 'learned_1d' -> 'sincos_2d'" in out.err


def test_run_length_and_logging_may_change(capsys, finished):
    code, out = _run(capsys, finished, "--total_steps=6", "--eval_every=2", "--steps_per_loop=1")
    assert code == 0 and "Resumed from" in out.out and "at step 4" in out.out
    assert json.loads((finished / "results.json").read_text())["steps"] == 6


def test_a_lower_total_steps_says_the_run_is_past_it_and_ends_as_it_is(capsys, finished):
    """The banner said "steps: 2 ..., from step 4" and the run ended without a word on why nothing
    trained; its results are still the step-4 model's."""
    code, out = _run(capsys, finished, "--total_steps=2")
    assert code == 0
    assert (
        "The run is at step 4, past --total_steps=2: nothing to train; it ends with the model of step 4."
        in out.out
    )
    assert json.loads((finished / "results.json").read_text())["steps"] == 4


def test_a_run_resumes_at_another_precision_but_not_into_float16(capsys, finished):
    # A workdir from before --mixed_precision=auto recorded "none"; its float32 checkpoint
    # resumes under auto and under bfloat16 alike. float16 adds loss-scaling state: a change.
    path = finished / "config.json"
    recorded = json.loads(path.read_text())
    recorded["mixed_precision"] = "none"
    path.write_text(json.dumps(recorded))
    code, out = _run(capsys, finished, "--total_steps=6", "--mixed_precision=bfloat16")
    assert code == 0 and "at step 4" in out.out and "precision bfloat16" in out.out
    assert json.loads((finished / "results.json").read_text())["steps"] == 6
    code, out = _run(capsys, finished, "--total_steps=6")  # auto
    assert code == 0, out.err
    code, out = _run(capsys, finished, "--mixed_precision=float16")
    assert code == 2 and "--mixed_precision: 'auto' -> 'float16'" in out.err


def test_model_flag_resets_the_presets_shape_overrides():
    digits = trainer_flags.parse_flags(["finetune", "--dataset=digits"], finetune.get_config)
    assert digits.hidden_size == 64 and digits.num_layers == 4
    small = trainer_flags.parse_flags(
        ["finetune", "--dataset=digits", "--model=ViT-S_16"], finetune.get_config
    )
    assert (small.patch_size, small.hidden_size, small.num_layers, small.num_heads, small.mlp_dim) == (0,) * 5
    kept = trainer_flags.parse_flags(
        ["finetune", "--dataset=digits", "--model=ViT-S_16", "--num_layers=2"], finetune.get_config
    )
    assert kept.num_layers == 2 and kept.hidden_size == 0


def test_weights_file_alone_gives_the_architecture(capsys, tmp_path):
    """A pre-training run's model.npz loads into fine-tuning without shape flags."""
    import keras_vit

    model = keras_vit.ViT(
        image_size=16,
        patch_size=4,
        hidden_size=24,
        num_layers=1,
        num_heads=3,
        mlp_dim=40,
        num_classes=5,
        representation_size=24,
        classifier="gap",
    )
    path = str(tmp_path / "pre.npz")
    keras_vit.weights.save_npz(model, path)
    config = trainer_flags.parse_flags(
        ["finetune", "--dataset=digits", f"--weights={path}"], finetune.get_config
    )
    shape = (config.patch_size, config.hidden_size, config.num_layers, config.num_heads, config.mlp_dim)
    assert shape == (4, 24, 1, 3, 40) and config.classifier == "gap"
    # An explicit --model keeps the old contract: the variant's shape, and a mismatch is one line.
    explicit = trainer_flags.parse_flags(
        ["finetune", "--dataset=digits", "--model=ViT-Ti_16", f"--weights={path}"], finetune.get_config
    )
    assert explicit.hidden_size == 0
    code = finetune.main(
        [
            "finetune",
            "--dataset=digits:5-9",
            f"--weights={path}",
            f"--workdir={tmp_path / 'ft'}",
            "--total_steps=2",
            "--warmup_steps=1",
            "--batch_size=16",
            "--eval_every=0",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "ft" / "results.json").read_text())["steps"] == 2


def test_an_unknown_registry_name_lists_the_known_ones(capsys, tmp_path):
    code = finetune.main(
        ["finetune", "--dataset=digits", "--weights=imagenet22k", f"--workdir={tmp_path / 'r'}"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "'imagenet22k' is not a registry name; known names: augreg-imagenet21k" in err[0]
    assert "imagenet21k+imagenet2012" in err[0]
