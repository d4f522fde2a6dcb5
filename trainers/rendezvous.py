"""The processes of a TF_CONFIG cluster meet in Python before either engine's own wait.

TensorFlow's MultiWorkerMirroredStrategy and `jax.distributed.initialize` each wait in native code
for every process of the cluster to start: TensorFlow deaf to SIGTERM (for up to an hour by its
default; trainers/distribute.py sets the limit of this meeting), JAX until its limit, where its
client ends the process with a fatal error of its own. So each process
first reports to process 0 on process 0's own TF_CONFIG port, and process 0 answers all of them
once every one has reported; then process 0 closes the port, which its engine's server binds next,
and each engine's wait finds every process up. This wait is Python's: SIGTERM and Ctrl-C stop it
at once, and at the limit it ends with the command's one-line error naming who is missing.
Process 0 also refuses a process whose TF_CONFIG lists another cluster, or whose task another
process already holds, where the engines would wait or fail far from the cause.

The protocol is one JSON line each way over a TCP connection the reporting process opens: its
hello (the cluster's digest and its own index), then process 0's answer: `{"go": true}` once all
have reported, `{"error": ...}` for a process refused, `{"timeout": ...}` (who never reported)
at the limit. Process 0 keeps each connection open until then, so a process
that dies while waiting is forgotten at once (its kernel closes the connection) and waited for
again. The reporting side closes first, so no connection of process 0's port lingers in TIME_WAIT
when its engine binds it (the engines' gRPC servers would bind through one all the same, as
TensorFlow's did when tried; a stranger's connection, which process 0 closes at its limit,
leaves one).
"""

import hashlib
import json
import os
import select
import socket
import time

from trainers.errors import StrategyError

# How long a process waits for the others to start; past it the process ends with its one-line
# error (both engines).
JOIN_TIMEOUT_S = 300
_TICK_S = 0.25  # how often a wait looks at the clock and at the signals
_HELLO_LIMIT_S = 10.0  # a connection to process 0 that says nothing for this long is not ours
_LINE_LIMIT = 4096
_LAST_WORD_S = 3.0  # how long past the limit a waiting process listens for process 0's reason


def meet(processes, index, *, tasks=None, timeout_s=None):
    """Returns once every process of `processes` (the cluster's "host:port" addresses, process 0
    first) has called this with its own `index`. `tasks`: how TF_CONFIG names each process
    ("worker 1"), for the errors. Raises StrategyError past `timeout_s` (JOIN_TIMEOUT_S where
    None) or when process 0 refuses this process. The waits are Python's, a tick at a time, so a
    signal handler that raises ends them (trainers/preemption.py stops_at_once)."""
    timeout_s = JOIN_TIMEOUT_S if timeout_s is None else timeout_s
    tasks = tasks or [f"process {i}" for i in range(len(processes))]
    names = [f"{task} ({address})" for task, address in zip(tasks, processes)]
    if len(processes) < 2:
        # No one to meet, but the engine binds the port next: another program holding it is one
        # line here, where JAX's coordinator crashed on it (SIGSEGV, no message).
        _listen(split_address(processes[0])[1], names[0]).close()
        return
    deadline = time.monotonic() + timeout_s
    digest = cluster_digest(processes)
    if index == 0:
        _gather(processes, digest, names, deadline, timeout_s)
    else:
        _report(processes, index, digest, names[0], deadline, timeout_s)


def cluster_digest(processes):
    """What two processes compare to know they were given the same cluster."""
    return hashlib.sha256(json.dumps(list(processes)).encode()).hexdigest()[:16]


