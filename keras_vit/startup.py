"""How keras_vit starts Keras and its backend: quietly, or with one line when the backend is missing.

TensorFlow's native start-up lines (oneDNN, CUDA probing on a CPU-only machine, CPU features)
are written by its C++ logger to file descriptor 2 before Python can configure anything, and
TF_CPP_MIN_LOG_LEVEL does not reach the ones logged before absl::InitializeLog. So the import is
run with descriptor 2 pointed at a temporary file, which is replayed only if the import fails.

Keras imports its backend when it is imported, and `keras_vit/__init__.py` imports Keras first
of all (`import_keras`): it is the one place that runs before TensorFlow for both `python -m
keras_vit.predict` (Python imports the package before the command's module) and the trainers
(whose package imports this module). A user's own program that imports keras_vit starts as
quietly, unless its TF_CPP_MIN_LOG_LEVEL asks for TensorFlow's lines; TensorFlow's later log
lines (the CUDA probe of its first op, XLA's service) stay hidden too: TF_CPP_MIN_LOG_LEVEL is
set to 3 unless the user set it.

A command also imports Keras without the optional packages (scikit-learn, matplotlib, JAX) that
Keras and TensorFlow import for features no command uses (SKIPPED_AT_COMMAND_START): a finder
refuses them to those importers while Keras starts, so each takes the path it has for a machine
without them, and they import as usual afterwards. A user's program imports Keras whole.

A command also spends less time in Python's garbage collector: TensorFlow's import leaves about
400,000 objects, which every full collection traversed again, during the import and the run
(1.4 s of a 200-step digits run) and in the interpreter's clean-up at exit (1.2-1.8 s, a full
collection after each phase of tearing the modules down). Keras is imported with the collector
paused, and every object then is frozen (`gc.freeze`: out of all later collections,
`imported_objects_frozen`); at exit, after the other exit handlers, one collection finalizes the
garbage there is and the rest is frozen too (`shorten_exit`). The teardown itself is unchanged.

In a user's program, triton's library is loaded before Keras where it is installed beside
TensorFlow (keras_vit/triton_first.py): TensorFlow's load would otherwise make a later `import
timm` or `torch.compile` crash. Commands skip it: none of them imports triton.

Keras with its backend not installed fails in a traceback ending in `No module named 'jax'`;
`import keras_vit` says instead, in one line, which extra installs one. The standard library
only: nothing here may import Keras or TensorFlow.
"""

import atexit
import contextlib
import gc
import os
import sys
import tempfile

from keras_vit import onednn_default, triton_first

VERBOSE_FLAG = "--verbose"
_TRUE = ("", "=true", "=True", "=1")
# The packages whose `python -m` commands start quietly (the trainers also when imported).
COMMAND_PACKAGES = ("keras_vit", "trainers", "benchmarks")
# Imported, these start quietly too: the trainers, and their configs, which import keras_vit
# before the trainers (for --posemb's values) in a program that reads a preset first.
QUIET_IMPORTERS = ("trainers", "configs")
# Below this level TensorFlow's C++ log lines stay hidden after the import too (XLA service,
# tf.data notes, CUDA probing errors on a machine without a GPU).
QUIET_LOG_LEVEL = "3"
LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
# Keras' backends that an extra of ours installs: the backend's name (KERAS_BACKEND), which is
# also the extra's name, -> the top-level modules whose absence means it is not installed.
BACKEND_MODULES = {
    "tensorflow": ("tensorflow",),
    "jax": ("jax", "jaxlib"),
    "torch": ("torch",),
    "openvino": ("openvino",),  # inference only
}
DISTRIBUTION = "keras-vision-transformer"
# The module in which Keras decides its backend (KERAS_BACKEND, ~/.keras/keras.json, default).
KERAS_CONFIG = "keras.src.backend.config"
# What TensorFlow and Keras import as they start wherever it is installed, for features no
# command of ours uses: Keras' scikit-learn wrappers, its plotting helpers, TensorFlow Lite's
# converter from JAX functions and a patch of old JAX versions beside Keras' Orbax callback,
# TensorFlow's legacy tf.keras (its check for SciPy sparse matrices) and Keras' notebook display
# of a saved file's contents. The [train] extra installs scikit-learn, matplotlib and JAX (the
# digits are scikit-learn's file; the plots and the jax engine import the other two when they
# need them); together
# they were a third of a command's `import keras`, SciPy's sparse matrices and IPython another
# 0.15 s.
# Module -> the importers it is refused to while a command imports Keras
# (`optional_imports_skipped`); afterwards it imports as usual.
SKIPPED_AT_COMMAND_START = {
    "sklearn": ("keras.src.wrappers.",),
    "matplotlib": ("keras.src.visualization.",),
    "jax": ("tensorflow.lite.", "keras.src.callbacks.orbax_checkpoint"),
    "scipy": ("tensorflow.python.keras.",),
    "IPython": ("keras.src.saving.file_editor",),
}
_IMPORT_MACHINERY = "<frozen importlib"


