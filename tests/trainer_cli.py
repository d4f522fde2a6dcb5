"""Helpers for the trainer command-line tests: fake TFDS data, a tiny ViT, command runs.

`run_cli` runs a command in this process, through the same `main(argv)` as `python -m
trainers.<module>`: a run costs its own work, not a Python start-up and a TensorFlow import (~10 s
of CPU each). A test starts a child (`run_child`, `start_cli`, `start_cluster`) only where the
process is what it checks: a signal, a kill, a cluster of processes, a backend chosen at start-up,
what a fresh interpreter prints.
"""

import contextlib
import glob
import importlib
import io
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings

import command_server
import console_scripts
import keras
import numpy as np
import tensorflow as tf
from fixtures import FAKE_TFDS, ROOT, TINY_DIGITS_FLAGS, TINY_FLAGS, make_fake_tfds  # noqa: F401 (used by the tests)

from keras_vit import npz_layout
from trainers import engine_env

# tests/fixtures.py's tiny ViT, as trainer flags.
TINY_MODEL = TINY_FLAGS

# The fine-tuning run of tests/test_finetune.py and tests/test_checkpoint_faults.py: 30 steps,
# checkpoints at 10, 20, 30, ~8 s on 2 cores. The clip (0.5) is below the run's gradient norms,
# so it binds.
CIFAR_RUN = TINY_MODEL + [
    "--dataset=cifar10",
    "--batch_size=16",
    "--total_steps=30",
    "--warmup_steps=5",
    "--base_lr=0.5",
    "--steps_per_loop=5",
    "--eval_every=10",
    "--checkpoint_every=10",
    "--grad_norm_clip=0.25",
    "--seed=1",
]


