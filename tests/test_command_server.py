"""tests/command_server.py: a trainer command forked from a process that imported its libraries
is the command a fresh interpreter runs, and a command whose start differs gets no server."""

import os
import signal
import sys
import time

import command_server
import pytest
import trainer_cli
from trainer_cli import TINY_DIGITS_FLAGS

ENV = {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin"}


def test_a_server_is_kept_per_engine_jax_device_count_and_import_time_environment():
    tf = command_server.key("trainers.finetune", ["--dataset=digits"], ENV)
    assert tf == command_server.key("trainers.fewshot", ["--engine=tf", "--cpu_devices=2"], ENV)
    # Read at run time: one server serves every cluster's processes and every test.
    cluster = dict(ENV, TF_CONFIG='{"cluster": {}}', PYTEST_CURRENT_TEST="t (call)")
    assert command_server.key("trainers.finetune", [], cluster) == tf
    jax = command_server.key("trainers.finetune", ["--engine=jax"], ENV)
    jax_on_two = command_server.key("trainers.finetune", ["--engine", "jax", "--cpu_devices=2"], ENV)
    # JAX reads its CPU device count from XLA_FLAGS, which the trainers' import sets.
    assert len({tf, jax, jax_on_two}) == 3
    assert command_server.key("trainers.finetune", [], dict(ENV, TF_ENABLE_ONEDNN_OPTS="0")) != tf


def test_the_served_commands_are_those_whose_import_notes_an_early_signal():
    """The server preloads and forks these (early_signals catches a signal in their import: a
    forked child has that handler from the server's import, as a fresh one from its own)."""
    from trainers import early_signals

    assert command_server.MODULES == early_signals.COMMANDS


def test_a_command_whose_start_is_its_own_gets_a_fresh_interpreter():
    assert command_server.key("trainers.finetune", ["--verbose"], ENV) is None
    assert command_server.key("trainers.finetune", ["--verbose=true"], ENV) is None
    assert command_server.key("keras_vit.convert", [], ENV) is None
    assert command_server.key("trainers.finetune", [], dict(ENV, KERAS_VIT_FRESH_CHILDREN="1")) is None
    # The demo's pinned commands set TensorFlow's environment before it loads.
    demo = ["--config=configs/demo.py:small"]
    from trainers import reproducible

    assert reproducible.is_pinned_command([sys.executable, "-m", "trainers.finetune", *demo]) == (
        command_server.key("trainers.finetune", demo, ENV) is None
    )


@pytest.mark.slow  # ~15 s: two fresh interpreters and a server import TensorFlow
def test_a_forked_command_prints_and_exits_as_a_fresh_one_and_is_a_process_of_its_own(tmp_path):
    """A bad flag's one line and status 2, a help text, and a run stopped by SIGKILL, each the
    same forked as from a fresh interpreter: the module runs as __main__ with the command line
    as argv (the program's name, the flags), no warning of runpy's, the status passed back."""
    outputs = []
    for args in (["--total_steps=-3"], ["--help"]):
        fresh = trainer_cli.run_child("finetune", args, fresh=True)
        forked = trainer_cli.run_child("finetune", args)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            fresh.returncode,
            fresh.stdout,
            fresh.stderr,
        ), (forked.stderr[-2000:], fresh.stderr[-2000:])
        outputs.append(forked)
    bad_flag, help_text = outputs
    assert bad_flag.returncode == 2 and "--total_steps" in trainer_cli.error_line(bad_flag)
    assert help_text.returncode == 0 and help_text.stdout.startswith("usage: python -m trainers.finetune")
    log = tmp_path / "run.log"
    args = TINY_DIGITS_FLAGS + ["--dataset=digits", "--total_steps=100000", f"--workdir={tmp_path / 'run'}"]
    proc = trainer_cli.start_cli("finetune", args, log_path=str(log))
    assert isinstance(proc, command_server.Forked) and proc.pid not in (os.getpid(), os.getppid())
    deadline = time.time() + 240
    try:
        while "/100000  loss" not in log.read_text():
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert b"command_server.serve" in f.read()  # forked, not started
    finally:
        proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert proc.poll() == -signal.SIGKILL  # kept once reported
