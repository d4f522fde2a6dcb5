"""Trainer runs that several test modules read, made once per test session.

A short `trainers.finetune` run on the bundled digits (20 steps, a few seconds) stands in for a
user's finished run: its workdir has config.json, model.npz and class_names.json.
"""

import os

from fixtures import session_artefact
from trainer_cli import run_cli


def digits_workdir(tmp_path_factory):
    """The workdir of a finished 20-step digits run, made on first use in this test run."""

    def make(workdir):
        args = ["--dataset=digits", "--total_steps=20", "--warmup_steps=2", "--eval_every=0"]
        proc = run_cli("finetune", [*args, f"--workdir={workdir}"])
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert os.path.exists(os.path.join(workdir, "class_names.json"))

    return session_artefact(tmp_path_factory, "digits_run", make)
