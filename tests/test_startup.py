"""keras_vit/startup.py: the commands and `import keras_vit` start without TensorFlow's native
start-up lines, the commands without Keras' optional imports and exit without the interpreter's
final collections, and a missing Keras backend is one line naming the extra that installs it."""

import gc
import json
import os
import sys

import command_server
import pytest
from fixtures import tiny_vit
from test_console import NOISE
from trainer_cli import ROOT, run_as_a_user, users_env

import keras_vit
from keras_vit import startup


@pytest.mark.parametrize(
    "orig_argv, package",
    [
        (["python", "-m", "keras_vit.predict", "a.jpg"], "keras_vit"),
        (["python", "-X", "importtime", "-m", "trainers.finetune"], "trainers"),
        (["python", "-mkeras_vit.convert"], "keras_vit"),
        (["python", "-c", "import keras_vit", "-m", "x"], None),
        (["python", "my_script.py", "-m", "keras_vit.predict"], None),
        (["python"], None),
    ],
)
def test_command_package(orig_argv, package):
    assert startup.command_package(orig_argv) == package


def test_only_commands_start_quietly_and_verbose_shows_everything():
    command = ["python", "-m", "keras_vit.predict", "a.jpg"]
    assert startup.quiet_start(command, ["-m", "a.jpg"], modules={})
    assert not startup.quiet_start(command, ["-m", "a.jpg", "--verbose"], modules={})
    # A user's own program that imports keras_vit sees everything TensorFlow prints.
    assert not startup.quiet_start(["python", "train.py"], ["train.py"], modules={})
    # ... unless it imports the trainers, which have always hidden it (their --verbose shows it).
    assert startup.quiet_start(["python", "train.py"], ["train.py"], modules={"trainers": None})


def test_a_program_that_reads_a_preset_first_starts_quietly_too():
    # configs import keras_vit (the --posemb values) before the program imports the trainers.
    assert startup.quiet_start(["python", "train.py"], ["train.py"], modules={"configs": None})
    assert not startup.quiet_start(
        ["python", "train.py"], ["train.py", "--verbose"], modules={"configs": None}
    )


# --- Keras' optional imports, skipped as a command starts --------------------------------------


def test_only_commands_skip_the_optional_imports():
    assert startup.is_command(["python", "-m", "trainers.finetune", "--dataset=digits"])
    assert startup.is_command(["python", "-m", "keras_vit.predict", "a.jpg"])
    # A user's program may use Keras' scikit-learn wrappers or plots: it imports Keras whole.
    assert not startup.is_command(["python", "train.py"])
    assert not startup.is_command(["python", "-c", "import keras_vit"])


