"""trainers/join_deadline.py: a wait for a cluster that never forms ends in the command's one-line
error, not in JAX's fatal error and stack trace (exit status 134)."""

import os
import socket
import sys
import threading
import time

import pytest
from trainer_cli import run_python_c

from trainers import join_deadline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ended(monkeypatch):
    """Stands in for os._exit: records the status and lets the waiting block return."""
    ended = {"status": None, "released": threading.Event()}

    def fake_exit(status):
        ended["status"] = status
        ended["released"].set()

    monkeypatch.setattr(join_deadline.os, "_exit", fake_exit)
    monkeypatch.setattr(sys, "argv", ["/somewhere/trainers/finetune.py", "--strategy=multi_worker"])
    return ended


def test_a_wait_past_the_limit_ends_the_process_with_one_line_and_status_2(monkeypatch, capsys):
    ended = _ended(monkeypatch)
    start = time.monotonic()
    with join_deadline.ends_the_process_after(0.2, "the cluster did not form"):
        assert ended["released"].wait(30), "the limit passed and nothing ended the process"
    assert 0.2 <= time.monotonic() - start < 10
    assert ended["status"] == 2
    assert capsys.readouterr().err == "finetune: error: the cluster did not form\n"


def test_a_wait_that_returns_in_time_ends_nothing(monkeypatch, capsys):
    ended = _ended(monkeypatch)
    with join_deadline.ends_the_process_after(0.2, "the cluster did not form"):
        pass
    assert not ended["released"].wait(0.6)  # past the limit: the watch saw the block return
    assert ended["status"] is None and capsys.readouterr().err == ""


@pytest.mark.slow  # a child (forked: tests/command_server.py) that waits 3 s
def test_jax_waiting_for_a_cluster_in_native_code_is_ended_at_the_limit():
    """The limit needs a thread that runs while jax.distributed.initialize waits: the process
    whose coordinator never answers ends at 3 s, with the line, long before JAX's own 120 s."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    program = (
        "import jax\n"
        "from trainers import join_deadline\n"
        "with join_deadline.ends_the_process_after(3, 'the cluster did not form'):\n"
        f"    jax.distributed.initialize(coordinator_address='localhost:{port}', num_processes=2,\n"
        "                               process_id=1, initialization_timeout=120)\n"
        "print('joined')\n"
    )
    start = time.monotonic()
    proc = run_python_c(program, {"KERAS_BACKEND": "jax"})
    assert time.monotonic() - start < 100
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == "-c: error: the cluster did not form", proc.stderr[-3000:]