def verbose_requested(argv):
    """Whether the command line asks for TensorFlow's own log lines (`--verbose`)."""
    verbose = False
    for arg in argv[1:]:
        if arg == "--":
            break
        if arg.startswith(VERBOSE_FLAG):
            verbose = arg[len(VERBOSE_FLAG) :] in _TRUE
        elif arg == "--noverbose":
            verbose = False
    return verbose


def command_package(orig_argv):
    """The top package of the module a `python -m PACKAGE.MODULE` command line runs, else None."""
    args = iter(orig_argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "").split(".")[0] or None
        if arg.startswith("-m"):
            return arg[2:].split(".")[0]
        if arg in ("-X", "-W"):  # the interpreter's options that take a value
            next(args, None)
        elif arg == "-c" or not arg.startswith("-"):  # a command string or a script
            return None
    return None


def is_command(orig_argv=None):
    """Whether this process runs one of the project's commands (`python -m keras_vit.predict`,
    `-m trainers.finetune`, ...): those also start Keras without SKIPPED_AT_COMMAND_START, which
    a user's own program may use."""
    orig_argv = getattr(sys, "orig_argv", sys.argv) if orig_argv is None else orig_argv
    return command_package(orig_argv) in COMMAND_PACKAGES


def _starts_as_a_command(orig_argv, modules):
    """A command, or a program importing the trainers or their configs."""
    return is_command(orig_argv) or any(name in modules for name in QUIET_IMPORTERS)


def quiet_start(orig_argv=None, argv=None, modules=None):
    """Whether this process hides TensorFlow's start-up lines.

    Yes for the project's commands (`python -m keras_vit.predict`, `-m trainers.finetune`, ...)
    and while the trainers or their configs are being imported, unless the command line has --verbose.
    """
    argv = sys.argv if argv is None else argv
    modules = sys.modules if modules is None else modules
    return _starts_as_a_command(orig_argv, modules) and not verbose_requested(argv)


def asks_for_native_lines(environ=None):
    """Whether the user's own TF_CPP_MIN_LOG_LEVEL (0, 1 or 2) asks for TensorFlow's log lines."""
    environ = os.environ if environ is None else environ
    level = environ.get(LOG_LEVEL_VARIABLE, "").strip()
    return level.isdigit() and int(level) < int(QUIET_LOG_LEVEL)


def hide_backend_start(orig_argv=None, argv=None, modules=None, environ=None):
    """Whether importing Keras here runs with the backend's native start-up lines hidden.

    A command does unless --verbose; a user's program that imports keras_vit does unless its
    TF_CPP_MIN_LOG_LEVEL asks for them. Nothing to hide once Keras is imported.
    """
    modules = sys.modules if modules is None else modules
    if "keras" in modules:
        return False
    if quiet_start(orig_argv, argv, modules):
        return True
    if _starts_as_a_command(orig_argv, modules):
        return False  # the command line's --verbose asks for them
    return not asks_for_native_lines(environ)


def _chosen_backend(error, modules):
    """The backend Keras chose, as its module keras.src.backend.config decided it: from the module,
    or, when the backend's import failed during that module's own import (Keras 3.15 imports it
    there), from the module's frame in the traceback (Python removes a failed module)."""
    config = modules.get(KERAS_CONFIG)
    if config is not None:
        return config.backend()
    trace = error.__traceback__
    while trace is not None:
        namespace = trace.tb_frame.f_globals
        if namespace.get("__name__") == KERAS_CONFIG and isinstance(namespace.get("_BACKEND"), str):
            return namespace["_BACKEND"]
        trace = trace.tb_next
    return None


