"""The console of a run: TensorFlow's start-up noise hidden, a banner, early progress, visible loader
messages; and the pieces behind it (trainers/console.py)."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from trainer_cli import read_results, run_as_a_user

import keras_vit
from configs import DIGITS_ARCHITECTURE
from keras_vit import weights as weights_lib
from trainers import actions, console

DIGITS_RUN = ["--dataset=digits", "--total_steps=60", "--warmup_steps=2", "--eval_every=0"]
# What TensorFlow's native logger and Python warnings print (absl prefixes, oneDNN, CUDA probing).
NOISE = re.compile(r"^[IWEF]0000 |InitializeLog|oneDNN|cuda|Warning|AutoGraph", re.IGNORECASE | re.MULTILINE)


def _run_as_a_user(args):
    """The command as a user runs it, in a fresh interpreter: its start is the subject."""
    return run_as_a_user("trainers.finetune", args, fresh=True)


def _small_checkpoint(path):
    """The digits presets' model with a 5-class head, saved in the official layout."""
    shape = {k: v for k, v in DIGITS_ARCHITECTURE.items() if k != "model"}
    model = keras_vit.create_model("ViT-Ti_16", num_classes=5, include_preprocessing=False, **shape)
    weights_lib.save_npz(model, str(path))


@pytest.mark.slow
def test_a_short_run_prints_a_banner_and_early_progress_and_no_noise(tmp_path):
    checkpoint = tmp_path / "pre.npz"
    _small_checkpoint(checkpoint)
    workdir = tmp_path / "run"
    proc = _run_as_a_user([*DIGITS_RUN, f"--weights={checkpoint}", f"--workdir={workdir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[:3000]
    out = proc.stdout
    assert not NOISE.search(out), out
    lines = out.splitlines()
    # The banner comes first and names what runs.
    banner = "\n".join(lines[:8])
    for fact in (
        "model:    custom ViT: patch 4, width 64, 4 layers, 4 heads (138,954 parameters), 16 px, 17 tokens",
        f"weights: {checkpoint}",
        "data:     digits, 10 classes; train 1,437 (train); eval test 360 (test)",
        "hardware: tf engine, MirroredStrategy: 1 replica(s)",
        "XLA off (auto: on CPU XLA is measured from width 192); precision float32",
        "batch:    64 global = 1 replica(s) x 64;",
        "steps:    60 (2 warm-up, sgd, base_lr 0.1), from the start",
        f"workdir:  {workdir}",
    ):
        assert fact in banner, (fact, banner)
    # The loader's message (a new head for 10 classes) is visible.
    assert "keras_vit: new zero-initialised head of 10 classes (checkpoint head: 5)" in out
    # The first progress line comes after the first compiled call (one step), not after 50 steps,
    # with its time apart; the next one has the speed and an ETA.
    progress = [line for line in lines if line.startswith("step ")]
    assert progress[0].startswith("step 1/60  loss ") and "first call" in progress[0], progress
    assert "img/s" not in progress[0] and "ETA" not in progress[0]
    assert progress[1].startswith("step 50/60") and "img/s" in progress[1] and "ETA" in progress[1]
    assert read_results(workdir)["steps"] == 60


@pytest.mark.slow
def test_verbose_shows_tensorflow_s_own_lines(tmp_path):
    proc = _run_as_a_user([*DIGITS_RUN, "--total_steps=2", "--verbose", f"--workdir={tmp_path / 'run'}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.strip(), "TensorFlow's start-up lines should be shown under --verbose"


@pytest.mark.parametrize(
    "argv, verbose",
    [
        (["finetune", "--dataset=digits"], False),
        (["finetune", "--verbose"], True),
        (["finetune", "--verbose=true"], True),
        (["finetune", "--verbose=false"], False),
        (["finetune", "--verbose", "--noverbose"], False),
        (["finetune", "--verbose_thing"], False),
        (["finetune", "--", "--verbose"], False),
    ],
)
def test_verbose_requested(argv, verbose):
    assert console.verbose_requested(argv) is verbose


def _write_native(text):
    os.write(2, text.encode())


def test_native_stderr_is_hidden_and_replayed_only_on_error(capfd):
    with console.native_stderr_hidden():
        _write_native("noise from C++\n")
    assert "noise" not in capfd.readouterr().err
    with pytest.raises(ImportError):
        with console.native_stderr_hidden():
            _write_native("why the import failed\n")
            raise ImportError("boom")
    assert "why the import failed" in capfd.readouterr().err
    with console.native_stderr_hidden(hide=False):
        _write_native("shown\n")
    assert "shown" in capfd.readouterr().err


def test_only_the_chief_prints(capsys):
    console.Console(chief=False).print("worker line")
    console.Console(chief=True).print("chief line")
    assert capsys.readouterr().out == "chief line\n"


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_prints_every_interval_with_rate_and_eta(capsys):
    clock = _Clock()
    progress = console.Progress(console.Console(), "features of cifar10 train", 1000, every_s=10, clock=clock)
    clock.now = 5.0
    progress.update(100)  # before the interval: quiet
    clock.now = 10.0
    progress.update(100)
    clock.now = 40.0
    progress.update(800)
    progress.finish()
    lines = capsys.readouterr().out.splitlines()
    # The last update printed the final count: finish does not repeat it.
    assert lines == [
        "  features of cifar10 train: 200/1000 images, 20 img/s, ETA 0:00:40",
        "  features of cifar10 train: 1000/1000 images, 25 img/s (0:00:40)",
    ]
    quick = console.Progress(console.Console(), "features of digits test", 360, clock=clock)
    quick.update(360)
    clock.now = 42.0
    quick.finish()
    assert capsys.readouterr().out == "  features of digits test: 360/360 images, 180 img/s (0:00:02)\n"


def _log_training(*, batch_size, replicas):
    """LogTraining of a 101-step run at a learning rate of 0.1, its summaries written nowhere."""
    summaries = actions.Summaries.__new__(actions.Summaries)
    summaries.train = summaries.eval = tf.summary.create_noop_writer()
    return actions.LogTraining(
        summaries,
        lambda step: np.float32(0.1),
        total_steps=101,
        batch_size=batch_size,
        replicas=replicas,
        console=console.Console(),
    )


def test_the_eta_leaves_out_the_compiling_call(capsys):
    log = _log_training(batch_size=10, replicas=1)
    out = {"loss": 1.0, "grad_norm": 0.5}
    log(0, 1, out, 30.0)  # the first call: 30 s of tracing and compiling
    log(1, 51, out, 5.0)  # steady: 0.1 s per step
    first, steady = capsys.readouterr().out.splitlines()
    assert "first call 30.0 s" in first and "ETA" not in first
    # 50 steps left at 0.1 s each: 5 s (30 s of compiling would make it 35 s or more).
    # One replica (a CPU's is all its cores): no per-core figure that would be the machine's.
    assert steady.endswith("100.0 img/s  ETA 0:00:05"), steady
    assert "core" not in steady and "replica" not in steady


def test_several_replicas_show_the_speed_per_replica(capsys):
    log = _log_training(batch_size=40, replicas=4)
    out = {"loss": 1.0, "grad_norm": 0.5}
    log(0, 1, out, 30.0)
    log(1, 51, out, 5.0)
    assert capsys.readouterr().out.splitlines()[1].endswith("400.0 img/s (100.0/replica)  ETA 0:00:05")
