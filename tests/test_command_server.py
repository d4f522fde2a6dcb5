"""tests/command_server.py: a trainer command (or a `python -c` program) forked from a process that
imported its libraries is the one a fresh interpreter runs, and a command whose start differs gets
no server."""

import json
import os
import signal
import subprocess
import sys
import time

import command_server
import pytest
import trainer_cli
from trainer_cli import TINY_DIGITS_FLAGS

ENV = {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin"}


def _key(target, args, env):
    return command_server.prepared(target, args, env)[0]


def test_a_server_is_kept_per_engine_and_environment_as_the_import_leaves_it():
    tf = _key("trainers.finetune", ["--dataset=digits"], ENV)
    assert tf == _key("trainers.fewshot", ["--engine=tf", "--cpu_devices=2"], ENV)
    # Read at run time: one server serves every cluster's processes and every test.
    cluster = dict(ENV, TF_CONFIG="{}", PYTEST_CURRENT_TEST="t (call)", PYTEST_XDIST_WORKER="gw1")
    assert _key("trainers.finetune", [], cluster) == tf
    # Hugging Face's, read as huggingface_hub.constants is imported: never in a server (it checks).
    assert _key("trainers.finetune", [], dict(ENV, HF_HOME="/tmp/hf", HF_HUB_OFFLINE="1")) == tf
    # A command's --engine sets KERAS_BACKEND before Keras loads, whatever the environment said.
    assert _key("trainers.finetune", [], dict(ENV, KERAS_BACKEND="jax")) == tf
    jax = _key("trainers.finetune", ["--engine=jax"], ENV)
    jax_on_two = _key("trainers.finetune", ["--engine", "jax", "--cpu_devices=2"], ENV)
    # JAX reads its CPU device count from XLA_FLAGS, which the trainers' import sets.
    assert len({tf, jax, jax_on_two}) == 3 and jax[0] == "jax" and tf[0] == "tf"
    _, env = command_server.prepared("trainers.finetune", ["--engine=jax", "--cpu_devices=2"], ENV)
    assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2" and env["KERAS_BACKEND"] == "jax"
    # A script that runs commands on the backend KERAS_BACKEND names, with the devices set by hand:
    # the import leaves the same environment, so the same server.
    script = dict(ENV, KERAS_BACKEND="jax", XLA_FLAGS=env["XLA_FLAGS"])
    assert _key("tests/engine_runs.py", ["[]"], script) == jax_on_two
    # So does a `python -c` program that imports the trainers (its engine: KERAS_BACKEND's).
    assert _key(command_server.CODE, ["import trainers"], script) == jax_on_two
    assert _key(command_server.CODE, ["import trainers", "--engine=jax"], ENV) == tf
    assert _key("trainers.finetune", [], dict(ENV, TF_ENABLE_ONEDNN_OPTS="0")) != tf
    # A notebook's kernel: the environment's backend, whatever Jupyter tells each kernel.
    kernel = dict(ENV, JPY_PARENT_PID="123", JPY_SESSION_NAME="/tmp/a/quickstart.ipynb")
    assert _key(command_server.KERNEL, ["-f", "/tmp/a/kernel-1.json"], kernel) == tf
    assert _key(command_server.KERNEL, ["-f", "/tmp/b/kernel-2.json"], dict(kernel, JPY_PARENT_PID="9")) == tf


def test_a_library_command_shares_the_server_of_its_backend_and_keeps_the_environment_it_was_given(
    tmp_path,
):
    """`python -m keras_vit.predict ...` starts with the package's import, which the trainers'
    import makes too; unlike a trainer command's, it leaves KERAS_BACKEND unset where it was, so
    the child's environment is the one given (the key is the server's)."""
    user = {k: v for k, v in ENV.items() if k != "KERAS_BACKEND"}
    key, env = command_server.prepared("keras_vit.predict", ["a.jpg"], dict(user, HOME=str(tmp_path)))
    assert key == _key("trainers.finetune", [], dict(user, HOME=str(tmp_path)))
    assert env == dict(user, HOME=str(tmp_path))  # no KERAS_BACKEND added
    assert _key("keras_vit.export", ["out.onnx"], ENV) == _key("trainers.finetune", [], ENV)
    jax = dict(ENV, KERAS_BACKEND="jax")
    assert _key("keras_vit.predict", [], jax) == _key("trainers.finetune", ["--engine=jax"], ENV)
    # Backends no engine runs have no server; nor has a command of another program.
    assert _key("keras_vit.onnx_export", [], dict(ENV, KERAS_BACKEND="torch")) is None
    # Keras' own choice where KERAS_BACKEND is unset: keras.json in KERAS_HOME, else tensorflow.
    home = tmp_path / "keras_home"
    home.mkdir()
    assert command_server.keras_backend(dict(user, KERAS_HOME=str(home))) == "tensorflow"
    (home / "keras.json").write_text('{"backend": "jax", "floatx": "float32"}')
    assert command_server.keras_backend(dict(user, KERAS_HOME=str(home))) == "jax"
    assert command_server.keras_backend(dict(user, KERAS_HOME=str(home), KERAS_BACKEND="torch")) == "torch"
    assert _key("keras_vit.predict", [], dict(user, KERAS_HOME=str(home)))[0] == "jax"
    (tmp_path / ".keras").mkdir()
    (tmp_path / ".keras" / "keras.json").write_text('{"backend": "torch"}')
    assert command_server.keras_backend(dict(user, HOME=str(tmp_path))) == "torch"
    # The suite's own pytest collects on the trainers' server.
    assert _key(command_server.PYTEST, ["-m", "not slow"], ENV) == _key("trainers.finetune", [], ENV)


def test_the_served_commands_are_those_whose_import_notes_an_early_signal():
    """The server preloads and forks these (early_signals catches a signal in their import: a
    forked child has that handler from the server's import, as a fresh one from its own)."""
    from trainers import early_signals

    assert command_server.MODULES == early_signals.COMMANDS


def test_a_command_whose_start_is_its_own_gets_a_fresh_interpreter():
    assert _key("trainers.finetune", ["--verbose"], ENV) is None
    assert _key("trainers.finetune", ["--verbose=true"], ENV) is None
    assert _key("trainers.finetune", ["--verbose=false"], ENV) is not None
    assert _key("keras_vit.predict", ["a.jpg", "--verbose"], ENV) is None
    assert _key("benchmarks.inference", [], ENV) is None  # another module: a start of its own
    # A trainer command the server does not import: its start is still the trainers' import.
    assert _key("trainers.prepare", ["--dataset=cifar10"], ENV) == _key("trainers.finetune", [], ENV)
    assert _key("trainers.finetune", [], dict(ENV, KERAS_VIT_FRESH_CHILDREN="1")) is None
    assert _key("trainers.finetune", [], dict(ENV, KERAS_VIT_FRESH_CHILDREN="")) == _key(
        "trainers.finetune", [], ENV
    )
    # The demo's pinned commands set TensorFlow's environment before it loads.
    demo = ["--config=configs/demo.py:small"]
    from trainers import reproducible

    assert reproducible.is_pinned_command([sys.executable, "-m", "trainers.finetune", *demo]) == (
        _key("trainers.finetune", demo, ENV) is None
    )


@pytest.mark.slow  # ~25 s: three fresh interpreters and up to two servers import TensorFlow
def test_a_forked_command_prints_and_exits_as_a_fresh_one_and_is_a_process_of_its_own(tmp_path):
    """A bad flag's one line and status 2, a help text, a library command's error, and a run
    stopped by SIGKILL, each the same forked as from a fresh interpreter: the module runs as
    __main__ with the command line as argv (the program's name, the flags), no warning of
    runpy's, the status passed back."""
    outputs = []
    for args in (["--total_steps=-3"], ["--help"]):
        fresh = trainer_cli.run_child("finetune", args, fresh=True)
        forked = trainer_cli.run_child("finetune", args)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            fresh.returncode,
            fresh.stdout,
            fresh.stderr,
        ), (forked.stderr[-2000:], fresh.stderr[-2000:])
        outputs.append(forked)
    bad_flag, help_text = outputs
    assert bad_flag.returncode == 2 and "--total_steps" in trainer_cli.error_line(bad_flag)
    # A library command as a user runs it (the server of that environment): the same one line.
    args = ["missing.jpg", "--model=ViT-Ti_16", "--weights=missing.npz"]
    fresh, forked = (trainer_cli.run_as_a_user("keras_vit.predict", args, fresh=f) for f in (True, False))
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.returncode == 2, forked.stderr
    assert forked.stderr.startswith("error: missing.jpg: cannot read"), forked.stderr
    assert help_text.returncode == 0 and help_text.stdout.startswith("usage: python -m trainers.finetune")
    log = tmp_path / "run.log"
    args = TINY_DIGITS_FLAGS + ["--dataset=digits", "--total_steps=100000", f"--workdir={tmp_path / 'run'}"]
    # Forked even where KERAS_VIT_FRESH_CHILDREN=1 starts the suite's children fresh.
    proc = trainer_cli.start_cli("finetune", args, env={command_server.FRESH_VARIABLE: ""}, log_path=str(log))
    deadline = time.time() + 240
    try:
        assert isinstance(proc, command_server.Forked) and proc.pid not in (os.getpid(), os.getppid())
        while "/100000  loss" not in log.read_text():
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert b"command_server.serve" in f.read()  # forked, not started
    finally:
        proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert proc.poll() == -signal.SIGKILL  # kept once reported


