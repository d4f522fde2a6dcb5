"""Trainer commands as processes forked from one that already imported their libraries.

A `python -m trainers.finetune ...` child spends its first ~5 s of CPU importing TensorFlow,
Keras and JAX, the same for every command. Where the test's subject is what the running command
does as a process (a signal, a kill, a cluster of processes, a run on another Keras backend),
`start_process` forks that process from a server that did those imports once, as a trainer
command's start does them, and runs the command's module as `__main__` there (or a script of
tests/ that runs commands, as `python SCRIPT` would, a program that imports the trainers, as
`python -c CODE` would, the Jupyter kernel that runs a colab/ notebook, which imports them in
its first cells, one of the library's commands, whose start is the package's import, or pytest,
whose collection imports them): the child is a process of its own (its pid, signals, exit status,
output), started without the import. Where the subject is the start itself (what a fresh
interpreter prints, a signal while it imports, a backend chosen at start-up, a pinned
environment), tests start a fresh interpreter instead (`fresh=True`).

What a command's import does depends on its engine and on the environment as the trainers'
import leaves it (trainers/engine_env.py sets KERAS_BACKEND, and XLA_FLAGS for JAX's CPU
devices), so a server is kept per (engine, that environment) and shared by every process of the
test run (`use_folder`); a command whose start is not a server's (--verbose, a pinned command,
another module, a library command on a backend no engine runs) gets none: `prepared` returns no
key.

    python -c _SERVER_START FOLDER OWNER_PID ENGINE

serves on FOLDER/socket until OWNER_PID is gone; one request per connection, with the child's
stdout and stderr as file descriptors; the answer is the child's pid, then its exit status (a
signal's as -signum).
"""

import atexit
import fcntl
import gc
import hashlib
import importlib.machinery
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
import types

import child_processes