def missing_backend(error, modules=None):
    """The name of Keras' backend (tensorflow, jax, torch) when `error`, raised by `import keras`,
    says that backend is not installed; None for any other missing module."""
    modules = sys.modules if modules is None else modules
    missing = (error.name or "").partition(".")[0]
    backend = _chosen_backend(error, modules) if missing else None
    return backend if missing in BACKEND_MODULES.get(backend, ()) else None


def no_backend_message(backend, environ=None, modules=None):
    """The one line `import keras_vit` ends with when Keras' backend is not installed."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if any(name in modules for name in QUIET_IMPORTERS):  # the trainers' engine chose the backend
        return (
            f"keras_vit: the trainers need TensorFlow, TFDS and Keras' {backend} backend, which is not "
            f'installed: pip install "{DISTRIBUTION}[train]"'
        )
    chosen = "KERAS_BACKEND" if environ.get("KERAS_BACKEND") else "~/.keras/keras.json or Keras' default"
    others = [name for name in BACKEND_MODULES if name != backend]
    return (
        f"keras_vit: Keras' backend is {backend} ({chosen}), which is not installed: "
        f'pip install "{DISTRIBUTION}[{backend}]", or install [{others[0]}] or [{others[1]}] '
        f"and set KERAS_BACKEND={others[0]} or {others[1]}"
    )


def import_keras():
    """Imports Keras, and so its backend, for keras_vit/__init__.py: quietly (hide_backend_start),
    and ending in one line (SystemExit, status 1, no traceback) when the backend is not installed."""
    onednn_default.ask_for_onednn()  # before TensorFlow reads it, at its import
    hide = hide_backend_start()
    command = is_command()
    triton_first.load_before_tensorflow(command=command)  # before TensorFlow's LLVM is the process's
    if command:
        # Registered before Keras and its backend register theirs: it runs after them.
        atexit.register(shorten_exit)
    if hide or quiet_start():
        # TensorFlow's lines after the import too: the CUDA probe of its first op on a machine
        # without a GPU (`failed call to cuInit`), XLA's service lines. A value the user set stays.
        os.environ.setdefault(LOG_LEVEL_VARIABLE, QUIET_LOG_LEVEL)
    try:
        with (
            native_stderr_hidden(hide=hide),
            optional_imports_skipped(skip=command),
            imported_objects_frozen(freeze=command),
        ):
            import keras  # noqa: F401
    except ModuleNotFoundError as error:
        backend = missing_backend(error)
        if backend is None:
            raise
        raise SystemExit(no_backend_message(backend)) from None


@contextlib.contextmanager
def imported_objects_frozen(freeze=True):
    """Runs the body (Keras' import) with the garbage collector paused, then freezes every object
    of the process, so that no later collection traverses them again."""
    if not freeze:
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def shorten_exit():
    """Collects the garbage there is, finalizers run, then freezes every object left, so that the
    interpreter's collections while it tears the modules down have nothing old to traverse."""
    gc.collect()
    gc.freeze()


class _SkippedImports:
    """A finder, first on sys.meta_path, that refuses SKIPPED_AT_COMMAND_START's modules to their
    importers: their `try: import ...` takes the ImportError path it has for a machine without
    them. A module already imported is not looked up again, so it is never refused."""

    def __init__(self, skipped):
        self.skipped = skipped

    def find_spec(self, name, path=None, target=None):
        importers = self.skipped.get(name)
        if importers and importing_module(sys._getframe(1)).startswith(importers):
            raise ModuleNotFoundError(f"{name} is not imported while a command starts", name=name)
        return None


def importing_module(frame):
    """The name of the module whose code runs the import being resolved in `frame`'s stack: the
    first frame outside Python's import machinery, from `frame` outward."""
    while frame is not None and frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


@contextlib.contextmanager
def optional_imports_skipped(skip=True, skipped=None):
    """Runs the body with `skipped` (default SKIPPED_AT_COMMAND_START) refused to its importers."""
    if not skip:
        yield
        return
    finder = _SkippedImports(SKIPPED_AT_COMMAND_START if skipped is None else skipped)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


@contextlib.contextmanager
def native_stderr_hidden(hide=True):
    """Runs the body with file descriptor 2 sent to a temporary file; replays it on an error."""
    if not hide:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            _restore(saved)
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", "replace"))
            sys.stderr.flush()
            raise
        _restore(saved)


def _restore(saved):
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