def test_an_optional_import_is_refused_to_its_importers_only_and_only_while_keras_starts(
    tmp_path, monkeypatch
):
    for name in ("optional_probe", "optional_probe_later"):
        (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    skipped = {"optional_probe": ("probe_library.wrappers",), "optional_probe_later": ("probe_library.",)}

    def import_in(importer, name):
        namespace = {"__name__": importer}
        exec(f"import {name}", namespace)  # the import statement runs in `importer`'s code
        return namespace[name]

    finders = list(sys.meta_path)
    with startup.optional_imports_skipped(skipped=skipped):
        # What the library's `try: import ...` sees on a machine without the package.
        with pytest.raises(ModuleNotFoundError, match="optional_probe is not imported"):
            import_in("probe_library.wrappers", "optional_probe")
        assert "optional_probe" not in sys.modules
        # Any other importer gets it; once imported it is never refused.
        assert import_in("probe_library_user", "optional_probe").VALUE == 1
        assert import_in("probe_library.wrappers", "optional_probe").VALUE == 1
    assert sys.meta_path == finders
    # After Keras' start, the package imports as usual where it was refused (the digits need
    # scikit-learn, the jax engine JAX).
    assert import_in("probe_library.data", "optional_probe_later").VALUE == 1


def test_the_skipped_imports_name_modules_this_keras_and_tensorflow_have():
    # A Keras or TensorFlow that moves the importer leaves the skip without effect: this names it.
    for module, importers in startup.SKIPPED_AT_COMMAND_START.items():
        for importer in importers:
            assert any(name.startswith(importer) for name in sys.modules), (module, importer)


# --- a shorter exit ------------------------------------------------------------------------------


def test_shorten_exit_finalizes_the_garbage_there_is_before_it_freezes_the_rest():
    """Freezing first would leave the finalizers of garbage in a reference cycle (a file's flush,
    a writer's close) unrun: frozen objects are never collected."""
    finalized = []

    class Cycle:
        def __del__(self):
            finalized.append(True)

    gc.unfreeze()  # the suite freezes what each test module starts with (tests/conftest.py)
    gc.disable()  # no automatic collection finds the cycle first
    try:
        cycle = Cycle()
        cycle.itself = cycle
        del cycle
        startup.shorten_exit()
        assert finalized == [True] and gc.get_freeze_count() > 0
    finally:
        gc.enable()


def test_a_commands_keras_import_runs_without_collections_and_freezes_what_it_made():
    gc.unfreeze()
    collections = []
    gc.callbacks.append(lambda phase, info: collections.append(phase))
    try:
        with startup.imported_objects_frozen():
            assert not gc.isenabled()
            made = [[] for _ in range(100_000)]  # enough allocations to start a collection
        assert gc.isenabled() and collections == [] and gc.get_freeze_count() > len(made)
        with startup.imported_objects_frozen(freeze=False):  # a user's program: as it was
            assert gc.isenabled()
    finally:
        gc.callbacks.pop()


# A child's sitecustomize (first on its PYTHONPATH, so its exit handler runs after all others):
# at exit, which of the modules a command skips as Keras starts the whole command imported, and
# whether the objects were frozen for the interpreter's teardown.
_NOTE_SKIPPED_MODULES = (
    "import atexit, gc, json, os, sys\n"
    "def _note():\n"
    "    skipped = json.loads(os.environ['SKIPPED_MODULES'])\n"
    "    imported = sorted(m for m in skipped if m in sys.modules)\n"
    "    note = {'imported': imported, 'frozen': gc.get_freeze_count()}\n"
    "    with open(os.environ['SKIPPED_MODULES_NOTE'], 'w') as f:\n"
    "        json.dump(note, f)\n"
    "atexit.register(_note)\n"
)


@pytest.mark.slow  # a fresh interpreter imports TensorFlow: about 20 s on two busy cores
def test_convert_prints_its_summary_and_nothing_else(tmp_path):
    """The library commands' start as a user meets it (the package's import, the same for every
    command: startup.command_package), in a fresh interpreter: nothing on stderr, Keras' optional
    imports refused, the objects frozen before the exit."""
    model = tiny_vit()
    src = str(tmp_path / "src.npz")
    keras_vit.weights.save_npz(model, src)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_NOTE_SKIPPED_MODULES)
    note = tmp_path / "skipped_modules.json"
    env = {
        "PYTHONPATH": os.pathsep.join([str(site), ROOT]),
        "SKIPPED_MODULES_NOTE": str(note),
        "SKIPPED_MODULES": json.dumps(sorted(startup.SKIPPED_AT_COMMAND_START)),
    }
    proc = run_as_a_user("keras_vit.convert", [src, str(tmp_path / "dst.npz")], env, fresh=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]
    assert proc.stdout.startswith("wrote ") and not NOISE.search(proc.stdout), proc.stdout
    note = json.loads(note.read_text())
    # The command ran without Keras' optional imports (scikit-learn, matplotlib, JAX: installed here).
    assert note["imported"] == [], note
    # and its objects were frozen before the interpreter's teardown (startup.shorten_exit).
    assert note["frozen"] > 100_000, note


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["keras_vit.predict", "missing.jpg", "--model=ViT-Ti_16", "--weights=missing.npz"],
        ["keras_vit.export", "out.onnx", "--format=onnx", "--model=ViT-Ti_16", "--weights=missing.npz"],
        ["keras_vit.visualize", "--images=missing.jpg", "--out=figs", "--model=ViT-Ti_16", "--weights=none"],
    ],
    ids=["predict", "export", "visualize"],
)
def test_library_commands_print_their_one_line_error_and_nothing_else(tmp_path, command):
    """Forked from the server of a user's environment: their start, the package's import, is the
    convert test's; here what each prints from its first line to its exit."""
    proc = run_as_a_user(command[0], command[1:])
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert "missing" in proc.stderr and not NOISE.search(proc.stderr)


