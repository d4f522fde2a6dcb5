"""Trainer commands as processes forked from one that already imported their libraries.

A `python -m trainers.finetune ...` child spends its first ~5 s of CPU importing TensorFlow,
Keras and JAX, the same for every command. Where the test's subject is what the running command
does as a process (a signal, a kill, a cluster of processes), `start` forks that process from a
server that did those imports once, as that command's start does them, and runs the command's
module as `__main__` there: the child is a process of its own (its pid, signals, exit status,
output), started without the import. Where the subject is the start itself (what a fresh
interpreter prints, a signal while it imports, a backend chosen at start-up, a pinned
environment), tests start a fresh interpreter instead.

The imports depend on the command line (--engine, --cpu_devices for JAX, --verbose) and on the
environment, which the trainers read at their import (trainers/__init__.py, keras_vit/startup.py):
a server is kept per (engine, JAX's CPU devices, environment), and a command whose start is not
a server's (--verbose, a pinned command, another module) gets no server: `key` is None.

    python -c _SERVER_START SOCKET MODULE [--engine=E] [--cpu_devices=N]

serves on a Unix socket; one request per connection, with the child's stdout and stderr as
file descriptors; the answer is the child's pid, then its exit status (a signal's as -signum).
"""

import atexit
import gc
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import child_processes

MODULES = ("trainers.finetune", "trainers.pretrain", "trainers.fewshot")  # early_signals.COMMANDS
# Read when a process runs, not when it imports: a server serves every value of them.
RUN_TIME_VARIABLES = ("TF_CONFIG", "PYTEST_CURRENT_TEST")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Set to 1, every child starts a fresh interpreter (to tell a fault of the forking from the
# command's, or to time the suite without it).
FRESH_VARIABLE = "KERAS_VIT_FRESH_CHILDREN"
MAX_SERVERS = 2
_SERVERS = {}  # key: (Popen, socket path), one set per test process
_CHILDREN = {}  # key: [Forked, ...], so that a server with a child running is kept


def _flag(args, name):
    value = None
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            value = arg.partition("=")[2]
        elif arg == name and i + 1 < len(args):
            value = args[i + 1]
    return value


def key(module, args, env):
    """What a server must have imported for this command: (import flags, environment), or None
    where the command's start is itself something a test may check."""
    from trainers import engine_env, reproducible

    orig_argv = [sys.executable, "-m", module, *args]
    if env.get(FRESH_VARIABLE) == "1":
        return None
    if module not in MODULES or "--verbose" in args or _flag(args, "--verbose") not in (None, "false"):
        return None
    if reproducible.is_pinned_command(orig_argv):
        return None
    engine = engine_env.requested_engine(args, orig_argv, env)
    flags = [f"--engine={engine}"]
    devices = _flag(args, "--cpu_devices")
    if engine_env.REGISTRY[engine].cpu_devices_xla_flag and devices:
        flags.append(f"--cpu_devices={devices}")
    environment = tuple(sorted((k, v) for k, v in env.items() if k not in RUN_TIME_VARIABLES))
    return tuple(flags), environment


def start(module, args, env, stdout, stderr):
    """Forks `python -m module args` (env: its whole environment, cwd: the repository) with its
    output on the file descriptors given; a Popen-like handle. The caller checks `key` first."""
    server_key = key(module, args, env)
    server = _server(server_key, env)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(server)
    request = json.dumps({"module": module, "args": list(args), "env": env}).encode()
    socket.send_fds(connection, [request], [stdout, stderr])
    child = Forked(connection, module, args)
    child_processes.note_forked(child.args)
    _CHILDREN[server_key] = [c for c in _CHILDREN.get(server_key, []) if c.returncode is None] + [child]
    return child


class Forked:
    """A forked command, as much of subprocess.Popen as the tests use."""

    def __init__(self, connection, module, args):
        self.args = [sys.executable, "-m", module, *args]
        self._connection = connection
        self._answers = b""
        self.pid = self._answer(timeout=60)
        self.returncode = None

    def _answer(self, timeout):
        deadline = time.monotonic() + timeout if timeout is not None else None
        while b"\n" not in self._answers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._connection], [], [], left)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            data = self._connection.recv(4096)
            if not data:
                raise RuntimeError(f"the command server ended before answering for {self.args}")
            self._answers += data
        line, _, self._answers = self._answers.partition(b"\n")
        return int(line)

    def poll(self):
        if self.returncode is None:
            try:
                self.returncode = self._answer(timeout=0)
            except subprocess.TimeoutExpired:
                return None
            self._connection.close()
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            self.returncode = self._answer(timeout)
            self._connection.close()
        return self.returncode

    def send_signal(self, signum):
        if self.poll() is None:  # never to a pid the system may have given to another process
            os.kill(self.pid, signum)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def _server(server_key, env):
    if server_key in _SERVERS and _SERVERS[server_key][0].poll() is None:
        _SERVERS[server_key] = _SERVERS.pop(server_key)  # the most recently used last
        return _SERVERS[server_key][1]
    idle = [k for k in _SERVERS if all(child.poll() is not None for child in _CHILDREN.get(k, []))]
    while len(_SERVERS) >= MAX_SERVERS and idle:  # each holds ~0.5 GB of imports
        _stop(*_SERVERS.pop(idle.pop(0)))
    flags, _ = server_key
    folder = tempfile.mkdtemp(prefix="command_server_")
    path = os.path.join(folder, "socket")
    log = open(os.path.join(folder, "server.log"), "w")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER_START, path, MODULES[0], *flags],
        cwd=ROOT,
        env={k: v for k, v in env.items() if k not in RUN_TIME_VARIABLES},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + 300
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            with open(os.path.join(folder, "server.log")) as f:
                raise RuntimeError(f"the command server did not start: {f.read()[-3000:]}")
        time.sleep(0.05)
    _SERVERS[server_key] = (proc, path)
    return path


