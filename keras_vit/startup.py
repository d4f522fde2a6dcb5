"""What the project's commands keep TensorFlow from printing when it is imported.

TensorFlow's native start-up lines (oneDNN, CUDA probing on a CPU-only machine, CPU features)
are written by its C++ logger to file descriptor 2 before Python can configure anything, and
TF_CPP_MIN_LOG_LEVEL does not reach the ones logged before absl::InitializeLog. So the import is
run with descriptor 2 pointed at a temporary file, which is replayed only if the import fails.

Keras imports its backend when it is imported, and `keras_vit/__init__.py` imports Keras first
of all: it is the one place that runs before TensorFlow for both `python -m keras_vit.predict`
(Python imports the package before the command's module) and the trainers (whose package
imports this module). Only commands are quieted, never a user's own program that imports
keras_vit. The standard library only: nothing here may import Keras or TensorFlow.
"""

import contextlib
import os
import sys
import tempfile

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


def quiet_start(orig_argv=None, argv=None, modules=None):
    """Whether this process hides TensorFlow's start-up lines.

    Yes for the project's commands (`python -m keras_vit.predict`, `-m trainers.finetune`, ...)
    and while the trainers or their configs are being imported, unless the command line has --verbose.
    """
    orig_argv = getattr(sys, "orig_argv", sys.argv) if orig_argv is None else orig_argv
    argv = sys.argv if argv is None else argv
    modules = sys.modules if modules is None else modules
    command = command_package(orig_argv) in COMMAND_PACKAGES or any(
        name in modules for name in QUIET_IMPORTERS
    )
    return command and not verbose_requested(argv)


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
