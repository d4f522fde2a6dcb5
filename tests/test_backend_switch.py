"""The trainers pick Keras' TensorFlow backend themselves, whatever KERAS_BACKEND says."""

import subprocess
import sys

from trainer_cli import ROOT, run_cli


def test_a_trainer_runs_under_keras_backend_jax(tmp_path):
    args = [
        "--dataset=digits",
        "--num_layers=1",
        "--total_steps=2",
        "--warmup_steps=1",
        "--eval_every=0",
        "--checkpoint_every=0",
        f"--workdir={tmp_path / 'run'}",
    ]
    proc = run_cli("finetune", args, env={"KERAS_BACKEND": "jax"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "final test: accuracy" in proc.stdout


def test_keras_already_on_another_backend_is_one_clear_error():
    code = "import keras, trainers"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"KERAS_BACKEND": "jax", "PYTHONPATH": ROOT, "PATH": ""},
        timeout=300,
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "the trainers run on Keras' TensorFlow backend, and Keras was already imported with 'jax'" in last