def _stop(proc, path):
    proc.kill()  # SIGKILL: the trainers' import notes a SIGTERM instead of ending
    proc.wait()
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


# The server's __main__ is this line's module, nearly empty, as `python -m` leaves it for the
# command's module to run in.
_SERVER_START = (
    f"import sys; sys.path[0] = {os.path.dirname(os.path.abspath(__file__))!r}; "
    "import command_server; command_server.serve(*sys.argv[1:])"
)


@atexit.register
def _stop_servers():
    for server in _SERVERS.values():
        _stop(*server)


# The server.


def _serve(path, module, flags):
    """Imports as `python -m module flags` would, then forks a child per request and answers;
    returns only in a child, with its request."""
    sys.orig_argv = [sys.executable, "-m", module, *flags]
    sys.argv = [module, *flags]
    sys.path[0] = ROOT  # `python -m`'s first entry is the working directory, not tests/
    before = dict(os.environ)
    for name in MODULES:
        __import__(name)
    # What the imports set (KERAS_BACKEND, JAX's device count in XLA_FLAGS, log levels): each
    # child's environment is its request's with these, as its own import would have left it.
    imported = {k: v for k, v in os.environ.items() if before.get(k) != v}
    removed = [k for k in before if k not in os.environ]
    # The commands' own modules run as __main__ in the child, as `python -m` runs them: here only
    # what they import stays loaded (runpy warns of a module run as __main__ that is already in).
    package = sys.modules["trainers"]
    for name in MODULES:
        del sys.modules[name]
        delattr(package, name.rpartition(".")[2])
    gc.collect()
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.rename(path + ".tmp", path)  # the client waits for the name: ready once it exists
    children = {}  # pid: the connection its status goes to
    while True:
        ready = select.select([listener], [], [], 0.05)[0]
        if ready:
            connection, _ = listener.accept()
            request, fds = _receive(connection)
            if request is None:  # a client that went away before its request was whole
                connection.close()
                continue
            sys.stdout.flush()  # else the child would write what this process buffered
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                for sock in [listener, connection, *children.values()]:
                    sock.close()
                request["env"] = {k: v for k, v in request["env"].items() if k not in removed}
                request["env"].update(imported)
                return request, fds
            for fd in fds:
                os.close(fd)
            children[pid] = connection
            _answer(connection, pid)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            connection = children.pop(pid)
            _answer(connection, os.waitstatus_to_exitcode(status))
            connection.close()
        if os.getppid() != parent:  # the test process is gone
            os._exit(0)


def _answer(connection, number):
    try:
        connection.sendall(f"{number}\n".encode())
    except OSError:  # the test gave up on the child
        pass


def _receive(connection):
    data, fds = b"", []
    while True:
        chunk, received, _, _ = socket.recv_fds(connection, 1 << 20, 2)
        data += chunk
        fds += received
        if len(fds) == 2 and _complete(data):
            return json.loads(data), fds
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []


def _complete(data):
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _become(request, fds):
    """This child as a fresh `python -m module args` would be at its module's first line."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (stdin, *fds):
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(ROOT)
    sys.orig_argv = [sys.executable, "-m", request["module"], *request["args"]]
    sys.argv = [request["module"], *request["args"]]
    import numpy as np

    np.random.seed()  # Python's `random` reseeds itself in a forked child; NumPy's does not


def serve(path, module, *flags):
    """The server's start (python -c _SERVER_START); what follows the fork runs the command."""
    request, fds = _serve(path, module, flags)
    _become(request, fds)
    # What `python -m` runs (a private name of runpy's, stable since Python 2.7): the module as
    # __main__, argv[0] its file.
    runpy._run_module_as_main(request["module"], alter_argv=True)
