"""trainers.demo: the whole `make demo` pipeline at a tiny step budget, end to end, in-process."""

import json
import os

import pytest
from trainer_cli import scalar_tags

from trainers import demo, validation

STAGES = (
    "pretrain",
    "pretrain_masked_patch",
    "fewshot",
    "fewshot_masked_patch",
    "fewshot_random_init",
    "fewshot_pixels",
    "finetune",
    "finetune_10per_class",
    "finetune_masked_patch",
    "finetune_masked_patch_10per_class",
    "scratch",
    "scratch_10per_class",
)
# Each stage evaluates (and probes, and checkpoints) once, at its last step: _every(4) == 4.
SMALL = dict(pretrain_steps=4, finetune_steps=4, few_finetune_steps=2, seeds=2)


@pytest.mark.slow
def test_small_demo_runs_every_stage_and_writes_the_table(tmp_path, capsys, monkeypatch):
    workdir = str(tmp_path / "demo")
    results = demo.run(workdir, small=True, **SMALL)
    out = capsys.readouterr().out

    expected = {
        "pretrain/test_accuracy",
        "pretrain_masked_patch/test_masked_patch_accuracy",
        "finetune/test_accuracy",
        "finetune_10per_class/test_accuracy",
        "finetune_masked_patch/test_accuracy",
        "finetune_masked_patch_10per_class/test_accuracy",
        "scratch/test_accuracy",
        "scratch_10per_class/test_accuracy",
    }
    for probe in ("fewshot", "fewshot_masked_patch", "fewshot_random_init", "fewshot_pixels"):
        expected |= {f"{probe}/{k}shot_accuracy{s}" for k in (1, 5, 10) for s in ("", "_std")}
    assert expected <= set(results)
    for key in expected:
        assert 0.0 <= results[key] <= 1.0, key
    # The raw-pixel probe needs no training: on real digits it is far above chance (0.2) even here.
    assert results["fewshot_pixels/10shot_accuracy"] > 0.7
    with open(os.path.join(workdir, "results.json")) as f:
        assert json.load(f) == results

    # Every stage ran the real trainer in its own workdir, with TensorBoard logs.
    for stage in STAGES:
        assert os.path.exists(os.path.join(workdir, stage, "results.json")), stage
    assert os.path.exists(os.path.join(workdir, "pretrain", "model.npz"))
    pretrain_tags = scalar_tags(os.path.join(workdir, "pretrain", "eval"))
    assert "test/accuracy" in pretrain_tags and "fewshot/digits_5-9/10shot_accuracy" in pretrain_tags
    assert "fewshot/10shot_accuracy" in scalar_tags(os.path.join(workdir, "fewshot", "eval"))
    # The pre-trained probe really used the pre-training run's pre-logits.
    with open(os.path.join(workdir, "fewshot", "results.json")) as f:
        probe = json.load(f)
    assert probe["weights"].endswith(os.path.join("pretrain", "model.npz")) and probe["feature_dim"] == 64
    # The self-supervised run trained without labels, logged its own metric, and its probe and
    # fine-tunes started from its model.npz.
    with open(os.path.join(workdir, "pretrain_masked_patch", "config.json")) as f:
        assert json.load(f)["objective"] == "masked_patch"
    masked_tags = scalar_tags(os.path.join(workdir, "pretrain_masked_patch", "eval"))
    assert "test/masked_patch_accuracy" in masked_tags and "fewshot/digits_5-9/10shot_accuracy" in masked_tags
    for stage in ("fewshot_masked_patch", "finetune_masked_patch"):
        with open(os.path.join(workdir, stage, "config.json")) as f:
            assert json.load(f)["weights"].endswith(os.path.join("pretrain_masked_patch", "model.npz"))

    # One table with every method, and the TensorBoard command.
    for label in (
        "linear probe, pre-trained ViT features",
        "linear probe, masked-patch pre-trained ViT",
        "linear probe, raw pixels",
        "fine-tune the pre-trained ViT",
        "fine-tune the masked-patch pre-trained ViT",
        "by masked patch prediction (no labels)",
        "same ViT from scratch, same budget",
    ):
        assert label in out
    assert f"tensorboard --logdir {workdir}" in out

    # Same command again: the demo takes its own workdir back and the numbers are the same. The
    # pre-training and few-shot stages run again for real (a finished pre-training run restores
    # and re-evaluates, masked objective and probes included; a probe keeps nothing and probes
    # again). The six fine-tuning stages only pass the gate a resumed run passes first, the
    # trainers' re-run check against their config.json, and report what they wrote: the rest of
    # a finished fine-tuning run's re-run is test_finetune.py's test_rerun_of_a_finished_run_....
    def rerun_stage(trainer, config):
        if trainer != "finetune":
            return run_stage(trainer, config)
        validation.check_rerun(config)
        with open(os.path.join(config.workdir, "results.json")) as f:
            return json.load(f)

    run_stage = demo.run_stage
    monkeypatch.setattr(demo, "run_stage", rerun_stage)
    again = demo.run(workdir, small=True, **SMALL)
    out = capsys.readouterr().out
    for stage in ("pretrain", "pretrain_masked_patch"):
        assert f"{os.path.join(workdir, stage, 'checkpoints', 'ckpt-4')} at step 4." in out, stage
    assert {k: v for k, v in again.items() if k != "wall_time_s"} == {
        k: v for k, v in results.items() if k != "wall_time_s"
    }


def test_other_settings_on_the_same_workdir_are_refused(tmp_path, capsys):
    workdir = tmp_path / "demo"
    workdir.mkdir()
    (workdir / "demo_settings.json").write_text(json.dumps({"pretrain_steps": 1}))
    assert demo.main(["demo", f"--workdir={workdir}", "--small"]) == 2
    err = capsys.readouterr().err
    assert "holds a demo run with other settings" in err and err.count("\n") == 1


@pytest.mark.parametrize("stages", [None, ["pretrain", "fewshot"]])
def test_a_workdir_of_an_earlier_version_with_the_same_settings_is_taken_back(tmp_path, stages):
    """Its demo_settings.json has the settings and the model, and one version also listed its stages;
    the stages it has are then resumed, each checked against its config.json by its trainer."""
    settings = dict(demo.SMALL)
    recorded = dict(settings, architecture=demo.ARCHITECTURE)
    if stages:
        recorded["stages"] = stages
    (tmp_path / "demo_settings.json").write_text(json.dumps(recorded))
    demo._check_workdir(str(tmp_path), settings)
    settings["seeds"] += 1
    with pytest.raises(demo.UsageError, match="holds a demo run with other settings"):
        demo._check_workdir(str(tmp_path), settings)


def test_bad_numbers_are_one_line_errors(tmp_path, capsys):
    assert demo.main(["demo", f"--workdir={tmp_path / 'd'}", "--pretrain_steps=0"]) == 2
    assert "--pretrain_steps must be positive" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "d")


def test_help_names_the_real_step_budgets(capsys):
    assert demo.main(["demo", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m trainers.demo")
    assert (
        f"upstream steps (default {demo.FULL['pretrain_steps']}; --small {demo.SMALL['pretrain_steps']})"
        in out
    )