@pytest.mark.slow  # a fresh interpreter imports TensorFlow and trains: about 15 s on two busy cores
def test_a_command_whose_reader_went_away_ends_at_once_and_silent(tmp_path):
    """`python -m trainers.finetune ... | head -1`: the next line printed after the reader closed
    the pipe raised BrokenPipeError, a traceback on stderr (keras_vit.commands.exit_with)."""
    args = ["--dataset=digits", "--total_steps=50", "--warmup_steps=1", f"--workdir={tmp_path / 'run'}"]
    (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
    with open(out_write, "wb") as stdout, open(err_write, "wb") as stderr:
        proc = command_server.start_process("trainers.finetune", args, users_env(), stdout, stderr)
    # The child's ends are its own now: the reader's close below is the only one left.
    with open(out_read, "rb") as stdout, open(err_read, "rb") as stderr:
        first = stdout.readline()
        stdout.close()  # the banner goes on, then the steps' lines: each a write after the close
        err = stderr.read()
    code = proc.wait(timeout=300)
    assert first.startswith(b"model:"), first
    assert (code, err) == (141, b""), err[-3000:]


# --- `import keras_vit` in a user's own program ----------------------------------------------


def test_a_users_program_starts_quietly_unless_its_log_level_asks():
    program = (["python", "train.py"], ["train.py"])
    assert startup.hide_backend_start(*program, modules={}, environ={})
    assert startup.hide_backend_start(*program, modules={}, environ={"TF_CPP_MIN_LOG_LEVEL": "3"})
    # The user's own TF_CPP_MIN_LOG_LEVEL below 3 asks for TensorFlow's lines: they are not hidden.
    for level in ("0", "1", "2"):
        assert not startup.hide_backend_start(*program, modules={}, environ={"TF_CPP_MIN_LOG_LEVEL": level})
    # Keras already imported by the program: its backend has started, nothing left to hide.
    assert not startup.hide_backend_start(*program, modules={"keras": None}, environ={})
    # A command's --verbose shows them whatever the environment says.
    verbose = (["python", "-m", "keras_vit.predict", "a.jpg", "--verbose"], ["-m", "a.jpg", "--verbose"])
    assert not startup.hide_backend_start(*verbose, modules={}, environ={})


class _BackendConfig:
    def __init__(self, name):
        self.name = name

    def backend(self):
        return self.name


@pytest.mark.parametrize(
    "backend, missing, expected",
    [
        ("tensorflow", "tensorflow", "tensorflow"),
        ("jax", "jax", "jax"),
        ("jax", "jaxlib", "jax"),
        ("torch", "torch", "torch"),
        # Anything else that is missing keeps Keras' own error: the backend is there.
        ("jax", "tensorflow", None),
        ("tensorflow", "h5py", None),
        ("tensorflow", "tensorflow_text", None),
        ("openvino", "openvino", "openvino"),
        ("openvino", "jax", None),
    ],
)
def test_only_the_backend_itself_missing_is_caught(backend, missing, expected):
    error = ModuleNotFoundError(f"No module named {missing!r}", name=missing)
    modules = {"keras.src.backend.config": _BackendConfig(backend)}
    assert startup.missing_backend(error, modules) == expected
    assert startup.missing_backend(error, {}) is None  # Keras itself did not get that far
    # Keras 3.15 imports the backend while its config module is still being imported, which
    # Python then removes from sys.modules: the choice is read from that module's frame.
    namespace = {"__name__": "keras.src.backend.config", "_BACKEND": backend, "missing": missing}
    try:
        exec("raise ModuleNotFoundError(f'No module named {missing!r}', name=missing)", namespace)
    except ModuleNotFoundError as raised:
        assert startup.missing_backend(raised, {}) == expected


def test_the_missing_backend_line_names_the_extras():
    line = startup.no_backend_message("jax", environ={"KERAS_BACKEND": "jax"}, modules={})
    assert "\n" not in line and line.startswith("keras_vit: Keras' backend is jax (KERAS_BACKEND)")
    assert 'pip install "keras-vision-transformer[jax]"' in line
    assert "[tensorflow] or [torch] and set KERAS_BACKEND=tensorflow or torch" in line
    line = startup.no_backend_message("tensorflow", environ={}, modules={})
    assert "(~/.keras/keras.json or Keras' default)" in line and "[tensorflow]" in line
    # `python -m trainers.finetune` with the library alone: the trainers' extra brings it all.
    line = startup.no_backend_message("tensorflow", environ={}, modules={"trainers": None})
    assert line.endswith('backend, which is not installed: pip install "keras-vision-transformer[train]"')


# The Quickstart's first steps: the library imported and a model run, so that TensorFlow's CUDA
# probe at its first op (`failed call to cuInit` on a machine without a GPU) has its chance too.
_USERS_PROGRAM = (
    "import numpy as np\n"
    "import keras_vit\n"
    "model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, "
    "mlp_dim=64, num_classes=3)\n"
    "print(tuple(model(np.zeros((1, 32, 32, 3))).shape))\n"
    "keras_vit.preprocess_input(np.full((1, 2, 2, 3), -1.0))  # scaled twice: keras_vit warns\n"
    # Keras whole, as the program may use it: its optional imports that a command skips too.
    "import sys\n"
    f"print(sorted(m for m in {sorted(startup.SKIPPED_AT_COMMAND_START)} if m in sys.modules))\n"
)


def _run_users_program(backend, **env):
    """A fresh interpreter: the program's start, TensorFlow's or JAX's import, is the subject."""
    env = {"KERAS_BACKEND": backend, **env}
    return run_as_a_user(command_server.CODE, [_USERS_PROGRAM], env, fresh=True)


@pytest.mark.slow  # a fresh interpreter imports the backend: 10 to 20 s on two busy cores
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_import_keras_vit_prints_nothing_on_stderr_but_its_own_warnings(backend):
    proc = _run_users_program(backend)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["(1, 3)", str(sorted(startup.SKIPPED_AT_COMMAND_START))]
    # keras_vit's own warning, and nothing else: no line of the backend's start.
    (line,) = proc.stderr.splitlines() or [""]
    assert "DoubleScalingWarning: keras_vit.preprocess_input: the input has negative values" in line, (
        proc.stderr[-3000:]
    )


@pytest.mark.slow
def test_the_users_own_log_level_shows_tensorflows_lines():
    proc = _run_users_program("tensorflow", TF_CPP_MIN_LOG_LEVEL="0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert NOISE.search(proc.stderr), proc.stderr[-3000:]  # what the quiet start hides
