"""trainers.demo: the whole `make demo` pipeline at a tiny step budget, end to end, in-process;
one stage as the command it is; the README's table against the committed results.json."""

import errno
import json
import os
import re

import pytest
from fixtures import TINY_DIGITS
from trainer_cli import ROOT, read_results, run_as_a_user, scalar_tags

from benchmarks import report
from configs import demo as demo_config
from keras_vit import fileio
from trainers import demo, fewshot, finetune, pretrain, reproducible, validation
from trainers.flags import parse_flags

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
# The 10-per-class fine-tunes run again with seed 1 (configs/demo.py REPEATED), after the others.
REPEATS = (
    "finetune_10per_class_seed1",
    "finetune_masked_patch_10per_class_seed1",
    "scratch_10per_class_seed1",
)
# Each stage evaluates (and probes, and checkpoints) once, at its last step: _every(4) == 4.
SMALL = dict(pretrain_steps=4, finetune_steps=4, few_finetune_steps=2, seeds=2, few_runs=2)
# This process's TensorFlow may have started its runtime already (other tests), with a thread
# count of its own: the stages take it as it is. The pinned count is checked by
# test_a_stage_runs_pinned_as_its_command_with_nothing_on_stderr.
IN_PROCESS = dict(demo.PINNED, cpu_threads=0)
# The stages on tests/fixtures.py's digits shape: what this test checks is the pipeline (every
# stage, the weights each hands on, the table), not the demo's model, which the stage run as its
# command below keeps.
TINY_ARCHITECTURE = dict(demo_config.ARCHITECTURE, **TINY_DIGITS)


@pytest.mark.slow
def test_small_demo_runs_every_stage_and_writes_the_table(tmp_path, capsys, monkeypatch):
    for module in (demo_config, demo):
        monkeypatch.setattr(module, "ARCHITECTURE", TINY_ARCHITECTURE)
    workdir = str(tmp_path / "demo")
    results = demo.run(workdir, small=True, pinned=IN_PROCESS, **SMALL)
    out = capsys.readouterr().out
    for stage in ("pretrain", "scratch_10per_class_seed1"):  # the first stage and the last ran it
        with open(os.path.join(workdir, stage, "config.json")) as f:
            assert json.load(f)["hidden_size"] == TINY_DIGITS["hidden_size"]

    # Where the run is: every stage counted, an overall ETA after each, the smoke test named.
    n = len(STAGES + REPEATS)
    for k, stage in enumerate(STAGES + REPEATS, 1):
        assert f"=== [{k}/{n}] {stage}: python -m trainers." in out, stage
        assert re.search(rf"=== \[{k}/{n}\] {stage} done in \d+ s; \d+:\d\d:\d\d so far, ", out), stage
    assert len(re.findall(r"about \d+:\d\d:\d\d left ===", out)) == n - 1
    assert out.count("SMOKE TEST (--small)") == 1 and "demo, smoke test (--small)" in out

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
    # A repeated row is the mean of its two runs, each its own stage's number, with their spread.
    for stage in demo_config.REPEATED:
        runs = [
            read_results(os.path.join(workdir, name))["eval"]["test"]["accuracy"]
            for name in (stage, f"{stage}_seed1")
        ]
        assert results[f"{stage}/test_accuracy_runs"] == runs
        assert results[f"{stage}/test_accuracy"] == pytest.approx(sum(runs) / 2)
        assert results[f"{stage}/test_accuracy_std"] == pytest.approx(abs(runs[0] - runs[1]) / 2)
    with open(os.path.join(workdir, "scratch_10per_class_seed1", "config.json")) as f:
        assert json.load(f)["seed"] == 1
    # The raw-pixel probe needs no training: on real digits it is far above chance (0.2) even here.
    assert results["fewshot_pixels/10shot_accuracy"] > 0.7
    with open(os.path.join(workdir, "results.json")) as f:
        assert json.load(f) == results

    # Every stage ran the real trainer in its own workdir, with TensorBoard logs.
    for stage in STAGES + REPEATS:
        assert os.path.exists(os.path.join(workdir, stage, "results.json")), stage
    assert os.path.exists(os.path.join(workdir, "pretrain", "model.npz"))
    pretrain_tags = scalar_tags(os.path.join(workdir, "pretrain", "eval"))
    assert "test/accuracy" in pretrain_tags and "fewshot/digits_5-9/10shot_accuracy" in pretrain_tags
    assert "fewshot/10shot_accuracy" in scalar_tags(os.path.join(workdir, "fewshot", "eval"))
    # The pre-trained probe really used the pre-training run's pre-logits.
    with open(os.path.join(workdir, "fewshot", "results.json")) as f:
        probe = json.load(f)
    assert (
        probe["weights"].endswith(os.path.join("pretrain", "model.npz"))
        and probe["feature_dim"] == TINY_DIGITS["hidden_size"]
    )
    # The table's test-set sizes: the probes score the split the fine-tuning runs evaluate on.
    assert probe["test_examples"] == results["downstream/test_images"] == 180
    assert results["upstream/test_images"] == 180
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
    again = demo.run(workdir, small=True, pinned=IN_PROCESS, **SMALL)
    out = capsys.readouterr().out
    for stage in ("pretrain", "pretrain_masked_patch"):
        assert f"{os.path.join(workdir, stage, 'checkpoints', 'ckpt-4')} at step 4." in out, stage
    # The same numbers; the time and the machine's load are the second run's own.
    assert {k: v for k, v in again.items() if k not in ("wall_time_s", "machine")} == {
        k: v for k, v in results.items() if k not in ("wall_time_s", "machine")
    }
    assert "load_average" in again["machine"] and again["machine"]["cpu"] == results["machine"]["cpu"]