MODULES = ("trainers.finetune", "trainers.pretrain", "trainers.fewshot")  # early_signals.COMMANDS
CODE = "-c"  # the target of `python -c CODE ARGS...`: its args are the code, then sys.argv[1:]
KERNEL = "ipykernel_launcher"  # `python -m ipykernel_launcher -f CONNECTION_FILE`, as Jupyter starts one
# The library's commands (`python -m keras_vit.predict ...`): their start is the package's import,
# which the trainers' import makes too, on the backend the environment (or keras.json) names.
LIBRARY = "keras_vit."
COMMANDS = ("trainers.", LIBRARY)  # every command of the two packages (MODULES the server imports)
PYTEST = "pytest"  # `python -m pytest ...`: its collection imports the trainers' libraries
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Set to 1, every child starts a fresh interpreter (to tell a fault of the forking from the
# command's, or to time the suite without it).
FRESH_VARIABLE = "KERAS_VIT_FRESH_CHILDREN"
# Read when a process runs (or by this module), not when it imports: one server serves every
# value of them (pytest's own name the test and the worker: a server serves every worker).
RUN_TIME_VARIABLES = (
    "TF_CONFIG",
    "PYTEST_CURRENT_TEST",
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_TESTRUNUID",
    FRESH_VARIABLE,
    "JPY_PARENT_PID",  # what Jupyter tells the kernel it starts
    "JPY_SESSION_NAME",
)
# Hugging Face's variables (HF_HOME, HF_HUB_OFFLINE, ...): huggingface_hub reads them as its
# `constants` module is first imported, which a server's imports leave to the command (checked as
# a server starts), so they are read at run time too.
RUN_TIME_PREFIXES = ("HF_",)
HUB_CONSTANTS = "huggingface_hub.constants"
_FOLDER = []  # the test run's folder of servers (tests/conftest.py), else one of this process's
_STARTED = []  # the children `start_process` made that were running when last looked at


def use_folder(folder):
    """Servers are found and started in `folder`, which every process of the test run shares."""
    _FOLDER[:] = [str(folder)]


def argv(target, args):
    """The command line of `target args`, as a fresh interpreter runs it."""
    if target == CODE or target.endswith(".py"):
        return [sys.executable, target, *args]
    return [sys.executable, "-m", target, *args]


def prepared(target, args, env):
    """(server key or None, the environment as the child's import leaves it) for `python -m
    target args` (a trainer command), `python target args` (a script of tests/) or `python -c
    CODE args` (target CODE, the code first in args)."""
    from keras_vit import startup
    from trainers import engine_env, reproducible

    orig_argv = argv(target, args)
    served = target in (KERNEL, CODE, PYTEST) or target.startswith(COMMANDS) or target.endswith(".py")
    if env.get(FRESH_VARIABLE) == "1" or not served:
        return None, env
    # What the import reads of the command line besides the engine (trainers/__init__.py).
    if startup.verbose_requested([target, *args]) or reproducible.is_pinned_command(orig_argv):
        return None, env
    server_env = dict(env)
    if target.startswith(LIBRARY):
        # The library's import leaves KERAS_BACKEND as it found it: the child's stays unset.
        backend = keras_backend(env)
        engine = next((name for name, chosen in engine_env.BACKENDS.items() if chosen == backend), None)
        if engine is None:  # a backend no server imports (torch, openvino)
            return None, env
        server_env["KERAS_BACKEND"] = backend
    else:
        engine = engine_env.prepare(args, orig_argv, server_env)
        env = server_env
    key = tuple(sorted((k, v) for k, v in server_env.items() if not _read_at_run_time(k)))
    return (engine, key), env


def _read_at_run_time(name):
    return name in RUN_TIME_VARIABLES or name.startswith(RUN_TIME_PREFIXES)


def keras_backend(env):
    """The backend Keras 3 chooses in a process started with `env`: KERAS_BACKEND, else the one
    keras.json names in KERAS_HOME (~/.keras; /tmp/.keras where the home is not writable), else
    tensorflow (keras/src/backend/config.py)."""
    if "KERAS_BACKEND" in env:
        return env["KERAS_BACKEND"]
    folder = env.get("KERAS_HOME")
    if folder is None:
        home = env.get("HOME") or os.path.expanduser("~")
        folder = os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
    try:
        with open(os.path.join(os.path.expanduser(folder), "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):  # none, unreadable, or not a JSON object
        return "tensorflow"


def start_process(target, args, env, stdout, stderr, fresh=False, cwd=ROOT, own_group=False):
    """`python -m target args` (a script's `python target args`, a program's `python -c CODE
    args`) with `env` (the whole environment), `cwd` as working directory and its output on the
    open files `stdout` and `stderr`: forked from the server of its kind, or a fresh interpreter
    where `fresh` or where no server serves it (`prepared`). With `own_group`, the child leads a
    process group of its own, as Jupyter starts a kernel (in a session of its own), so that a
    signal Jupyter sends to the kernel's group reaches no other process. A Popen-like handle."""
    child = None if fresh else _fork(target, args, env, stdout.fileno(), stderr.fileno(), cwd, own_group)
    child = child or subprocess.Popen(
        argv(target, args), cwd=cwd, env=env, stdout=stdout, stderr=stderr, start_new_session=own_group
    )
    _STARTED[:] = [proc for proc in _STARTED if proc.poll() is None] + [child]
    return child


def kill_left_running():
    """Kills every child `start_process` made here that still runs (one a test left behind when a
    check failed before its own clean-up); returns how many it killed."""
    running = [proc for proc in _STARTED if proc.poll() is None]
    for proc in running:
        proc.kill()
        proc.wait()
    _STARTED.clear()
    return len(running)


def run_process(target, args, env, timeout, fresh=False, cwd=ROOT, own_group=False):
    """`start_process`, waited for (killed past `timeout`, which raises): a CompletedProcess (text)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = start_process(target, args, env, out, err, fresh, cwd, own_group)
        try:
            code = proc.wait(timeout)
        finally:
            proc.kill()
            proc.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, code, out.read(), err.read())


def _fork(target, args, env, stdout, stderr, cwd, own_group):
    """The forked child (a Popen-like handle), its output on the file descriptors given; None
    where the command gets no server."""
    key, env = prepared(target, args, env)
    if key is None:
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(_server(key))
    request = {"target": target, "args": list(args), "env": env, "cwd": str(cwd), "own_group": own_group}
    # A fresh interpreter inherits an ignored SIGINT (a run started by `nohup ... &`, or in a
    # shell script's background) and keeps it ignored; the forked child is told to do the same.
    request["sigint_ignored"] = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    request = json.dumps(request).encode()
    socket.send_fds(connection, [request], [stdout, stderr])
    child = Forked(connection, argv(target, args))
    child_processes.note_forked(child.args)
    return child


class Forked:
    """A forked command, as much of subprocess.Popen as the tests (and jupyter_client) use."""

    stdin = stdout = stderr = None  # its output went to the files given

    def __init__(self, connection, args):
        self.args = args
        self._connection = connection
        self._answers = b""
        self.returncode = None
        self.pid = self._answer(timeout=60)

    def _answer(self, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
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
                self.wait(timeout=0)
            except subprocess.TimeoutExpired:
                pass
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


def _server(key):
    """The socket of the key's server, started here if no process of the test run has."""
    if not _FOLDER:
        use_folder(tempfile.mkdtemp(prefix="command_servers_"))
        atexit.register(shutil.rmtree, _FOLDER[0], True)
    folder = os.path.join(_FOLDER[0], hashlib.sha256(repr(key).encode()).hexdigest()[:16])
    path = os.path.join(folder, "socket")
    os.makedirs(folder, exist_ok=True)
    with open(folder + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one start per key; released when the file closes
        if _is_serving(path):
            return path
        # Until this test run's controlling process ends (pytest-xdist's, or this one alone):
        # the first test to ask starts it, the others use it.
        owner = os.getppid() if "PYTEST_XDIST_WORKER" in os.environ else os.getpid()
        with open(os.path.join(folder, "key.txt"), "w") as f:
            f.write(f"{key[0]}\n" + "".join(f"{k}={v}\n" for k, v in key[1]))
        with open(os.path.join(folder, "server.log"), "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER_START, folder, str(owner), key[0]],
                cwd=ROOT,
                env={**dict(key[1]), child_processes.SERVER_VARIABLE: key[0]},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 300
        while not os.path.exists(path):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                with open(os.path.join(folder, "server.log")) as f:
                    raise RuntimeError(f"the command server did not start: {f.read()[-3000:]}")
            time.sleep(0.05)
    return path


def _is_serving(path):
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:  # none yet, or one whose run ended
        return False
    finally:
        probe.close()
    return True


# The server's __main__ is this line's module, nearly empty, as `python -m` leaves it for the
# command's module to run in.
_SERVER_START = (
    f"import sys; sys.path[0] = {os.path.dirname(os.path.abspath(__file__))!r}; "
    "import command_server; command_server.serve(*sys.argv[1:])"
)


def serve(folder, owner, engine):
    """The server (python -c _SERVER_START): what follows the fork runs the command."""
    request, fds = _serve(folder, int(owner), engine)
    _become(request, fds)
    target = request["target"]
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    elif target == CODE:  # a __main__ of its own, as `python -c` gives the code
        main = types.ModuleType("__main__")
        main.__annotations__, main.__loader__ = {}, importlib.machinery.BuiltinImporter
        sys.modules["__main__"] = main
        exec(compile(request["args"][0], "<string>", "exec"), main.__dict__)
    else:  # what `python -m` runs (runpy's private name, stable since Python 2.7): argv[0] the file
        runpy._run_module_as_main(target, alter_argv=True)


def _serve(folder, owner, engine):
    """Imports as `python -m trainers.finetune --engine=ENGINE` would, then forks a child per
    request and answers; returns only in a child, with its request."""
    sys.orig_argv = [sys.executable, "-m", MODULES[0], f"--engine={engine}"]
    sys.argv = [MODULES[0], f"--engine={engine}"]
    sys.path[0] = ROOT  # `python -m`'s first entry is the working directory, not tests/
    before = dict(os.environ)
    for name in MODULES:
        __import__(name)
    if HUB_CONSTANTS in sys.modules:  # it would have read the HF_ variables of the server's start
        raise RuntimeError(f"the servers' imports loaded {HUB_CONSTANTS}: remove RUN_TIME_PREFIXES' HF_")
    # What the imports set (log levels): each child's environment is its request's with these,
    # as its own import would have left it.
    imported = {k: v for k, v in os.environ.items() if before.get(k) != v}
    removed = [k for k in before if k not in os.environ]
    # The commands' own modules run as __main__ in the child, as `python -m` runs them: here only
    # what they import stays loaded (runpy warns of a module run as __main__ that is already in).
    package = sys.modules["trainers"]
    for name in MODULES:
        del sys.modules[name]
        delattr(package, name.rpartition(".")[2])
    gc.collect()
    path = os.path.join(folder, "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)  # of a server whose run ended
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.rename(path + ".tmp", path)  # the client waits for the name: ready once it exists
    children = {}  # pid: the connection its status goes to
    while True:
        if select.select([listener], [], [], 0.05)[0]:
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
            if request["own_group"]:  # here too, so that the group exists once the pid is answered
                _own_group(pid)
            children[pid] = connection
            _answer(connection, pid)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            connection = children.pop(pid)
            _answer(connection, os.waitstatus_to_exitcode(status))
            connection.close()
        try:
            os.kill(owner, 0)
        except ProcessLookupError:  # the test run is over
            os._exit(0)


def _own_group(pid):
    """The process `pid` (0: this one) leads a process group of its own."""
    try:
        os.setpgid(pid, pid)
    except OSError:  # the other side of the fork made it already, or the child has ended
        pass


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
    """This child as a fresh `python -m target args` (or `python target args`) would be at its
    target's first line."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (stdin, *fds):
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    if request["own_group"]:
        _own_group(0)
    os.chdir(request["cwd"])
    target, args = request["target"], request["args"]
    sys.orig_argv = argv(target, args)
    sys.argv = [CODE, *args[1:]] if target == CODE else [target, *args]
    if target.endswith(".py"):
        sys.path[0] = os.path.dirname(os.path.abspath(target))  # as `python SCRIPT` puts it
    elif target == CODE:
        sys.path[0] = ""  # as `python -c` puts it: the working directory
    else:
        sys.path[0] = os.getcwd()  # as `python -m` puts it
    if target not in MODULES:
        # The server's import caught these as a trainer command's does (trainers/early_signals.py);
        # a program that is not a command starts with Python's own handlers (or SIGINT ignored,
        # where its requester's is and an exec would have kept it so).
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        ignored = request["sigint_ignored"]
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.default_int_handler)
    import numpy as np

    np.random.seed()  # Python's `random` reseeds itself in a forked child; NumPy's does not
