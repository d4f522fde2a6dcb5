"""README.md's blocks: the First hour on a CPU, top to bottom, and the quickstart.

(README's Install commands: tests/test_docs_install.py; its two commands: tests/test_docs_contributing.py.)
"""

import os
import re
import subprocess

import console_scripts
import pytest
import tensorflow_datasets as tfds
from docs_standins import (
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    replaced,
    run_command,
    run_python,
)
from readme_blocks import ROOT, split_command
from trainer_cli import read_results


@pytest.mark.slow
def test_first_hour_commands(tmp_path, capsys, monkeypatch):
    """The block runs top to bottom as written, with fewer steps and a smaller stand-in."""
    from keras_vit import export as export_cli
    from keras_vit import predict as predict_cli
    from keras_vit.visualize import __main__ as visualize_cli

    first_hour = block("first-hour")
    assert first_hour.heading == "First hour on a CPU" and len(first_hour.commands) == 8
    prose = first_hour.before
    assert "expect an accelerator" in prose and "official" in prose and "ImageNet-21k weights" in prose
    # A clone of the repository alone runs it: what it reads is in the package or tracked in git
    # (the pets stand-in is made by trainers.prepare), nothing outside the repository.
    assert "../" not in first_hour.text and "shared" not in first_hour.text
    tracked = subprocess.run(
        ["git", "ls-files", "docs/inputs"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for path in re.findall(r"docs/inputs/[\w.-]+\.png", first_hour.text):
        assert path in tracked, f"{path} is not in the repository"
    stand_ins = {
        "runs/cpu": str(tmp_path / "cpu"),
        "docs/inputs/": os.path.join(ROOT, "docs", "inputs", ""),
    }
    shorter = {  # flags appended to each command (the last value of a flag wins)
        "trainers.finetune --dataset=digits": ["--total_steps=20", "--warmup_steps=2", "--steps_per_loop=10"],
        "trainers.finetune --dataset=oxford_iiit_pet": [
            "--total_steps=4",
            "--warmup_steps=1",
            "--steps_per_loop=2",
        ],
        "trainers.prepare --dataset=oxford_iiit_pet": ["--stand_in=1"],
    }
    workdir = tmp_path / "cpu"
    for written in first_hour.commands:
        command = replaced(written, stand_ins, strict=False)
        extra = next((flags for key, flags in shorter.items() if key in written), [])
        _, argv = split_command(command)
        if argv[0] == "tensorboard":
            code, out, err = console_scripts.run("tensorboard", [*argv[1:], "--inspect"])
            assert code == 0 and "loss" in out, out[-2000:] + err[-2000:]
        elif argv[2].startswith("trainers."):
            code, _, err = run_command(command, capsys, extra=extra)
            assert code == 0, written + err
        else:
            cli = {"keras_vit.predict": predict_cli, "keras_vit.export": export_cli}.get(
                argv[2], visualize_cli
            )
            capsys.readouterr()
            assert cli.main(argv[3:]) == 0, written + capsys.readouterr().err
            out = capsys.readouterr().out
            if argv[2] == "keras_vit.predict":
                assert "digit_0.png:" in out and "digit_1.png:" in out, out
    assert read_results(workdir / "digits")["steps"] == 20
    assert read_results(workdir / "pets")["steps"] == 4
    stand_in = tfds.builder("oxford_iiit_pet", data_dir=str(workdir / "fakepets")).info.splits
    assert (stand_in["train"].num_examples, stand_in["test"].num_examples) == (37, 37)  # --stand_in=1
    assert "25shot_accuracy" in read_results(workdir / "digits_fewshot")
    assert os.path.getsize(workdir / "digits.onnx") > 0
    assert sum(name.endswith(".png") for name in os.listdir(workdir / "digits_figures")) == 4


def test_quickstart():
    quickstart = block("quickstart")
    assert quickstart.page == "README.md"
    ns, _ = run_python(quickstart)
    assert tuple(ns["probs"].shape) == (1, 1000)
