"""The trainers' command line: flags -> run(config), every error one line on stderr.

Exit codes: 0 done (or stopped by SIGTERM, at any moment, after saving what the rerun needs),
2 bad input, 1 the run failed (e.g. the loss diverged, or another process of the run was lost),
130 interrupted (Ctrl-C; during a run, after the same save as SIGTERM, trainers/preemption.py):
each error's `exit_code` (trainers/errors.py); 141 where the reader of stdout went away
(keras_vit/commands.py's exit_with).
"""

import sys

from trainers import preemption
from trainers.console import show_library_messages
from trainers.errors import TrainerError, one_line
from trainers.flags import parse_command, program_name, read_argv


def main(run, get_config, argv=None, help_overrides=None, about=None):
    """The trainer's command line: `run(config, weights_params=...)` on the parsed flags (the
    --weights file's parameters where reading its shape read them: trainers/flags.py); `about`
    (its docstring) opens `--help`."""
    whole_process = argv is None  # the process's own command line
    argv = sys.argv if argv is None else argv
    show_library_messages()

    def work():
        config, weights_params = parse_command(argv, get_config, help_overrides, about)
        run(config, weights_params=weights_params)

    return _ended(program_name(argv), work, whole_process)


def main_with_own_flags(program, values, usage, body, argv=None):
    """A command whose flags are its own absl FlagValues (not a preset's fields): --help, parsing,
    body(values), and the same one-line errors, signal handling and exit codes as `main` (the
    demo runs trainings in its process; prepare downloads and writes datasets)."""
    whole_process = argv is None  # the process's own command line
    argv = sys.argv if argv is None else argv

    def work():
        if read_argv(values, argv, usage):
            body(values)

    return _ended(program, work, whole_process=whole_process)


def _ended(program, work, whole_process):
    """Runs work() and returns the command's exit status (above), each error one line."""
    try:
        # SIGTERM and Ctrl-C from here on: a run stops at its next safe point, anything else
        # at once, each with one line (trainers/preemption.py). The signals are watched until
        # the process ends where this is the process's own command line.
        with preemption.watching(reads=False, whole_process=whole_process):
            work()
    except TrainerError as e:
        print(f"{program}: error: {one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        if preemption.interrupted_at_once():
            print(preemption.stopped_line(interrupted=True), flush=True)
        print(f"{program}: interrupted", file=sys.stderr)
        return 130
    except preemption.Stopped:
        print(preemption.stopped_line(), flush=True)
        return 0
    return 0