def child_env(extra=None):
    """The environment of the suite's command children, plus `extra`: the repository on
    PYTHONPATH, the TensorFlow backend unless the environment names one, TensorFlow's
    warnings hidden, no cluster."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("TF_CONFIG", None)
    env.update(extra or {})
    return env


def command(module, args):
    """`python -m trainers.<module> args`, as a fresh interpreter runs it."""
    return command_server.argv(f"trainers.{module}", args)


def run_cli(module, args, env=None):
    """`python -m trainers.<module> args`, run in this process; a CompletedProcess (text output).

    Like the command: the exit status of `main(argv)` (SystemExit's too, and 1 with the traceback
    on stderr for an exception that escapes it), stdout and stderr as Python writes them, the
    repository as the working directory, `env` added to the environment for the run. What a run
    changes of this process is put back after it (environment, working directory, signal
    handlers, Keras' global state and precision policy), so that runs do not see each other.
    A run on another Keras backend than this process's (--engine=jax, KERAS_BACKEND) or in a
    cluster (TF_CONFIG) needs a process of its own: `run_child`.
    """
    return run_main(f"trainers.{module}", args, env)


def run_main(module, args, env=None):
    """`python -m <module> args` (a module with `main(argv)`: a trainer, keras_vit.convert, ...),
    run in this process: see run_cli."""
    env = dict(env or {})
    _refuse_what_needs_a_child(module, args, env)
    main = importlib.import_module(module).main
    # The trainers' main reads a sys.argv (the program first); the library's commands (keras_vit.
    # convert, predict, export) an argparse list, without it.
    argv = [module.rsplit(".", 1)[-1], *args] if module.startswith("trainers.") else list(args)
    out, err = io.StringIO(), io.StringIO()
    with (
        _process_state_kept(module, args, env),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        _library_log_to(out)
        try:
            status = console_scripts.exit_status(lambda: main(argv))
        finally:
            _library_log_to(sys.__stdout__)
    return subprocess.CompletedProcess(
        [sys.executable, "-m", module, *args], status, out.getvalue(), err.getvalue()
    )


def save_process(proc, folder):
    """Keeps a CompletedProcess beside a session artefact, for every test process that reads it."""
    fields = {"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    with open(os.path.join(folder, "process.json"), "w") as f:
        json.dump(fields, f)


def load_process(folder):
    with open(os.path.join(folder, "process.json")) as f:
        return subprocess.CompletedProcess(**json.load(f))


def run_child(module, args, env=None, timeout=300, fresh=False):
    """Runs `python -m trainers.<module> args` in a child process; the CompletedProcess (text).
    Only where the process is the subject (see the module's docstring); otherwise `run_cli`.
    Forked from tests/command_server.py's server, which imported the command's libraries once,
    unless `fresh` (a new interpreter: its start is what the test checks) or the command line
    asks for a start of its own (command_server.prepared)."""
    return command_server.run_process(f"trainers.{module}", args, child_env(env), timeout, fresh)


def run_in_one_child(runs, env=None, timeout=600):
    """[(module, args), ...] (`trainers.finetune`, ...), run in order in ONE child process (with
    `env`, e.g. KERAS_BACKEND=jax), each as `run_main` runs it; their CompletedProcesses. For the
    commands that need another process than this one, and not a process each."""
    with tempfile.TemporaryDirectory() as folder:
        spec, out = os.path.join(folder, "runs.json"), os.path.join(folder, "results.json")
        with open(spec, "w") as f:
            json.dump([[module, list(args)] for module, args in runs], f)
        script = os.path.join(ROOT, "tests", "command_runs.py")
        child = command_server.run_process(script, [spec, out], child_env(env), timeout)
        assert child.returncode == 0, child.stderr[-3000:]
        with open(out) as f:
            results = json.load(f)
    return [
        subprocess.CompletedProcess([sys.executable, "-m", module, *args], **result)
        for (module, args), result in zip(runs, results)
    ]


def _refuse_what_needs_a_child(module, args, env):
    """A command whose process would run another Keras backend than this one, or join a cluster."""
    if module.startswith("trainers."):  # a trainer command's --engine picks it (trainers/engine_env.py)
        engine = engine_env._flag_value(args, engine_env.ENGINE_FLAG) or "tf"
        backend = engine_env.BACKENDS.get(engine, "tensorflow")
    else:
        backend = env.get("KERAS_BACKEND", keras.backend.backend())
    if backend != keras.backend.backend() or "TF_CONFIG" in env:
        raise ValueError(
            f"{module} {' '.join(args)}: another backend or a cluster needs a process: run_child"
        )


@contextlib.contextmanager
def _process_state_kept(module, args, env):
    """Runs the body as a fresh command would run, and puts this process back as it was."""
    environ = dict(os.environ)
    cwd = os.getcwd()
    argv = sys.argv
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    os.environ.clear()
    os.environ.update({**child_env(env), "PYTHONPATH": environ.get("PYTHONPATH", "")})
    os.chdir(ROOT)
    sys.argv = [module, *args]
    # Keras' global state (layer names, the precision policy) as a new process starts it.
    keras.backend.clear_session()
    try:
        with warnings.catch_warnings():
            # Printed on stderr, each once, as in a command (pytest would otherwise collect them).
            warnings.resetwarnings()
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.showwarning = _print_warning
            yield
    finally:
        keras.backend.clear_session()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        sys.argv = argv
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)


def _print_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _library_log_to(stream):
    """The trainers print keras_vit's log lines on stdout (trainers.console.show_library_messages)
    through a handler made once per process: it writes to this run's stdout. (Not setStream,
    which flushes the stream it replaces: that of an earlier test may be closed.)"""
    for handler in logging.getLogger("keras_vit").handlers:
        if getattr(handler, "_keras_vit_console", False):
            handler.stream = stream


def start_cli(module, args, env=None, log_path=None, fresh=False):
    """Starts the trainer in the background with its output going to log_path; forked as
    run_child's child is, unless `fresh`."""
    with open(log_path or os.devnull, "w") as log:
        return command_server.start_process(f"trainers.{module}", args, child_env(env), log, log, fresh)


def run_python_c(code, env=None, timeout=300):
    """`python -c code` (a program that imports the trainers) in a child process, with run_child's
    environment plus `env`; the CompletedProcess (text). Forked as run_child's child is: a program
    whose start is its subject (what a fresh interpreter prints) runs `subprocess` itself."""
    return command_server.run_process(command_server.CODE, [code], child_env(env), timeout)


def start_python_c(code, stdout, stderr, env=None):
    """`python -c code` started in the background (as run_python_c), its output to the open files
    `stdout` and `stderr`; a Popen-like handle."""
    return command_server.start_process(command_server.CODE, [code], child_env(env), stdout, stderr)


def users_env(extra=None):
    """The environment of a command as a user runs it, plus `extra`: TF_CPP_MIN_LOG_LEVEL and
    KERAS_BACKEND left to the command's start (which hides TensorFlow's own lines and picks the
    backend), no cluster, the repository on PYTHONPATH."""
    unset = ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "TF_CONFIG")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PYTHONPATH"] = ROOT
    env.update(extra or {})
    return env


