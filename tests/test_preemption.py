"""SIGTERM: a checkpoint at a loop boundary, then exit 0; with two worker processes, on both at the same step.

The multi-worker test runs three two-process trainings on loopback (uninterrupted, preempted,
resumed): about 30-55 s on 2 CPU cores.
"""

import os
import re
import signal
import time

import pytest
from trainer_cli import (
    PREEMPTED,
    TINY_DIGITS_FLAGS,
    checkpoint_steps,
    read_results,
    start_cli,
    start_cluster,
    stop_step_of_two,
    wait_all,
)

from trainers import distribute, preemption

TOTAL = 400
# Loop calls of 2 steps and no periodic checkpoint or evaluation: the only checkpoint before the
# end is the preemption's, and 400 steps leave the signal (sent at the first progress line) many
# loop calls to land in.
RUN = TINY_DIGITS_FLAGS + [
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
    return start_cluster(tmp_path, RUN + [f"--workdir={workdir}"], name)


def _train(tmp_path, workdir, name):
    return wait_all(*_start_workers(tmp_path, workdir, name))


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
    outputs = wait_all(procs, logs, timeout=120)
    step = stop_step_of_two(outputs)
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


# Ctrl-C: one process, the digits run above without the cluster, and loop calls of 2 steps.
ONE_PROCESS = [a for a in RUN if not a.startswith(("--strategy", "--total_steps"))] + ["--total_steps=200"]
INTERRUPTED = re.compile(
    r"^interrupted \(Ctrl-C\): saved a checkpoint at step (\d+); rerun the same command to resume\.$", re.M
)


def _start_and_wait_for_training(tmp_path, workdir, name):
    log = tmp_path / f"{name}.log"
    proc = start_cli("finetune", ONE_PROCESS + [f"--workdir={workdir}"], log_path=str(log))
    deadline = time.time() + 240
    while "/200  loss" not in log.read_text():  # the first loop call is done: training is under way
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            proc.wait()
            raise AssertionError(log.read_text()[-3000:])
        time.sleep(0.05)
    return proc, log


def test_one_process_ctrl_c_is_acknowledged_at_once_and_marks_the_run_interrupted():
    strategy = distribute.create_strategy("cpu", cpu_devices=1)
    saves = []
    before = signal.getsignal(signal.SIGINT)
    with preemption.Preemption(strategy, lambda: saves.append(1)) as preempted:
        assert signal.getsignal(signal.SIGINT) is not before  # else the signal below ends pytest
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        assert preempted.saved_checkpoint() and saves == [1] and preempted.interrupted
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.slow
def test_ctrl_c_saves_says_how_to_resume_and_the_rerun_matches_an_uninterrupted_run(tmp_path):
    reference = str(tmp_path / "reference")
    proc = start_cli("finetune", ONE_PROCESS + [f"--workdir={reference}"], log_path=str(tmp_path / "ref.log"))
    assert proc.wait(timeout=300) == 0, (tmp_path / "ref.log").read_text()[-3000:]

    workdir = str(tmp_path / "run")
    proc, log = _start_and_wait_for_training(tmp_path, workdir, "interrupted")
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=60)
    seconds = time.time() - sent
    out = log.read_text()
    # Exit 130 like any interrupted command, promptly: the save is at the next loop boundary.
    assert code == 130 and seconds < 30, (code, seconds, out[-3000:])
    assert "Ctrl-C: saving a checkpoint at the next step boundary" in out
    (step,) = [int(s) for s in INTERRUPTED.findall(out)]
    assert 0 < step < 200 and checkpoint_steps(workdir) == [step]
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    assert "Traceback" not in out and out.rstrip().endswith("finetune: interrupted")

    resumed_log = tmp_path / "resumed.log"
    proc = start_cli("finetune", ONE_PROCESS + [f"--workdir={workdir}"], log_path=str(resumed_log))
    assert proc.wait(timeout=300) == 0, resumed_log.read_text()[-3000:]
    assert f"at step {step}." in resumed_log.read_text()
    resumed, uninterrupted = read_results(workdir), read_results(reference)
    assert resumed["steps"] == uninterrupted["steps"] == 200
    assert resumed["train_loss"] == uninterrupted["train_loss"]
    assert resumed["eval"]["test"] == uninterrupted["eval"]["test"]


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_without_saving(tmp_path):
    # Loop calls of 1500 steps (seconds): the first Ctrl-C lands inside one, and is acknowledged
    # at once (not at its end); the second ends the process before that call returns.
    args = [a for a in ONE_PROCESS if not a.startswith(("--steps_per_loop", "--total_steps"))]
    args += ["--steps_per_loop=1500", "--total_steps=3000"]
    log = tmp_path / "twice.log"
    proc = start_cli("finetune", args + [f"--workdir={tmp_path / 'run'}"], log_path=str(log))
    deadline = time.time() + 240
    while "step 1/3000" not in log.read_text():  # the 1-step first call is done; a long one runs
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    while "Ctrl-C: saving a checkpoint" not in log.read_text():
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    out = log.read_text()
    assert "Ctrl-C again: stopped without saving" in out and not INTERRUPTED.search(out), out[-3000:]
    # Acknowledged inside the long loop call, not at its end; and stopped before the call ended.
    assert "step 1500/3000" not in out and checkpoint_steps(tmp_path / "run") == []
