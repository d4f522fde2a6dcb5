"""The trainers pick Keras' backend themselves: a command's --engine decides (TensorFlow unless
--engine=jax), whatever KERAS_BACKEND says; a program that imported Keras on PyTorch first is
told in one line."""

import subprocess
import sys

import pytest
from trainer_cli import ROOT, TINY_DIGITS_FLAGS, run_child


@pytest.mark.slow  # 13 s: a child on JAX trains
def test_a_trainer_runs_under_keras_backend_jax(tmp_path):
    args = [
        "--dataset=digits",
        *TINY_DIGITS_FLAGS,
        "--total_steps=2",
        "--warmup_steps=1",
        "--eval_every=0",
        "--checkpoint_every=0",
        f"--workdir={tmp_path / 'run'}",
    ]
    # A fresh interpreter: the backend is chosen as the command starts, the subject here.
    proc = run_child("finetune", args, env={"KERAS_BACKEND": "jax"}, fresh=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "final test: accuracy" in proc.stdout


def _import_after_keras(backend):
    return subprocess.run(
        [sys.executable, "-c", "import keras, trainers; print(keras.backend.backend())"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"KERAS_BACKEND": backend, "PYTHONPATH": ROOT, "PATH": ""},
        timeout=300,
    )


@pytest.mark.slow  # 8 s on the 2-core Xeon: a child imports Keras and PyTorch
def test_keras_already_on_pytorch_is_one_clear_error():
    proc = _import_after_keras("torch")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert (
        "the trainers run on Keras' TensorFlow or JAX backend, and Keras was already imported with 'torch'"
        in last
    )


@pytest.mark.slow  # 8 s on the 2-core Xeon: a child on JAX
def test_keras_already_on_jax_is_the_jax_engine_s_backend():
    proc = _import_after_keras("jax")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "jax"