def test_a_stage_stopped_by_sigterm_stops_the_demo(tmp_path, capsys, monkeypatch):
    """The stage saved what its rerun needs and returned {"preempted": ...}: the demo went on to
    the next stages as if it had finished, and the first that read its model failed."""
    ran = []

    def preempted_stage(trainer, config):
        ran.append(config.workdir)
        return {"preempted": True, "steps": 10}

    monkeypatch.setattr(demo, "run_stage", preempted_stage)
    workdir = tmp_path / "demo"
    assert demo.run(str(workdir), small=True, pinned=IN_PROCESS, **SMALL) is None
    assert ran == [str(workdir / "pretrain")]
    out = capsys.readouterr().out
    assert out.rstrip().endswith("=== [1/15] pretrain stopped; the demo stops with it ===")
    assert not (workdir / "results.json").exists()


def _as_flags(fields):
    return [
        f"--{name}={str(value).lower() if isinstance(value, bool) else value}"
        for name, value in fields.items()
    ]


@pytest.mark.parametrize("engine", ["tf", "jax"])
@pytest.mark.parametrize("stage", STAGES + REPEATS[-1:])
def test_a_stage_is_a_preset_its_trainers_command_line_gives(tmp_path, stage, engine):
    """What the demo runs is the stage's preset (configs/demo.py), and that is the trainer's own
    preset with the stage's fields given as flags: the one way a named set of settings is made."""
    workdir = str(tmp_path / "demo")
    trainer, config = demo.stage_configs(workdir, **SMALL, engine=engine)[stage]
    assert tuple(demo_config.stages(2)) == STAGES + REPEATS and demo_config.stages(2)[stage] == trainer
    pinned = demo.pinned_for(engine)
    assert engine == "tf" or "jit_compile" not in pinned  # the jax engine compiles with XLA anyway
    assert (
        config.to_dict()
        == demo_config.get_config(stage, workdir, **SMALL, pinned=pinned, engine=engine).to_dict()
    )
    given = demo_config.stage_flags(stage, workdir, **SMALL, pinned=pinned, engine=engine)
    module = {"pretrain": pretrain, "fewshot": fewshot, "finetune": finetune}[trainer]
    parsed = parse_flags([trainer, *_as_flags(given)], module.get_config)
    assert parsed.to_dict() == config.to_dict()


def test_the_demo_runs_the_stages_presets_at_its_full_budget_by_default(tmp_path):
    full = demo.stage_configs(str(tmp_path), **demo.FULL)
    for stage, (_, config) in full.items():
        assert config.to_dict() == demo_config.get_config(stage, str(tmp_path)).to_dict(), stage


def test_stages_pin_what_varies_by_machine(tmp_path):
    for name, (trainer, config) in demo.stage_configs(str(tmp_path), **SMALL).items():
        assert config.cpu_threads == demo_config.CPU_THREADS, name
        if trainer != "fewshot":  # the few-shot trainer computes in float32 without XLA anyway
            assert (config.mixed_precision, config.jit_compile) == ("none", "false"), name


