"""SIGTERM and Ctrl-C in a trainer command's first seconds, while it imports TensorFlow or JAX,
before trainers/preemption.py can watch them: noted here, and acted on by that module as soon as
the command starts (it stops at once, with its line, as a signal before a run does).

Only the commands that start through trainers/cli.py's `main` note them; any other program
keeps Python's own handling. The standard library only: this runs before any other import.
"""

import signal

from trainers import engine_env

# `python -m` modules whose start is trainers/cli.py's main, which takes these signals over.
COMMANDS = ("trainers.finetune", "trainers.pretrain", "trainers.fewshot")

_received = []
_installed = []


def catch(orig_argv):
    """Notes SIGTERM and SIGINT from now on, if this process is one of COMMANDS."""
    if engine_env.command_module(orig_argv) not in COMMANDS:
        return
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(signum, _note)
        except ValueError:  # not the main thread
            continue
        _installed.append(signum)


def _note(signum, frame):
    _received.append(signum)


def take():
    """The signals noted so far; none are noted after this call (the caller's handlers follow)."""
    received = list(_received)
    _received.clear()
    for signum in _installed:
        if signal.getsignal(signum) is _note:
            signal.signal(signum, signal.SIG_DFL if signum == signal.SIGTERM else signal.default_int_handler)
    _installed.clear()
    return received
