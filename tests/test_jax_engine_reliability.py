"""The jax engine keeps the tf engine's promises for long runs, end to end (subprocesses: the
engine runs Keras on JAX, and pytest's own process runs TensorFlow).

SIGKILL and SIGTERM resume to the bit-identical model, SIGTERM at every moment of a run too (its
start, the middle, the last loop call, the results), an unreadable newest checkpoint falls back
to the previous one, a full disk at a save is one line with nothing lost, and two processes
(--strategy=multi_worker, one device each) stop together on one SIGTERM (at the start, in the
middle, at the end), stop with one line when the other is killed, and end as one process of two
devices. Every run is the same small digits training on two (simulated) CPU devices, so one
uninterrupted run is the reference of them all; runs share what they can (one run meets both
checkpoint faults; the moments' runs are each other's reruns, the two-process runs too; the test
run's JAX compilation cache, tests/conftest.py, holds the step the reference compiled).
"""

import os
import shutil
import subprocess
import time

import numpy as np
import pytest
from stop_chains import stops_of_two
from trainer_cli import (
    PREEMPTED,
    TINY_DIGITS_FLAGS,
    checkpoint_steps,
    child_env,
    command,
    error_line,
    file_size_limited,
    read_results,
    read_weights,
    run_child,
    sigterm_at_each,
    start_cli,
    stop_step_of_two,
    stopped_at_the_end,
)

from trainers import peer_watch, preemption

TOTAL, EVERY = 120, 20
RUN = TINY_DIGITS_FLAGS + [
    "--engine=jax",
    "--dataset=digits",
    "--batch_size=16",
    f"--total_steps={TOTAL}",
    "--warmup_steps=5",
    "--base_lr=0.1",
    "--steps_per_loop=2",
    "--eval_every=0",
    f"--checkpoint_every={EVERY}",
    "--seed=1",
]
ONE_PROCESS = RUN + ["--cpu_devices=2"]
TWO_PROCESSES = RUN + ["--strategy=multi_worker", "--cpu_devices=1"]
DATA, INDEX = "ckpt-{}.data-00000-of-00001", "ckpt-{}.index"


class _Processes:
    """What preemption asks of a JaxStrategy of two processes; `elsewhere`: the other's flag."""

    engine, process_count = "jax", 2

    def __init__(self, elsewhere):
        self.elsewhere, self.asked = elsewhere, []

    def any_process(self, flag):
        self.asked.append(flag)
        return flag or self.elsewhere