def split_address(address):
    """("host", port) of "host:port" or "[v6 address]:port"."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise StrategyError(f"TF_CONFIG address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def _timed_out(timeout_s, why):
    return StrategyError(
        f"--strategy=multi_worker: the cluster of TF_CONFIG did not form within {timeout_s} s: {why}; "
        "start each of its processes with the same TF_CONFIG but its own task.index"
    )


# --- process 0 -----------------------------------------------------------------------------------


def _gather(processes, digest, names, deadline, timeout_s):
    port = split_address(processes[0])[1]
    server = _listen(port, names[0])
    joined = {}  # index -> its open connection
    hellos = {}  # connection -> (bytes so far, when it was accepted)
    refused = {}  # connection -> when: told why, waiting for the other side to close first
    try:
        while len(joined) < len(processes) - 1:
            if time.monotonic() > deadline:
                missing = [names[i] for i in range(1, len(processes)) if i not in joined]
                why = f"{_listed(missing)} never reported to {names[0]}"
                for connection in joined.values():  # the same line on every process that came
                    _send(connection, {"timeout": why})
                raise _timed_out(timeout_s, why)
            waiting = [server, *hellos, *joined.values(), *refused]
            for ready in select.select(waiting, [], [], _TICK_S)[0]:
                if ready is server:
                    connection = _accepted(server)
                    if connection is not None:
                        hellos[connection] = (b"", time.monotonic())
                elif ready in hellos:
                    _read_hello(ready, hellos, joined, refused, digest, names)
                elif ready in refused:
                    del refused[ready]
                    ready.close()
                else:  # a joined process's connection closed (it died) or broke the protocol
                    _forget(ready, joined)
            for connection, accepted in [*((c, t) for c, (_, t) in hellos.items()), *refused.items()]:
                if time.monotonic() - accepted > _HELLO_LIMIT_S:  # not one of ours
                    hellos.pop(connection, None)
                    refused.pop(connection, None)
                    connection.close()
        for connection in joined.values():
            _send(connection, {"go": True})
        _await_close([*joined.values(), *refused])
    finally:
        for connection in [*hellos, *joined.values(), *refused]:
            connection.close()
        server.close()


def _listen(port, name):
    family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
    try:
        return socket.create_server(
            ("", port), family=family, dualstack_ipv6=family == socket.AF_INET6, backlog=64
        )
    except OSError as e:
        raise StrategyError(
            f"--strategy=multi_worker: {name} cannot listen on port {port} "
            f"({os.strerror(e.errno) if e.errno else e}): "
            "another program, or another process started as process 0, holds it; stop it or "
            "give TF_CONFIG a free port"
        ) from None


def _accepted(server):
    try:
        connection, _ = server.accept()
    except OSError:  # the connection was reset before it was accepted
        return None
    connection.setblocking(False)
    return connection


def _read_hello(connection, hellos, joined, refused, digest, names):
    text, accepted = hellos[connection]
    chunk = _receive(connection)
    if chunk is None:
        return
    if not chunk or len(text) + len(chunk) > _LINE_LIMIT:
        del hellos[connection]
        connection.close()
        return
    text += chunk
    if b"\n" not in text:
        hellos[connection] = (text, accepted)
        return
    del hellos[connection]
    try:
        hello = json.loads(text.split(b"\n", 1)[0])
        theirs, index = hello["cluster"], int(hello["index"])
    except (ValueError, KeyError, TypeError):  # not one of ours
        connection.close()
        return
    if theirs != digest:
        error = f"the TF_CONFIG of {names[0]} lists another cluster: give every process the same cluster"
    elif not 0 < index < len(names):
        error = f"task index {index} is not one of the cluster's {len(names)} processes"
    elif index in joined:
        error = f"another process already started as {names[index]}: start each with its own task.index"
    else:
        joined[index] = connection
        return
    _send(connection, {"error": error})
    refused[connection] = time.monotonic()


def _forget(connection, joined):
    for index, open_connection in list(joined.items()):
        if open_connection is connection:
            del joined[index]
    connection.close()


def _await_close(connections, limit_s=5.0):
    """Waits for each reporting process to close its side first (it does so on the answer)."""
    end = time.monotonic() + limit_s
    while connections and time.monotonic() < end:
        for ready in select.select(connections, [], [], _TICK_S)[0]:
            if _receive(ready) == b"":
                connections.remove(ready)


def _receive(connection):
    """The bytes that came, b"" once the other side closed, None where nothing came yet."""
    try:
        return connection.recv(_LINE_LIMIT)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:  # reset
        return b""


def _send(connection, message):
    try:
        connection.setblocking(True)
        connection.settimeout(2.0)
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:  # it died in the meantime: its engine's own wait finds out
        pass


# --- every other process -------------------------------------------------------------------------


def _report(processes, index, digest, first, deadline, timeout_s):
    host, port = split_address(processes[0])
    hello = json.dumps({"cluster": digest, "index": index}).encode() + b"\n"
    reached = False  # process 0's port took a hello of this process
    while True:
        if time.monotonic() > deadline:
            why = f"{first} was reached but did not answer" if reached else f"{first} never answered"
            raise _timed_out(timeout_s, why)
        connection = _connect(host, port, deadline)
        if connection is None:
            time.sleep(_TICK_S)
            continue
        with connection:
            try:
                connection.sendall(hello)
            except OSError:
                continue
            reached = True
            # A moment past the limit, for process 0's own word at the same limit.
            answer = _answer(connection, deadline + _LAST_WORD_S)
        if answer is None:  # the limit: said at the top
            continue
        if answer is _ENDED:  # process 0 went away, or the port is not its: try again
            time.sleep(_TICK_S)
            continue
        if answer.get("go") is True:
            return
        if "timeout" in answer:
            raise _timed_out(timeout_s, answer["timeout"])
        raise StrategyError(f"--strategy=multi_worker: {first} refused this process: {answer.get('error')}")


def _connect(host, port, deadline):
    try:
        return socket.create_connection((host, port), timeout=max(0.1, min(1.0, deadline - time.monotonic())))
    except OSError:  # not up yet, or not reachable yet
        return None


_ENDED = object()  # the connection closed without an answer


def _answer(connection, deadline):
    """Process 0's answer (a dict); _ENDED where the connection ended without one; None at the
    limit."""
    connection.setblocking(False)
    text = b""
    while time.monotonic() <= deadline:
        if not select.select([connection], [], [], _TICK_S)[0]:
            continue
        chunk = _receive(connection)
        if chunk is None:
            continue
        if not chunk or len(text) + len(chunk) > _LINE_LIMIT:
            return _ENDED
        text += chunk
        if b"\n" in text:
            try:
                answer = json.loads(text.split(b"\n", 1)[0])
            except ValueError:
                return _ENDED
            return answer if isinstance(answer, dict) else _ENDED
    return None


def _listed(names):
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
