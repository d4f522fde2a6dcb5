"""Test-session set-up: the TensorFlow backend, two logical CPU devices, and a temporary folder
for the children the tests start.

Splitting the CPU must happen before TensorFlow initialises its devices, so it is done in
pytest_configure, before any test module imports keras or tensorflow. Multi-replica code is
then testable in-process with MirroredStrategy(["/cpu:0", "/cpu:1"]).

Under pytest-xdist (`-n 2`) the controlling process runs no test: it imports neither TensorFlow
nor the tests' fixtures (an import of TensorFlow costs about 10 s of CPU on 2 cores); its workers
and a run without -n do.
"""

import collections
import gc
import importlib
import importlib.util
import os
import sys
import types

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# `import openvino` (the deploy guide's runtime) sends usage telemetry from a forked process unless
# the user opted out or the process runs in a CI job, which openvino_telemetry reads from CI=true:
# the suite never sends it, and no fork happens in a worker that has JAX's threads running.
os.environ["CI"] = "true"

# The repository root, so tests import keras_vit, trainers and configs from the work tree.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
# tests/, for the helper modules (the fixtures below are theirs).
TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

# The oneDNN kernels keras_vit asks TensorFlow for on every x86 CPU, asked for before a test module
# imports TensorFlow, so that the tests' process runs the kernels its commands run. The module is
# loaded by its path: importing the package would start Keras in pytest-xdist's controlling process.
_spec = importlib.util.spec_from_file_location(
    "onednn_default", os.path.join(ROOT, "keras_vit", "onednn_default.py")
)
_onednn_default = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_onednn_default)
_onednn_default.ask_for_onednn()

# KERAS_VIT_PROCESS_LOG=FILE counts the child processes and TensorFlow imports (tests/child_processes.py).
if os.environ.get("KERAS_VIT_PROCESS_LOG"):
    import child_processes

    child_processes.install(os.environ["KERAS_VIT_PROCESS_LOG"])


def _runs_no_test(config):
    """pytest-xdist's controlling process: its workers run the tests."""
    return bool(getattr(config.option, "numprocesses", None)) and "PYTEST_XDIST_WORKER" not in os.environ


def pytest_configure(config):
    if _runs_no_test(config):
        return
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )
    # The tests' shared fixtures: the shared models and data (tests/fixtures.py), the cifar10 data
    # and reference run (tests/session_data.py), the library on JAX without TensorFlow
    # (tests/jax_without_tensorflow.py), the stand-ins of the docs' pages (tests/docs_standins.py).
    for name in ("fixtures", "session_data", "jax_without_tensorflow"):
        # Registered under a name of their own: pytest's own fixtures plugin is "fixtures".
        config.pluginmanager.register(importlib.import_module(name), f"tests_{name}")
    # Of docs_standins, only its session stand-ins (its autouse fixture is the docs' tests' own).
    import docs_standins

    standins = types.ModuleType("docs_standins_session")
    for name in ("default_tfds", "registry_cache", "tfds_dir"):
        setattr(standins, name, getattr(docs_standins, name))
    config.pluginmanager.register(standins, "docs_standins_session")


@pytest.fixture(scope="session", autouse=True)
def children_temporary_folder(tmp_path_factory):
    """TMPDIR for every child process the tests start: a folder in pytest's base temp folder,
    which pytest removes with its older runs. A child the test kills (SIGKILL, or a fast exit
    that skips atexit) cannot remove its own temporary files: TensorFlow's autograph left 75
    `__autograph_generated_file*.py` files in /tmp from one test that kills a trainer run
    repeatedly, and the whole suite about 220. One folder for the run's workers: a child's
    environment is then the same whichever worker starts it (tests/command_server.py keeps a
    server per environment)."""
    from fixtures import shared_run_folder

    folder = shared_run_folder(tmp_path_factory) / "children_tmp"
    folder.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as environment:  # put back after the session
        environment.setenv("TMPDIR", str(folder))
        yield folder


@pytest.fixture(scope="session", autouse=True)
def command_servers(tmp_path_factory):
    """The test run's trainer-command servers (tests/command_server.py): the first process to fork
    a command of a kind starts its server, every worker forks from it."""
    import command_server
    from fixtures import shared_run_folder

    folder = shared_run_folder(tmp_path_factory) / "command_servers"
    folder.mkdir(exist_ok=True)
    command_server.use_folder(folder)
    return folder