@pytest.mark.parametrize("here, elsewhere", [(False, False), (False, True), (True, False)])
def test_several_jax_processes_save_when_any_of_them_was_signalled(here, elsewhere):
    strategy, saves = _Processes(elsewhere), []
    with preemption.Preemption(strategy, lambda: saves.append(1)) as preempted:
        preempted.signalled = here
        stopped = preempted.saved_checkpoint()
    assert strategy.asked == [here]  # every boundary asks, signalled or not: the collectives pair up
    assert stopped == (here or elsewhere) and saves == ([1] if stopped else [])
    if stopped:  # the last line says whose signal it was
        assert preempted.cause() == (
            "preempted (SIGTERM)"
            if here
            else "stopped with the other processes (one of them got SIGTERM or Ctrl-C)"
        )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run: what every interrupted, recovered or two-process run must end as."""
    workdir = str(tmp_path_factory.mktemp("jax_reference") / "run")
    proc = run_child("finetune", ONE_PROCESS + [f"--workdir={workdir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert checkpoint_steps(workdir) == [TOTAL - 2 * EVERY, TOTAL - EVERY, TOTAL]
    return workdir


def _weights(workdir):
    return read_weights(workdir)


def _assert_identical(workdir, reference):
    """The same weights bit for bit and the same results (all but the wall time)."""
    got, want = _weights(workdir), _weights(reference)
    assert got.keys() == want.keys()
    different = [name for name in want if got[name].tobytes() != want[name].tobytes()]
    assert not different, different
    results, expected = read_results(workdir), read_results(reference)
    for key in ("steps", "train_loss", "eval", "replicas"):
        assert results[key] == expected[key], key


def _wait_for(proc, log, done, timeout=240):
    """Polls until done(); fails with the log if the process ends or time runs out first."""
    deadline = time.time() + timeout
    while not done():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(log.read_text()[-3000:])
        time.sleep(0.02)


# Moments of a run's life, each a line it prints: its start (the banner's first line: the first
# step compiles after it), the middle of training (the first progress line of a resumed run), its
# last loop call (the final checkpoint and evaluation follow), and the final results (the export
# and results.json follow).
START, MIDDLE = "model:", f"/{TOTAL}  loss"
LAST_CALL, RESULTS = f"step {TOTAL}/{TOTAL}", "final test:"


@pytest.mark.slow
def test_sigkill_and_sigterm_at_every_moment_of_a_run_then_the_reruns_end_bit_for_bit_as_an_uninterrupted_run(
    reference, tmp_path
):
    """One workdir, one run per stop, each the rerun of the one before; the last rerun must end as
    the reference, bit for bit. The stops: a SIGTERM at the start (nothing to save yet), a SIGKILL
    after the first checkpoint (the rerun resumes from it), then a SIGTERM in the middle of
    training (a save, exit 0), at the last loop call and in the results. Two tests before (the
    kill with a mid-training SIGTERM, and the moments), each with its own reruns: merged, the same
    checks take six runs instead of eight."""
    workdir = str(tmp_path / "run")
    args = ONE_PROCESS + [f"--workdir={workdir}"]
    for folder in ("start", "middle"):  # the logs of each call of sigterm_at_each apart
        (tmp_path / folder).mkdir()
    ((_, start),) = sigterm_at_each(args, (START,), tmp_path / "start")
    assert (
        "preempted (SIGTERM) before training began: nothing to save yet; rerun the same command to start."
        in start
    )
    assert checkpoint_steps(workdir) == []

    killed = tmp_path / "killed.log"
    proc = start_cli("finetune", args, log_path=str(killed))
    _wait_for(proc, killed, lambda: checkpoint_steps(workdir))
    proc.kill()
    proc.wait()
    assert not os.path.exists(os.path.join(workdir, "results.json")), "it finished before the kill"
    kept = checkpoint_steps(workdir)[-1]

    ((_, middle),) = sigterm_at_each(args, (MIDDLE,), tmp_path / "middle")
    assert f"at step {kept}." in middle
    (step,) = [int(s) for s in PREEMPTED.findall(middle)]
    assert kept < step < TOTAL and checkpoint_steps(workdir)[-1] == step
    assert not os.path.exists(os.path.join(workdir, "results.json"))

    last_call, results = (out for _, out in sigterm_at_each(args, (LAST_CALL, RESULTS), tmp_path))
    assert f"at step {step}." in last_call
    assert stopped_at_the_end(last_call, TOTAL), last_call[-2000:]
    assert "Resumed from" in results and os.path.exists(os.path.join(workdir, "results.json"))
    proc = run_child("finetune", args)
    assert (
        proc.returncode == 0
        and f"Resumed from {workdir}/checkpoints/ckpt-{TOTAL} at step {TOTAL}." in proc.stdout
    )
    _assert_identical(workdir, reference)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def faults(reference, tmp_path_factory):
    """(workdir, reference's checkpoint files, run) of one run that meets both faults: its newest
    checkpoint is truncated (it falls back to the one before), and the disk is full when it
    saves again (a file-size limit of half a checkpoint)."""
    workdir = str(tmp_path_factory.mktemp("jax_faults") / "run")
    shutil.copytree(reference, workdir)
    for name in ("results.json", "model.npz"):
        os.remove(os.path.join(workdir, name))
    folder = os.path.join(workdir, "checkpoints")
    original = {name: _read(os.path.join(folder, name)) for name in os.listdir(folder)}
    newest = os.path.join(folder, DATA.format(TOTAL))
    with open(newest, "r+b") as f:  # a copy cut short
        f.truncate(os.path.getsize(newest) // 3)
    limit = len(original[DATA.format(TOTAL)]) // 2
    proc = subprocess.run(
        file_size_limited(limit, command("finetune", ONE_PROCESS + [f"--workdir={workdir}"])),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return workdir, original, proc


@pytest.mark.slow  # alone, with the reference run it needs: about 30 s
def test_an_unreadable_newest_checkpoint_falls_back_to_the_previous_one(faults):
    workdir, original, proc = faults
    said = [line for line in proc.stdout.splitlines() if "cannot be read" in line]
    assert len(said) == 1 and f"ckpt-{TOTAL}" in said[0] and "unreadable" in said[0], proc.stdout
    assert f"at step {TOTAL - EVERY}." in proc.stdout
    aside = os.path.join(workdir, "checkpoints", "unreadable")
    assert sorted(os.listdir(aside)) == [DATA.format(TOTAL), INDEX.format(TOTAL)]  # moved, not deleted


@pytest.mark.slow  # alone, with the reference run it needs: about 30 s
def test_a_full_disk_at_a_save_is_one_line_and_loses_nothing(faults):
    workdir, original, proc = faults
    folder = os.path.join(workdir, "checkpoints")
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = error_line(proc)
    assert f"{folder}/ckpt-{TOTAL}" in line and "file too large" in line, line
    assert f"{folder}/ckpt-{TOTAL - EVERY} and is intact" in line, line
    readable = [name.format(step) for step in (TOTAL - 2 * EVERY, TOTAL - EVERY) for name in (DATA, INDEX)]
    assert sorted(os.listdir(folder)) == sorted(["checkpoint", "unreadable", *readable])
    assert all(_read(os.path.join(folder, name)) == original[name] for name in readable)
    assert not os.path.exists(os.path.join(workdir, "results.json"))


@pytest.mark.slow
def test_two_processes_stop_together_at_every_moment_and_on_a_kill_and_the_reruns_end_as_one_process(
    reference, tmp_path
):
    """One workdir, five runs of two processes, each the rerun of the one before (three tests
    before, each with its own first run and rerun; merged, the same checks take five runs instead
    of seven):
    - a SIGTERM to the second process at the start: the two stop together at the first loop
      boundary, step 1 (a fresh run's first loop call is one step);
    - one in the middle of training: both save a checkpoint at the same step and say so once (the
      chief learns of it only by the collective), with no results.json and no per-process scratch;
    - a SIGKILL to the second process after a new checkpoint: the survivor stops within
      peer_watch.LOST_AFTER_S with one line naming that checkpoint, which the next run resumes from;
    - a SIGTERM at the last loop call: both stop after the final checkpoint, with it saved;
    - the last rerun, signalled by nobody, says nothing of a preemption, only the chief reports
      its resume, and it ends as one process of two devices."""
    workdir = str(tmp_path / "run")
    args = TWO_PROCESSES + [f"--workdir={workdir}"]
    stops = stops_of_two(args, workdir, tmp_path, TOTAL, peer_watch.LOST_AFTER_S)
    assert stop_step_of_two(stops["start"]) == 1
    assert 1 < stops["step"] < TOTAL
    assert stopped_at_the_end(stops["end"][1], TOTAL), stops["end"][1][-2000:]
    _assert_two_processes_match(workdir, reference)


def _assert_two_processes_match(workdir, reference):
    """The same model as one process of two devices, up to the order of the cross-process sum."""
    got, want = _weights(workdir), _weights(reference)
    assert got.keys() == want.keys()
    largest = max(float(np.max(np.abs(got[name] - want[name]))) for name in want)
    print(f"two processes vs one of two devices: largest weight difference {largest:.3g}")
    assert largest <= 1e-6
    results, expected = read_results(workdir), read_results(reference)
    assert results["steps"] == TOTAL and results["replicas"] == expected["replicas"] == 2
    assert results["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-5)
    assert results["eval"]["test"]["loss"] == pytest.approx(expected["eval"]["test"]["loss"], rel=1e-5)
    assert results["eval"]["test"]["examples"] == expected["eval"]["test"]["examples"]