def run_as_a_user(target, args, env=None, timeout=300, fresh=False):
    """`python -m target args` (`python -c CODE` for command_server.CODE, the code first in args)
    in a child process with users_env(env); the CompletedProcess (text). Forked from the one
    server of that environment, unless `fresh`: where the start itself, what a fresh interpreter
    prints as it imports TensorFlow, is what the test checks."""
    return command_server.run_process(target, args, users_env(env), timeout, fresh)


def error_line(proc, module="finetune"):
    """The one `MODULE: error:` line of a finished run's stderr (and no traceback)."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"{module}: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def file_size_limited(limit, argv):
    """`argv` (a command) on a full disk, as any user can make one (no mount): its writes past
    `limit` bytes fail with EFBIG instead of killing it. A small Python sets the limit, ignores
    SIGXFSZ and execs `argv`, which keeps both; a preexec_fn would run this process's fork
    handlers, and JAX's warns of a deadlock in every pytest worker that imported JAX."""
    return [sys.executable, "-c", _LIMIT_FILE_SIZE_THEN_EXEC, str(limit), *argv]


_LIMIT_FILE_SIZE_THEN_EXEC = (
    "import os, resource, signal, sys; "
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1]))); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def start_cluster(tmp_path, args, name, env=None):
    """Two worker processes of one cluster on loopback (TF_CONFIG), each running
    `trainers.finetune args`; returns (processes, log paths)."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs, logs = [], []
    for index in range(2):
        log = tmp_path / f"{name}{index}.log"
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(
            start_cli("finetune", args, env={**(env or {}), "TF_CONFIG": tf_config}, log_path=str(log))
        )
        logs.append(log)
    return procs, logs


def wait_all(procs, logs, timeout=300):
    """The processes' outputs once all exited 0 (all are killed if any is still running at
    `timeout`: a worker left alone would wait in a collective forever)."""
    deadline = time.time() + timeout
    try:
        for proc in procs:
            proc.wait(timeout=max(1, deadline - time.time()))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    codes = [proc.returncode for proc in procs]
    assert codes == [0] * len(procs), [log.read_text()[-2000:] for log in logs]
    return [log.read_text() for log in logs]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def read_results(workdir):
    with open(os.path.join(workdir, "results.json")) as f:
        return json.load(f)


def read_weights(path):
    """{name: array} of a model.npz (or of workdir/model.npz): its weights, without the model's
    config (npz_layout.CONFIG), a JSON string that no weight comparison can take."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path = os.path.join(path, "model.npz")
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    config = arrays.pop(npz_layout.CONFIG, None)
    assert config is None or isinstance(json.loads(str(config)), dict), "model.npz: unreadable config"
    return arrays


