"""SIGTERM and Ctrl-C at every moment of a run, from its imports to its results: a checkpoint at
the next safe point and one line, then exit 0 (Ctrl-C: 130); with two worker processes, on both
at the same step; and a worker killed without a signal, which the other reports in one line.

The one-process tests share one uninterrupted run, the two-process tests another (two-process
trainings on loopback); the moments' runs are each other's reruns.
"""

import os
import re
import signal
import subprocess
import time

import pytest
from stop_chains import stops_of_two
from trainer_cli import (
    PREEMPTED,
    ROOT,
    SIGTERM_LINE,
    TINY_DIGITS_FLAGS,
    checkpoint_steps,
    child_env,
    command,
    handles,
    read_results,
    run_cli,
    sigterm_at_each,
    start_cli,
    start_cluster,
    stop_step_of_two,
    stopped_at_the_end,
    wait_all,
)

from trainers import distribute, peer_watch, preemption

TOTAL = 400
# Loop calls of 2 steps, a checkpoint every 100 and no periodic evaluation: 400 steps leave a
# signal (sent at the first progress line) many loop calls to land in before the first checkpoint,
# and a kill after it a checkpoint to resume from.
RUN = TINY_DIGITS_FLAGS + [
    "--dataset=digits",
    "--batch_size=16",
    f"--total_steps={TOTAL}",
    "--warmup_steps=5",
    "--base_lr=0.1",
    "--steps_per_loop=2",
    "--eval_every=0",
    "--checkpoint_every=100",
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


def test_where_no_run_reads_the_flags_sigterm_stops_at_once_and_a_run_turns_it_into_a_flag():
    before = signal.getsignal(signal.SIGTERM)
    with preemption.watching(reads=False):  # a command's, before and after its run
        with pytest.raises(preemption.Stopped):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        with preemption.watching(reads=True) as signals:  # its run: read at the safe points
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            assert signals.signalled and not signals.interrupted
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C outside a run: at once, as without a handler
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_wait_before_anything_is_saved_stops_at_once_inside_a_run(capsys):
    """A run's cluster forming (trainers/rendezvous.py) has nothing to save, so a signal there
    stops the command at once rather than being noted for a first step that cannot come; one
    noted just before the wait stops it as the wait begins. The run reads the flags again after."""
    with preemption.watching(reads=True) as signals:
        with pytest.raises(preemption.Stopped), preemption.stops_at_once():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        with pytest.raises(preemption.Stopped), preemption.stops_at_once():
            pass  # the flag the SIGTERM above left: as the block begins
        signals.signalled = signals.interrupted = False
        with pytest.raises(KeyboardInterrupt), preemption.stops_at_once():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        signals.signalled = signals.interrupted = False
        os.kill(os.getpid(), signal.SIGTERM)  # the run again: only noted
        time.sleep(0.1)
        assert signals.signalled
    time.sleep(0.2)  # the interrupt watcher's thread has read the Ctrl-C
    assert "Ctrl-C: stopping at the next step boundary" not in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, code, line",
    [
        (signal.SIGTERM, 0, [preemption.stopped_line()]),
        # The same line with Ctrl-C's cause (it had said only "finetune: interrupted").
        (signal.SIGINT, 130, [preemption.stopped_line(interrupted=True), "finetune: interrupted"]),
    ],
)
def test_a_signal_while_the_command_imports_stops_it_as_it_starts(tmp_path, signum, code, line):
    """The first seconds, before TensorFlow has loaded: the signal is noted, not fatal."""
    workdir = tmp_path / "run"
    proc = subprocess.Popen(
        command("finetune", ONE_PROCESS + [f"--workdir={workdir}"]),
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + 60
        while not handles(proc.pid, signal.SIGTERM):  # trainers/__init__.py has begun: it imports
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.005)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == code and out.strip().splitlines()[-len(line) :] == line, out[-3000:]
    assert "Traceback" not in out and not workdir.exists()


