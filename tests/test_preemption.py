"""SIGTERM: a checkpoint at a loop boundary, then exit 0; with two worker processes, on both at the same step.

The multi-worker test runs three two-process trainings on loopback (uninterrupted, preempted,
resumed): about 30-55 s on 2 CPU cores.
"""

import json
import os
import re
import signal
import time

import pytest
from trainer_cli import TINY_MODEL, checkpoint_steps, free_ports, read_results, start_cli

from trainers import distribute, preemption

TOTAL = 400
# Loop calls of 2 steps and no periodic checkpoint or evaluation: the only checkpoint before the
# end is the preemption's, and 400 steps leave the signal (sent at the first progress line) many
# loop calls to land in.
RUN = TINY_MODEL + [
    "--image_size=16",
    "--dataset=digits",
    "--batch_size=16",
    f"--total_steps={TOTAL}",
    "--warmup_steps=5",
    "--base_lr=0.1",
    "--steps_per_loop=2",
    "--eval_every=0",
    "--checkpoint_every=0",
    "--seed=1",
    "--strategy=multi_worker",
]
PREEMPTED = re.compile(r"^preempted \(SIGTERM\): saved a checkpoint at step (\d+); rerun", re.M)


def test_one_process_saves_at_the_next_boundary_and_restores_the_handler():
    strategy = distribute.create_strategy("cpu", cpu_devices=1)
    saves = []
    before = signal.getsignal(signal.SIGTERM)
    with preemption.Preemption(strategy, lambda: saves.append(1)) as preempted:
        assert signal.getsignal(signal.SIGTERM) is not before  # else the signal below ends pytest
        assert not preempted.saved_checkpoint() and not saves
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # the handler runs between bytecodes of the main thread
        assert preempted.saved_checkpoint() and saves == [1]
    assert signal.getsignal(signal.SIGTERM) is before


def _start_workers(tmp_path, workdir, name):
    """Two worker processes of one cluster on loopback; returns (processes, log paths)."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs, logs = [], []
    for index in range(2):
        log = tmp_path / f"{name}{index}.log"
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(
            start_cli(
                "finetune", RUN + [f"--workdir={workdir}"], env={"TF_CONFIG": tf_config}, log_path=str(log)
            )
        )
        logs.append(log)
    return procs, logs


def _wait(procs, logs, timeout=300):
    """Exit codes of both workers, killing both if either is still running after `timeout` s."""
    deadline = time.time() + timeout
    try:
        for proc in procs:
            proc.wait(timeout=max(1, deadline - time.time()))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    codes = [proc.returncode for proc in procs]
    assert codes == [0, 0], [log.read_text()[-2000:] for log in logs]
    return [log.read_text() for log in logs]


def _train(tmp_path, workdir, name):
    return _wait(*_start_workers(tmp_path, workdir, name))


@pytest.mark.slow
def test_sigterm_to_one_worker_checkpoints_all_at_one_step_and_resumes_exactly(tmp_path):
    reference = str(tmp_path / "reference")
    _train(tmp_path, reference, "reference")

    workdir = str(tmp_path / "run")
    procs, logs = _start_workers(tmp_path, workdir, "preempted")
    try:
        deadline = time.time() + 240
        while f"/{TOTAL}  loss" not in logs[0].read_text():  # training is under way
            assert time.time() < deadline and all(p.poll() is None for p in procs), [
                log.read_text()[-2000:] for log in logs
            ]
            time.sleep(0.1)
        procs[1].send_signal(signal.SIGTERM)  # the non-chief: the chief learns of it only through the cluster
    except BaseException:
        for proc in procs:
            proc.kill()
            proc.wait()
        raise
    outputs = _wait(procs, logs, timeout=120)
    steps = [[int(s) for s in PREEMPTED.findall(out)] for out in outputs]
    assert len(steps[0]) == 1 and steps[0] == steps[1], steps
    step = steps[0][0]
    assert 0 < step < TOTAL
    assert checkpoint_steps(workdir) == [step]
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    assert not [n for n in os.listdir(workdir) if n.startswith(".worker_")]

    chief_out, other_out = _train(tmp_path, workdir, "resumed")
    assert f"at step {step}." in chief_out and not PREEMPTED.search(chief_out)
    assert "Resumed" not in other_out and not PREEMPTED.search(other_out)  # only the chief reports
    resumed, uninterrupted = read_results(workdir), read_results(reference)
    assert resumed["steps"] == uninterrupted["steps"] == TOTAL and resumed["replicas"] == 2
    assert resumed["train_loss"] == pytest.approx(uninterrupted["train_loss"], rel=1e-6)
    assert resumed["eval"]["test"]["loss"] == pytest.approx(uninterrupted["eval"]["test"]["loss"], rel=1e-6)
    assert resumed["eval"]["test"]["accuracy"] == uninterrupted["eval"]["test"]["accuracy"]
