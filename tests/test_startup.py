"""The library's own commands start without TensorFlow's native start-up lines (keras_vit/startup.py)."""

import os
import subprocess
import sys

import pytest
from fixtures import tiny_vit
from test_console import NOISE

import keras_vit
from keras_vit import startup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "orig_argv, package",
    [
        (["python", "-m", "keras_vit.predict", "a.jpg"], "keras_vit"),
        (["python", "-X", "importtime", "-m", "trainers.finetune"], "trainers"),
        (["python", "-mkeras_vit.convert"], "keras_vit"),
        (["python", "-c", "import keras_vit", "-m", "x"], None),
        (["python", "my_script.py", "-m", "keras_vit.predict"], None),
        (["python"], None),
    ],
)
def test_command_package(orig_argv, package):
    assert startup.command_package(orig_argv) == package


def test_only_commands_start_quietly_and_verbose_shows_everything():
    command = ["python", "-m", "keras_vit.predict", "a.jpg"]
    assert startup.quiet_start(command, ["-m", "a.jpg"], modules={})
    assert not startup.quiet_start(command, ["-m", "a.jpg", "--verbose"], modules={})
    # A user's own program that imports keras_vit sees everything TensorFlow prints.
    assert not startup.quiet_start(["python", "train.py"], ["train.py"], modules={})
    # ... unless it imports the trainers, which have always hidden it (their --verbose shows it).
    assert startup.quiet_start(["python", "train.py"], ["train.py"], modules={"trainers": None})


def test_a_program_that_reads_a_preset_first_starts_quietly_too():
    # configs import keras_vit (the --posemb values) before the program imports the trainers.
    assert startup.quiet_start(["python", "train.py"], ["train.py"], modules={"configs": None})
    assert not startup.quiet_start(
        ["python", "train.py"], ["train.py", "--verbose"], modules={"configs": None}
    )


def _run_as_a_user(*args):
    """A command as a user runs it: no TF_CPP_MIN_LOG_LEVEL, no KERAS_BACKEND set beforehand."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    env["PYTHONPATH"] = ROOT
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # a fresh interpreter imports TensorFlow: about 20 s on two busy cores
def test_convert_prints_its_summary_and_nothing_else(tmp_path):
    model = tiny_vit()
    src = str(tmp_path / "src.npz")
    keras_vit.weights.save_npz(model, src)
    proc = _run_as_a_user("keras_vit.convert", src, str(tmp_path / "dst.npz"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]
    assert proc.stdout.startswith("wrote ") and not NOISE.search(proc.stdout), proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["keras_vit.predict", "missing.jpg", "--model=ViT-Ti_16", "--weights=missing.npz"],
        ["keras_vit.export", "out.onnx", "--format=onnx", "--model=ViT-Ti_16", "--weights=missing.npz"],
        ["keras_vit.visualize", "--images=missing.jpg", "--out=figs", "--model=ViT-Ti_16", "--weights=none"],
    ],
    ids=["predict", "export", "visualize"],
)
def test_library_commands_print_their_one_line_error_and_nothing_else(tmp_path, command):
    proc = _run_as_a_user(*command)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert "missing" in proc.stderr and not NOISE.search(proc.stderr)