def _start_workers(tmp_path, workdir, name):
    return start_cluster(tmp_path, RUN + [f"--workdir={workdir}"], name)


def _train(tmp_path, workdir, name):
    return wait_all(*_start_workers(tmp_path, workdir, name))


@pytest.fixture(scope="module")
def cluster_reference(tmp_path_factory):
    """An uninterrupted two-process run: what a stopped or broken one must end as."""
    tmp_path = tmp_path_factory.mktemp("two_processes")
    reference = str(tmp_path / "reference")
    _train(tmp_path, reference, "reference")
    return reference


def _assert_matches(workdir, reference):
    resumed, uninterrupted = read_results(workdir), read_results(reference)
    assert resumed["steps"] == uninterrupted["steps"] == TOTAL and resumed["replicas"] == 2
    assert resumed["train_loss"] == pytest.approx(uninterrupted["train_loss"], rel=1e-6)
    assert resumed["eval"]["test"]["loss"] == pytest.approx(uninterrupted["eval"]["test"]["loss"], rel=1e-6)
    assert resumed["eval"]["test"]["accuracy"] == uninterrupted["eval"]["test"]["accuracy"]


@pytest.mark.slow
def test_two_workers_stop_together_at_every_moment_and_on_a_kill_and_the_reruns_end_as_one_run(
    cluster_reference, tmp_path
):
    """One workdir, five runs of two workers, each the rerun of the one before (three tests
    before, each with its own first run and rerun; merged, the same checks take five runs instead
    of seven):
    - a SIGTERM to the second worker at the start: the two stop together at the first loop
      boundaries (a worker that stopped alone left the other waiting in a collective);
    - one in the middle of training: both save a checkpoint at the same step and say so once,
      the signalled worker that it was preempted and the chief that it stopped with the others
      (the chief learns of it only through the cluster), with no results.json and no per-worker
      scratch left behind;
    - a SIGKILL to the second worker after a new checkpoint: the survivor stops within
      peer_watch.LOST_AFTER_S with one line naming that checkpoint, which the next run resumes from;
    - a SIGTERM at the last loop call: both stop after the final checkpoint or evaluation, or (the
      handler's agreement takes one more safe point) they finish first;
    - the last rerun, signalled by nobody, says nothing of a preemption, only the chief reports
      its resume, and it ends as the uninterrupted run."""
    workdir = str(tmp_path / "run")
    stops = stops_of_two(RUN + [f"--workdir={workdir}"], workdir, tmp_path, TOTAL, peer_watch.LOST_AFTER_S)
    assert stop_step_of_two(stops["start"]) < TOTAL
    assert 0 < stops["step"] < TOTAL
    # The signalled worker's line, if the signal reached it before its last safe point.
    end = stops["end"][1]
    assert stopped_at_the_end(end, TOTAL) or not SIGTERM_LINE.search(end), end[-2000:]
    _assert_matches(workdir, cluster_reference)


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