# What a `python -c` program sees of its start, printed: a forked one must see what a fresh one sees
# (not the server's own __main__, nor the trainer commands' early signal handlers).
PROGRAM_START = """
import json, signal, sys
print(json.dumps({
    "argv": sys.argv,
    "path0": sys.path[0],
    "name": __name__,
    "globals": sorted(globals()),
    "sigterm": str(signal.getsignal(signal.SIGTERM)),
    "sigint_is_python_s": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
}))
raise SystemExit("-c: error: a one-line ending")
"""


@pytest.mark.slow  # the server's start, where no test of the run has started it yet
def test_a_forked_program_starts_as_python_c_starts_it():
    fresh = subprocess.run(
        [sys.executable, "-c", PROGRAM_START],
        cwd=trainer_cli.ROOT,
        env=trainer_cli.child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    env = {command_server.FRESH_VARIABLE: ""}  # forked even where the suite's children start fresh
    assert _key(command_server.CODE, [PROGRAM_START], trainer_cli.child_env(env)) is not None
    forked = trainer_cli.run_python_c(PROGRAM_START, env)
    assert fresh.returncode == 1 and fresh.stderr == "-c: error: a one-line ending\n", fresh.stderr
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    seen = json.loads(forked.stdout)
    assert seen["argv"] == ["-c"] and seen["name"] == "__main__"
    # Python's handler, unless this process ignores SIGINT (started by `nohup ... &`): a fresh
    # child inherits that and keeps it, and the forked one does the same.
    assert seen["sigint_is_python_s"] is (signal.getsignal(signal.SIGINT) is not signal.SIG_IGN)


@pytest.mark.slow  # the server's start, where no test of the run has started it yet
def test_a_forked_program_in_a_folder_and_a_process_group_of_its_own_starts_as_a_fresh_one(tmp_path):
    """As Jupyter starts a kernel: in the notebook's folder, leading a process group of its own.
    Jupyter signals the kernel's group: a forked child left in the server's group (the test
    run's) would take the signal to every process of the run."""
    program = (
        "import json, os, sys; print(json.dumps([os.getcwd(), sys.path[0], os.getpgid(0) == os.getpid()]))"
    )
    env = trainer_cli.child_env({command_server.FRESH_VARIABLE: ""})  # forked even where others start fresh
    assert _key(command_server.CODE, [program], env) is not None
    fresh, forked = [
        command_server.run_process(
            command_server.CODE, [program], env, 60, fresh=started_fresh, cwd=tmp_path, own_group=True
        )
        for started_fresh in (True, False)
    ]
    assert json.loads(fresh.stdout) == [str(tmp_path), "", True], fresh.stderr
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout), forked.stderr


def test_a_child_left_running_is_killed_and_a_finished_one_is_left_alone(tmp_path):
    """tests/conftest.py calls kill_left_running as each test ends: a child a failed check left
    behind would otherwise run on, on the cores the rest of the suite needs."""
    env = trainer_cli.child_env()
    with open(tmp_path / "out", "w") as out:
        done = command_server.start_process(command_server.CODE, ["pass"], env, out, out, fresh=True)
        assert done.wait(timeout=60) == 0
        left = command_server.start_process(
            command_server.CODE, ["import time; time.sleep(600)"], env, out, out, fresh=True
        )
    assert left.poll() is None
    assert command_server.kill_left_running() == 1
    assert left.returncode == -signal.SIGKILL and done.returncode == 0
    assert command_server.kill_left_running() == 0