@pytest.fixture(autouse=True)
def no_child_left_running():
    """A child the test started and left running is killed as the test ends: a check that fails
    before the test's own clean-up (a `wait` with a timeout, an assert ahead of its try/finally)
    once left a trainer run of 100,000 steps on 1.3 of the 2 cores for the rest of a suite run."""
    yield
    import command_server

    command_server.kill_left_running()


@pytest.fixture(autouse=True)
def environment_left_as_found():
    """A test that leaves os.environ changed fails (in its teardown), and the environment is put
    back: every later test of the worker would see the change, and the children of its commands
    would fork from a server of their own (the server's key is the environment): a variable a test
    of tests/test_child_processes.py left set once made a whole run start a fourth server."""
    before, modules = dict(os.environ), set(sys.modules)
    yield
    changed = environment_changes(before, os.environ, set(sys.modules) - modules)
    if changed:
        os.environ.clear()
        os.environ.update(before)
        pytest.fail(f"the test left the environment changed ({', '.join(changed)}): use monkeypatch.setenv")


# The repository's packages whose program modules set their defaults in the environment as they
# are imported (benchmarks/accelerator.py: JAX's, before JAX loads), in whichever test imports
# them first.
PROGRAM_PACKAGES = ("keras_vit", "trainers", "benchmarks", "configs")


def environment_changes(before, after, imported=()):
    """The names of the variables set, unset or changed between `before` and `after`, but pytest's
    own name of the test's phase, and the variables added where the modules `imported` in between
    include one of PROGRAM_PACKAGES' (a value changed or removed still counts)."""
    names = (before.keys() | after.keys()) - {"PYTEST_CURRENT_TEST"}
    if any(name.partition(".")[0] in PROGRAM_PACKAGES for name in imported):
        names &= before.keys()
    return sorted(name for name in names if before.get(name) != after.get(name))


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """JAX's persistent compilation cache, one for every process of the test run: a child on the
    jax engine loads what another already compiled (the same step, evaluation, initialisers)
    instead of compiling it again; a tiny digits run on two devices took 8.7 s instead of 17.
    Every compilation is kept (no minimum time). The size bound turns on the cache's file lock,
    so that no process reads an entry while another writes it; the run's entries take a few MB.
    The bound also makes each write read every entry's size and time, so a child whose many
    compilations no other process reuses goes without (tests/backend_cases.py's on JAX)."""
    from fixtures import shared_run_folder

    folder = shared_run_folder(tmp_path_factory) / "jax_compilation_cache"
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("JAX_COMPILATION_CACHE_DIR", str(folder))
        environment.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        environment.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", str(2**30))
        yield folder


def pytest_collection_modifyitems(config, items):
    """The files with `slow` tests first, those with the most of them first; each file's tests in
    their own order. pytest-xdist's --dist=loadfile hands a worker the next file when its current
    one is nearly done, in this order (the Makefile's --no-loadscope-reorder; by default it orders
    files by their number of tests, which can leave one worker alone with a slow file while the
    other has finished): the runs then end on the files of fast tests, the workers together."""
    slow_per_file = collections.Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow_per_file[item.path])  # stable: a file's tests stay together


_MODULE_RUNNING = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the first test of each module (its fixtures not made yet): the garbage of the
    modules before is collected, and what survives them (the imports, session fixtures, caches)
    is frozen, out of every later collection. A worker's full collections otherwise traverse
    everything the session has imported and kept: 22 s of 157 s in eight trainer and library
    test files, against 4 s so."""
    module = getattr(item, "module", None)
    if _MODULE_RUNNING.get("module") is not module:
        _MODULE_RUNNING["module"] = module
        gc.collect()
        gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test, its fixtures' set-up and teardown included, leaves the process's signal stack as
    it found it: OpenVINO's CPU plugin can leave a freed one behind (tests/signal_stack.py), and a
    later test's signal would then end the worker and every test it had left."""
    import signal_stack

    with signal_stack.kept():
        return (yield)
