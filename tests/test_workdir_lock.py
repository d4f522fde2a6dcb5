"""trainers/workdir_lock.py: a second run in a workdir that a run is using is refused in one line."""

import os
import signal
import socket
import subprocess
import sys

import pytest
from trainer_cli import TINY_MODEL

from trainers import finetune, workdir_lock
from trainers.errors import TrainingError


def test_a_second_holder_is_refused_naming_the_first_and_the_lock_goes_with_the_block(tmp_path):
    with workdir_lock.held(str(tmp_path)):
        # Another open file of the same lock, as another process would have.
        with pytest.raises(TrainingError) as refused, workdir_lock.held(str(tmp_path)):
            pass
        assert str(refused.value) == (
            f"{tmp_path} is in use by another run (process {os.getpid()} on {socket.gethostname()}): "
            "wait for it to end or stop it, or choose another --workdir"
        )
    with workdir_lock.held(str(tmp_path)):  # released with the first block
        pass


def test_the_lock_of_a_killed_process_is_gone_with_it(tmp_path):
    """No stale lock after SIGKILL: it is the kernel's, held by the process's open file."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path / workdir_lock.LOCK_FILE)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(TrainingError, match=f"process {holder.pid} on"), workdir_lock.held(str(tmp_path)):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with workdir_lock.held(str(tmp_path)):
        pass


# A process that takes the lock as workdir_lock does (the standard library only: no TensorFlow).
_HOLD = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "os.pwrite(fd, f'process {os.getpid()} on somewhere'.encode(), 0)\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_remote_workdir_is_not_locked():
    with workdir_lock.held("ram://runs/a"), workdir_lock.held("ram://runs/a"):
        pass


def test_a_run_into_a_workdir_in_use_writes_nothing_and_says_which_process_has_it(
    capsys, tmp_path, cifar10_data_dir
):
    workdir = tmp_path / "run"
    (workdir / "checkpoints").mkdir(parents=True)  # the other run's, not yet at its config.json
    (workdir / "checkpoints" / "checkpoint").write_text("the other run's\n")
    args = ["--dataset=cifar10", f"--data_dir={cifar10_data_dir}", *TINY_MODEL, "--total_steps=1"]
    with workdir_lock.held(str(workdir)):
        code = finetune.main(["finetune", f"--workdir={workdir}", "--warmup_steps=0", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"finetune: error: {workdir} is in use by another run (process {os.getpid()} on")
    assert (workdir / "checkpoints" / "checkpoint").read_text() == "the other run's\n"
    assert sorted(os.listdir(workdir)) == [".lock", "checkpoints"]  # no config.json of this run