@pytest.mark.slow  # 33 s: a child runs a demo stage
def test_a_stage_runs_pinned_as_its_command_with_nothing_on_stderr(tmp_path):
    """The demo's last stage as `python -m trainers.finetune` with its config's flags, in the
    environment `python -m trainers.demo` sets: its banner names the pins, stderr stays empty."""
    _, config = demo.stage_configs(str(tmp_path / "demo"), **SMALL)["scratch_10per_class"]
    flags = _as_flags(config)
    # As a user runs it (the trainers hide TensorFlow's own lines), in a fresh interpreter: the
    # pins are set before TensorFlow loads.
    args = [*flags, "--total_steps=2"]
    proc = run_as_a_user("trainers.finetune", args, reproducible.ENVIRONMENT, fresh=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == ""
    hardware = next(line for line in proc.stdout.splitlines() if line.startswith("hardware:"))
    assert "XLA off; precision float32; 2 CPU threads, kernels pinned (TF_ENABLE_ONEDNN_OPTS=0" in hardware
    assert read_results(config.workdir)["eval"]["test"]["examples"] == 180


def test_the_demo_page_table_is_the_committed_full_run(tmp_path):
    with open(report.DEMO_PAGE, encoding="utf-8") as f:
        page = f.read()
    region = report.region(page, report.DEMO_BEGIN, report.DEMO_END)
    assert region == report.demo_markdown().strip(), "run python -m benchmarks.report --write"
    results = read_results(os.path.dirname(report.DEMO_RESULTS))
    # It is `make demo`'s command, run with every stage pinned.
    assert results["settings"] == dict(demo.FULL, small=False)
    assert "```bash\npython -m trainers.demo --workdir=runs/demo\n```" in region
    assert results["cpu_kernels"].startswith("pinned (") and "SMOKE TEST" not in region
    assert f"total {results['wall_time_s'] / 60:.1f} min" in region
    # The region has each task's test-set size and chance level.
    assert "digits 0-4, 180 test images, 5 classes (chance 0.200)" in region
    assert "digits 5-9, 180 test images, 5 classes (chance 0.200)" in region

    # Another number in the results makes the page stale.
    results["scratch/test_accuracy"] = 0.5
    changed = tmp_path / "results.json"
    changed.write_text(json.dumps(results), encoding="utf-8")
    assert report.main(["--check", f"--demo_results={changed}"]) == 1
    assert report.main(["--check"]) == 0
    assert os.path.commonpath([report.DEMO_RESULTS, ROOT]) == ROOT


def test_the_readme_headline_is_the_committed_demo():
    with open(report.README, encoding="utf-8") as f:
        headline = report.region(f.read(), report.HEADLINE_BEGIN, report.HEADLINE_END)
    assert headline == report.demo_headline().strip(), "run python -m benchmarks.report --write"
    results = read_results(os.path.dirname(report.DEMO_RESULTS))
    key = "finetune_masked_patch_10per_class/test_accuracy"
    runs = results["settings"]["few_runs"]
    assert f"over {runs} runs" in headline and len(results[f"{key}_runs"]) == runs > 1
    assert f"{results[key]:.3f} ± {results[key + '_std']:.3f}" in headline


def _results(**accuracies):
    """A full run's results.json with these means (stage: mean or (mean, std)); the rest 0.5."""
    results = {
        "settings": dict(demo.FULL),
        "wall_time_s": 1800.0,
        "downstream/test_images": 180,
        "machine": {"cpu": "AMD EPYC", "cores": 2, "load_average": 7.9},
    }
    for stage in ("finetune", "finetune_masked_patch", "scratch"):
        results[f"{stage}/test_accuracy"] = 0.5
        results[f"{stage}_10per_class/test_accuracy"] = 0.5
        results[f"{stage}_10per_class/test_accuracy_std"] = 0.01
    for probe in ("fewshot", "fewshot_masked_patch", "fewshot_random_init", "fewshot_pixels"):
        results.update({f"{probe}/{k}shot_accuracy": 0.5 for k in (1, 5, 10)})
    for key, value in accuracies.items():
        mean, std = value if isinstance(value, tuple) else (value, None)
        results[key] = mean
        if std is not None:
            results[f"{key}_std"] = std
    return results


def test_the_headline_claims_only_differences_beyond_the_spread():
    """A lead larger than the two standard deviations together is claimed; a smaller one is
    said to be within the spread, whichever way it points."""
    masked, supervised, scratch = (
        "finetune_masked_patch_10per_class/test_accuracy",
        "finetune_10per_class/test_accuracy",
        "scratch_10per_class/test_accuracy",
    )
    text = demo.headline(_results(**{masked: (0.90, 0.02), supervised: (0.83, 0.03), scratch: (0.80, 0.03)}))
    assert "0.900 ± 0.020" in text and "over 5 runs" in text
    assert "in 30 minutes on AMD EPYC (2 cores, load average 7.9)" in text
    assert "the masked-patch pre-trained ViT is ahead of from scratch by more than that spread" in text
    assert "the ViT pre-trained with labels and from scratch are within that spread of each other" in text
    text = demo.headline(_results(**{masked: (0.80, 0.02), supervised: (0.89, 0.02), scratch: (0.86, 0.02)}))
    assert "from scratch is ahead of the masked-patch pre-trained ViT by more than that spread" in text
    assert "the ViT pre-trained with labels and from scratch are within that spread" in text


def test_the_headline_says_where_from_scratch_and_the_pixels_win():
    text = demo.headline(
        _results(
            **{
                "scratch/test_accuracy": 0.994,
                "finetune_masked_patch/test_accuracy": 0.989,
                "finetune/test_accuracy": 0.978,
                "fewshot_pixels/1shot_accuracy": 0.62,
                "fewshot_pixels/10shot_accuracy": 0.867,
                "fewshot_masked_patch/10shot_accuracy": 0.73,
            }
        )
    )
    assert (
        "With all images (one run each) the same ViT from scratch is ahead, 0.994 against 0.989 (the "
        "masked-patch pre-trained ViT), 0.978 (the ViT pre-trained with labels): 1 test image" in text
    )
    assert "the raw pixels is ahead of every ViT probe at 1 and 10 examples per class (0.867 against" in text


def test_the_headline_calls_equal_fine_tunes_level():
    # The same number of test images right is a tie, not a lead of 0 test images.
    stages = ("finetune", "finetune_masked_patch", "scratch")
    every = {f"{stage}/test_accuracy": 177 / 180 for stage in stages}
    text = demo.headline(_results(**every))
    assert "With all images (one run each) all three reach the same test accuracy, 0.983;" in text
    assert "is ahead, 0.983" not in text
    text = demo.headline(_results(**dict(every, **{"finetune/test_accuracy": 175 / 180})))
    assert (
        "the masked-patch pre-trained ViT and the same ViT from scratch are level at 0.983, ahead of "
        "0.972 (the ViT pre-trained with labels) by 2 test images;" in text
    )


def test_the_fewshot_curves_are_drawn_from_the_committed_results(tmp_path):
    out = report.demo_figure(out=str(tmp_path / "curves.png"))
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.exists(report.DEMO_FIGURE)  # committed beside the page that shows it
    with open(report.DEMO_PAGE, encoding="utf-8") as f:
        assert "](../figures/demo_fewshot.png)" in f.read()


def test_other_settings_on_the_same_workdir_are_refused(tmp_path, capsys):
    workdir = tmp_path / "demo"
    workdir.mkdir()
    (workdir / "demo_settings.json").write_text(json.dumps({"pretrain_steps": 1}))
    assert demo.main(["demo", f"--workdir={workdir}", "--small"]) == 2
    err = capsys.readouterr().err
    assert "holds a demo run with other settings" in err and err.count("\n") == 1


def test_a_runs_workdir_is_refused(tmp_path, capsys):
    """The demo's summary results.json went over the run's own at the demo's end."""
    (tmp_path / "config.json").write_text('{"total_steps": 500}\n')
    (tmp_path / "results.json").write_text('{"steps": 500}\n')
    assert demo.main(["demo", f"--workdir={tmp_path}", "--small"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} holds a run (its config.json), whose results.json" in err and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["config.json", "results.json"]


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


def test_a_workdir_under_a_file_or_not_creatable_is_one_line(tmp_path, capsys, monkeypatch):
    """Both were tracebacks from makedirs (NotADirectoryError; a PermissionError here)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    assert demo.main(["demo", f"--workdir={notes / 'demo'}", "--small"]) == 2
    err = capsys.readouterr().err
    expected = f"--workdir '{notes}/demo' cannot be created: '{notes}' is a file, not a folder"
    assert err == f"demo: error: {expected}; choose another --workdir.\n"

    def refuse(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(fileio, "makedirs", refuse)
    assert demo.main(["demo", f"--workdir={tmp_path / 'demo'}", "--small"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"demo: error: cannot create the workdir {tmp_path}/demo: permission denied;")
    assert err.count("\n") == 1


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