def scalar_tags(logdir):
    """{tag: [(step, value), ...]} from every event file under logdir."""
    tags = {}
    for path in sorted(glob.glob(os.path.join(str(logdir), "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "scalars" or value.HasField("simple_value"):
                    number = (
                        value.simple_value
                        if value.HasField("simple_value")
                        else float(tf.make_ndarray(value.tensor))
                    )
                    tags.setdefault(value.tag, []).append((event.step, number))
    return tags


def plugin_tags(logdir, plugin):
    found = set()
    for path in glob.glob(os.path.join(str(logdir), "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == plugin:
                    found.add(value.tag)
    return found


def checkpoint_steps(workdir):
    return sorted(
        int(p.rsplit("-", 1)[1].split(".")[0])
        for p in glob.glob(os.path.join(str(workdir), "checkpoints", "ckpt-*.index"))
    )


# The last line of a process that SIGTERM stopped, and of one that stopped only because another
# process of its run was signalled (trainers/preemption.py's Preemption.cause).
PREEMPTED = re.compile(r"^preempted \(SIGTERM\): saved a checkpoint at step (\d+); rerun", re.M)
STOPPED_WITH_OTHERS = re.compile(
    r"^stopped with the other processes \(one of them got SIGTERM or Ctrl-C\): "
    r"saved a checkpoint at step (\d+); rerun",
    re.M,
)


def stop_step_of_two(outputs):
    """The step two processes stopped at after a SIGTERM to the second only: the second says it was
    preempted, the first (told only through the other) that it stopped with the others, each once
    and at the same step."""
    steps = [
        [int(s) for s in pattern.findall(out)]
        for pattern, out in zip((STOPPED_WITH_OTHERS, PREEMPTED), outputs)
    ]
    assert len(steps[0]) == 1 and steps[0] == steps[1], steps
    assert not PREEMPTED.search(outputs[0]), outputs[0][-2000:]
    return steps[0][0]


# Any last line of a run that SIGTERM stopped or met at its end (trainers/controller.py).
SIGTERM_LINE = re.compile(r"^preempted \(SIGTERM\)[ :].*$", re.M)
SAVED_AT = re.compile(r"saved a checkpoint at step (\d+); rerun")


def sigterm_at_each(args, markers, tmp_path, env=None, timeout=240):
    """Runs `trainers.finetune args` once per marker, each run the rerun of the one before, and
    sends each a SIGTERM as soon as its output shows the marker (a line's text: the moment of the
    run it lands in). Returns [(marker, output)] after checking what every stop must do: exit 0
    at once, one SIGTERM line and no traceback, and a next run that resumes from what it saved."""
    stops = []
    for number, marker in enumerate(markers):
        log = tmp_path / f"sigterm{number}.log"
        proc = start_cli("finetune", args, env=env, log_path=str(log))
        deadline = time.time() + timeout
        try:
            while marker not in log.read_text():
                assert proc.poll() is None and time.time() < deadline, (marker, log.read_text()[-3000:])
                time.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=120)
        finally:
            proc.kill()
            proc.wait()
        out = log.read_text()
        assert code == 0 and "Traceback" not in out, (marker, code, out[-3000:])
        assert len(SIGTERM_LINE.findall(out)) <= 1, out[-3000:]
        if number:  # the run before stopped at a step it saved: this one resumed from it
            saved = SAVED_AT.search(stops[-1][1])
            if saved:
                assert f"at step {saved.group(1)}." in out, out[-3000:]
        stops.append((marker, out))
    return stops


def stopped_at_the_end(out, step):
    """Whether a SIGTERM at a run's end left its line: stopped with the final checkpoint of `step`
    saved (before or after the final evaluation), or the export finished first."""
    return bool(
        re.search(
            rf"^preempted \(SIGTERM\)(: saved a checkpoint at step {step}; rerun the same command to "
            r"finish the run| as the run ended: it finished and wrote its results first\.)",
            out,
            re.M,
        )
    )


def handles(pid, signum):
    """Whether process `pid` has a handler of its own for `signum` (Linux: SigCgt in its status)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False
