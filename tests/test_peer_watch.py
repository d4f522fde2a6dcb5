"""trainers.peer_watch: the processes of one run watch each other's heartbeat (in one process here,
each watch a thread of its own; the two-process runs that lose a process are in
tests/test_preemption.py and tests/test_jax_engine_reliability.py)."""

import threading
import time

import pytest

from trainers import distribute, peer_watch, training


class _Cluster:
    """`count` processes' Processes, whose share() hands the chief's port to the others."""

    def __init__(self, count):
        self.count, self.port, self.ready = count, None, threading.Event()

    def of(self, index):
        def share(value):
            if index == 0:
                self.port = value
                self.ready.set()
            self.ready.wait(5)
            return self.port

        names = [f"host{k}:1234" for k in range(self.count)]
        return distribute.Processes(index, self.count, "localhost", names, share)


class _Ended:
    """A watch's exit, recorded instead of ending the test process."""

    def __init__(self):
        self.codes, self.done = [], threading.Event()

    def __call__(self, code):
        self.codes.append(code)
        self.done.set()


def _start(count):
    """Started watches of `count` processes, each with its recorded exit."""
    cluster, watches = _Cluster(count), []
    for index in range(count):
        watch = peer_watch.PeerWatch(cluster.of(index), lambda: "/w/checkpoints/ckpt-40")
        watch.exit = _Ended()
        watches.append(watch.start())
    deadline = time.monotonic() + 10
    while len(watches[0]._peers) < count - 1:  # every process has connected
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return watches


def test_one_process_has_no_watch():
    assert peer_watch.watch(None, lambda: None) is None


def test_a_process_that_ends_without_a_goodbye_is_reported_at_once_by_name_and_checkpoint(capfd):
    chief, other = _start(2)
    other.failed()  # its connection closes, as a killed process's does
    assert chief.exit.done.wait(5) and chief.exit.codes == [peer_watch.EXIT_CODE]
    line = capfd.readouterr().err.strip().splitlines()[-1]
    assert "process 1 of 2 (host1:1234) is gone (its connection closed)" in line
    assert "the last checkpoint is /w/checkpoints/ckpt-40" in line and "rerun the same command" in line
    assert other.exit.codes == []


def test_a_goodbye_is_no_loss():
    chief, other = _start(2)
    other.finished()
    time.sleep(2 * peer_watch.HEARTBEAT_S)  # a loss would be reported at once
    chief.finished()
    assert chief.exit.codes == [] and other.exit.codes == []


def test_the_chief_names_the_lost_process_to_the_others(capfd):
    chief, first, second = _start(3)
    second.failed()
    for survivor in (chief, first):
        assert survivor.exit.done.wait(5) and survivor.exit.codes == [peer_watch.EXIT_CODE]
    lines = [line for line in capfd.readouterr().err.splitlines() if "is gone" in line]
    assert len(lines) == 2 and all("process 2 of 3 (host2:1234)" in line for line in lines), lines


def test_a_chief_that_is_gone_is_reported_by_the_others(capfd):
    chief, other = _start(2)
    chief.failed()
    assert other.exit.done.wait(5) and other.exit.codes == [peer_watch.EXIT_CODE]
    assert "process 0 of 2 (host0:1234) is gone" in capfd.readouterr().err


def test_silence_is_a_loss_after_the_bound(monkeypatch, capfd):
    monkeypatch.setattr(peer_watch, "LOST_AFTER_S", 2.0)
    chief, other = _start(2)
    with other._lock:  # a process that stops beating and never closes: a host that vanished
        other._stopping.set()
    started = time.monotonic()
    assert chief.exit.done.wait(10)
    assert time.monotonic() - started < 2.0 + 3 * peer_watch.HEARTBEAT_S
    assert "process 1 of 2 (host1:1234) is gone (no heartbeat for 2 s)" in capfd.readouterr().err
    other.failed()


@pytest.mark.parametrize("error", [KeyboardInterrupt(), ValueError("Gloo AllGather failed")])
def test_how_an_error_in_a_run_reads_to_the_others(monkeypatch, error):
    """A Ctrl-C stops every process together (goodbye); an engine's error waits for the watch's word."""
    monkeypatch.setattr(peer_watch, "LOST_AFTER_S", 2.0)
    chief, other = _start(2)
    waited = time.monotonic()
    training._end_watch(other, error)
    if isinstance(error, KeyboardInterrupt):
        time.sleep(2 * peer_watch.HEARTBEAT_S)
        assert chief.exit.codes == []
    else:  # nothing was lost: the error is re-raised after the watch's bound, and the chief reports it
        assert time.monotonic() - waited >= peer_watch.LOST_AFTER_S
        assert chief.exit.done.wait(5)
    chief.failed()