@pytest.fixture(scope="module")
def one_process_reference(tmp_path_factory):
    """An uninterrupted one-process run: what every run Ctrl-C or SIGTERM stopped must end as."""
    reference = str(tmp_path_factory.mktemp("one_process") / "reference")
    proc = run_cli("finetune", ONE_PROCESS + [f"--workdir={reference}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return reference


def _assert_results_equal(workdir, reference):
    resumed, uninterrupted = read_results(workdir), read_results(reference)
    assert resumed["steps"] == uninterrupted["steps"] == 200
    assert resumed["train_loss"] == uninterrupted["train_loss"]
    assert resumed["eval"]["test"] == uninterrupted["eval"]["test"]


# Moments of a run's life, each a line it prints: its start (the banner's first line, before the
# first step compiles), the middle of training, its last loop call (the final checkpoint and
# evaluation follow), and the final results (the export and results.json follow).
START, MIDDLE, LAST_CALL, RESULTS = "model:", "step 100/200", "step 200/200", "final test:"


@pytest.mark.slow
def test_ctrl_c_and_sigterm_at_every_moment_stop_a_run_with_one_line_and_the_reruns_end_as_one_run(
    one_process_reference, tmp_path
):
    """One workdir, one run per stop, each the rerun of the one before (so each rerun starts from
    what the stop before it saved); the last rerun must end as the uninterrupted run. The stops:
    a SIGTERM at the start (nothing to save yet), Ctrl-C once training is under way (a checkpoint
    at the next loop boundary, exit 130, and the line that says how to resume), then a SIGTERM in
    the middle of training, at the last loop call and in the results. Two tests before (Ctrl-C
    with its rerun, and the moments): merged, the same checks take one child less."""
    workdir = str(tmp_path / "run")
    args = ONE_PROCESS + [f"--workdir={workdir}"]
    (tmp_path / "start").mkdir()  # its log apart from the later moments'
    ((_, start),) = sigterm_at_each(args, (START,), tmp_path / "start")
    assert (
        "preempted (SIGTERM) before training began: nothing to save yet; rerun the same command to start."
        in start
    )

    proc, log = _start_and_wait_for_training(tmp_path, workdir, "interrupted")
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=60)
    seconds = time.time() - sent
    out = log.read_text()
    # Exit 130 like any interrupted command, promptly: the save is at the next loop boundary.
    assert code == 130 and seconds < 30, (code, seconds, out[-3000:])
    assert "Ctrl-C: stopping at the next step boundary, with a checkpoint of that step" in out
    (interrupted,) = [int(s) for s in INTERRUPTED.findall(out)]
    assert 0 < interrupted < 100 and checkpoint_steps(workdir) == [interrupted]
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    assert "Traceback" not in out and out.rstrip().endswith("finetune: interrupted")

    middle, last_call, results = (
        out for _, out in sigterm_at_each(args, (MIDDLE, LAST_CALL, RESULTS), tmp_path)
    )
    assert f"at step {interrupted}." in middle
    (step,) = [int(s) for s in PREEMPTED.findall(middle)]
    assert 100 <= step < 200
    # The last loop call's SIGTERM lands in the final checkpoint or evaluation (stopped with the
    # checkpoint of step 200) or, on a slow machine, in the export (finished first).
    assert stopped_at_the_end(last_call, 200), last_call[-2000:]
    # The results' SIGTERM lands in the export, or after it, while the process ends: exit 0 either way.
    assert "Resumed from" in results and os.path.exists(os.path.join(workdir, "results.json"))
    proc = run_cli("finetune", args)
    assert proc.returncode == 0 and f"Resumed from {workdir}/checkpoints/ckpt-200 at step 200." in proc.stdout
    _assert_results_equal(workdir, one_process_reference)


def test_sigterm_while_a_finished_command_shuts_down_leaves_it_finished(tmp_path):
    """The last seconds: the command has done its work (here: printed its --help) and the
    interpreter is unloading TensorFlow. Python puts the signals it handled back to their default
    action as it shuts down, so SIGTERM there killed the finished command (status -15), as the
    "final test:" moment above once did; SIGTERM every millisecond until it ends must leave exit 0."""
    expected_end = run_cli("finetune", ["--help"]).stdout.rstrip().splitlines()[-1]
    log = tmp_path / "help.log"
    proc = start_cli("finetune", ["--help"], log_path=str(log))
    try:
        deadline = time.time() + 120
        while expected_end not in log.read_text():  # the help is out: the command's work is done
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.005)
        while proc.poll() is None and time.time() < deadline:
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.001)
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert code == 0 and "Traceback" not in log.read_text(), (code, log.read_text()[-3000:])


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
    while "Ctrl-C: stopping at the next step boundary" not in log.read_text():
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    out = log.read_text()
    assert "Ctrl-C again: stopped without saving" in out and not INTERRUPTED.search(out), out[-3000:]
    # Acknowledged inside the long loop call, not at its end; and stopped before the call ended.
    assert "step 1500/3000" not in out and checkpoint_steps(tmp_path / "run") == []
