"""trainers/rendezvous.py: the processes of a cluster meet at process 0 in Python before either
engine's native wait, so a missing process ends the others at a limit with one line, signals stop
the wait, a process given another cluster or a taken task is refused, and process 0's port is free
for its engine's server afterwards. Each "process" here is a thread of this one, on loopback."""

import os
import signal
import socket
import threading
import time

import pytest

from trainers import preemption, rendezvous
from trainers.errors import StrategyError


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _cluster(count):
    return [f"localhost:{port}" for port in _free_ports(count)]


class _Process(threading.Thread):
    """One process's `meet`, in a thread: `error` holds what it raised, if anything."""

    def __init__(self, processes, index, **kwargs):
        super().__init__(daemon=True)
        self.args, self.kwargs = (processes, index), kwargs
        self.error = None
        self.returned = False

    def run(self):
        try:
            rendezvous.meet(*self.args, **self.kwargs)
            self.returned = True
        except Exception as e:  # noqa: BLE001 (handed to the test)
            self.error = e


def _started(processes, indexes, **kwargs):
    threads = [_Process(processes, i, **kwargs) for i in indexes]
    for thread in threads:
        thread.start()
    return threads


def _connection_once_listening(address):
    host, port = rendezvous.split_address(address)
    end = time.monotonic() + 20
    while True:
        try:
            return socket.create_connection((host, port), timeout=1)
        except ConnectionRefusedError:
            assert time.monotonic() < end, "process 0 never listened"
            time.sleep(0.05)


def _joined(threads, seconds=30):
    for thread in threads:
        thread.join(seconds)
        assert not thread.is_alive(), "a process still waits"
    return threads


def test_processes_started_in_any_order_all_return_and_process_0_s_port_is_left_free():
    """The others start first and retry until process 0 listens; once met, the port binds at
    once without SO_REUSEADDR, so no connection of process 0's lingers in TIME_WAIT there (the
    engine's server binds that port next)."""
    processes = _cluster(3)
    others = _started(processes, [2, 1])
    time.sleep(0.6)  # refused connections, retried
    assert all(t.is_alive() for t in others)
    threads = _joined([*_started(processes, [0]), *others])
    assert [(t.returned, t.error) for t in threads] == [(True, None)] * 3
    port = rendezvous.split_address(processes[0])[1]
    with socket.socket() as server:
        server.bind(("", port))


def test_one_process_alone_does_not_wait_but_checks_its_port():
    """A one-process cluster meets no one, but its engine binds the port next: JAX's coordinator
    ended the process with SIGSEGV and no message where another program held it (jax 0.10.2,
    tried by hand), TensorFlow's server with a traceback. The port is left free for the engine."""
    processes = _cluster(1)
    start = time.monotonic()
    rendezvous.meet(processes, 0, timeout_s=0.1)
    assert time.monotonic() - start < 0.1
    port = rendezvous.split_address(processes[0])[1]
    with socket.create_server(("", port)):
        taken = rf"process 0 \({processes[0]}\) cannot listen on port {port} "
        with pytest.raises(StrategyError, match=taken):
            rendezvous.meet(processes, 0, timeout_s=5)
    with socket.socket() as server:
        server.bind(("", port))


def test_a_process_that_never_starts_ends_the_others_at_the_limit_with_one_line_naming_it():
    processes = _cluster(3)
    tasks = ["chief 0", "worker 0", "worker 1"]
    first, second = _joined(_started(processes, [0, 1], tasks=tasks, timeout_s=1.5))
    assert isinstance(first.error, StrategyError) and isinstance(second.error, StrategyError)
    assert str(first.error) == (
        "--strategy=multi_worker: the cluster of TF_CONFIG did not form within 1.5 s: "
        f"worker 1 ({processes[2]}) never reported to chief 0 ({processes[0]}); start each of "
        "its processes with the same TF_CONFIG but its own task.index"
    )
    assert str(second.error) == str(first.error)  # process 0 told the ones that came


def test_a_process_whose_process_0_never_starts_says_so_at_the_limit():
    processes = _cluster(2)
    start = time.monotonic()
    with pytest.raises(StrategyError, match=rf"within 0.5 s: process 0 \({processes[0]}\) never answered;"):
        rendezvous.meet(processes, 1, timeout_s=0.5)
    assert time.monotonic() - start < 5


def test_a_process_given_another_cluster_or_a_taken_task_is_refused_and_the_right_ones_meet():
    processes = _cluster(3)
    gather = _started(processes, [0])
    other_cluster = [processes[0], processes[2], processes[1]]
    with pytest.raises(StrategyError, match=r"refused this process: the TF_CONFIG of .* another cluster"):
        rendezvous.meet(other_cluster, 1, timeout_s=20)
    first = _started(processes, [1])
    time.sleep(0.6)  # process 0 has taken the first worker 1's hello
    with pytest.raises(StrategyError, match=r"another process already started as process 1 \("):
        rendezvous.meet(processes, 1, timeout_s=20)
    threads = _joined([*gather, *first, *_started(processes, [2])])
    assert [(t.returned, t.error) for t in threads] == [(True, None)] * 3


def test_a_process_that_dies_after_reporting_is_waited_for_again():
    """Its connection closes with it: process 0 must not answer the others as if it were there."""
    processes = _cluster(3)
    (gather,) = _started(processes, [0])
    hello = b'{"cluster": "%s", "index": 1}\n' % rendezvous.cluster_digest(processes).encode()
    with _connection_once_listening(processes[0]) as dying:
        dying.sendall(hello)
        time.sleep(0.3)  # taken; then the process "dies" (its connection closes)
    (last,) = _started(processes, [2])
    time.sleep(0.6)
    assert gather.is_alive() and last.is_alive(), "process 0 went on without the process that died"
    threads = _joined([gather, last, *_started(processes, [1])])
    assert [(t.returned, t.error) for t in threads] == [(True, None)] * 3


def test_a_stranger_on_process_0_s_port_changes_nothing():
    processes = _cluster(2)
    (gather,) = _started(processes, [0])
    stranger = _connection_once_listening(processes[0])
    with stranger:
        stranger.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        threads = _joined([gather, *_started(processes, [1])])
    assert [(t.returned, t.error) for t in threads] == [(True, None)] * 2


def test_process_0_s_port_taken_by_another_program_is_one_line():
    processes = _cluster(2)
    port = rendezvous.split_address(processes[0])[1]
    with socket.create_server(("", port)):
        taken = rf"process 0 \({processes[0]}\) cannot listen on port {port} "
        with pytest.raises(StrategyError, match=taken):
            rendezvous.meet(processes, 0, timeout_s=5)


@pytest.mark.parametrize("index", [0, 1])
def test_sigterm_during_the_wait_stops_the_command_at_once(index):
    """Inside a run the command's handlers only set a flag; around the wait they stop the command
    at once, and the wait lets them, so a scheduler's SIGTERM is not held until the limit
    (TensorFlow's own wait ignored it for an hour)."""
    processes = _cluster(2)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    start = time.monotonic()
    with preemption.watching(reads=True):
        timer.start()
        with pytest.raises(preemption.Stopped), preemption.stops_at_once():
            rendezvous.meet(processes, index, timeout_s=60)
    assert time.monotonic() - start < 10


def test_a_bad_address_is_one_line():
    with pytest.raises(StrategyError, match=r"TF_CONFIG address 'localhost' is not host:port"):
        rendezvous.meet(["localhost", "localhost:1"], 1, timeout_s=1)
    assert rendezvous.split_address("[::1]:2222") == ("::1", 2222)
