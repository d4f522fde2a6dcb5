"""The trainers' command line: flags -> run(config), every error one line on stderr.

Exit codes: 0 done (or stopped by SIGTERM after saving a checkpoint), 2 bad input, 1 the run
failed (e.g. the loss diverged), 130 interrupted: each error's `exit_code` (trainers/errors.py).
"""

import sys

from absl import flags

from trainers.errors import TrainerError, UsageError, one_line
from trainers.flags import parse_flags, program_name


def main(run, get_config, argv=None, help_overrides=None):
    argv = sys.argv if argv is None else argv
    program = program_name(argv)
    try:
        run(parse_flags(argv, get_config, help_overrides))
    except TrainerError as e:
        print(f"{program}: error: {one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        return 130
    return 0


def main_with_own_flags(program, values, usage, body, argv=None):
    """A command whose flags are its own absl FlagValues (not a preset's fields): --help, parsing,
    body(values), and the same one-line errors and exit codes as `main`."""
    argv = sys.argv if argv is None else argv
    if any(a in ("--help", "-h", "--helpfull") for a in argv[1:]):
        print(f"{usage}\n")
        print(values.get_help())
        return 0
    try:
        try:
            rest = values(argv)
        except flags.Error as e:
            raise UsageError(str(e)) from None
        if len(rest) > 1:
            raise UsageError(f"unexpected arguments {rest[1:]}; flags look like --name=value.")
        body(values)
    except TrainerError as e:
        print(f"{program}: error: {one_line(e)}", file=sys.stderr)
        return e.exit_code
    return 0
