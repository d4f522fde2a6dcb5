"""Another package's console script (`tensorboard`, `saved_model_cli`) run in the test's process.

An installed console script is `sys.exit(ENTRY_POINT())` with the command line in `sys.argv`;
`run` calls the same entry point here, with its output captured, so a test of a documented
`tensorboard ...` or `saved_model_cli ...` line checks that program's own parsing and output
without a child importing TensorFlow again. Both programs start through absl's `app.run`, which
changes what every later test of the process would meet (the global absl flags keep their last
values and their checks: `saved_model_cli`'s required --dir then failed `tensorboard`'s start;
the root logger gains absl's handler, the verbosity and the environment change): `run` puts
each of those back as it found it. `exit_status` is how such a program ends, which
tests/trainer_cli.py's in-process commands share.
"""

import contextlib
import importlib.metadata
import io
import logging
import os
import sys
import traceback

from absl import flags
from absl import logging as absl_logging
from absl.command_name import set_kernel_process_name


def run(name, args):
    """`name args`, as the console script `name` of this environment runs it, in this process:
    (exit status, stdout, stderr). AssertionError where no package installed `name`."""
    found = importlib.metadata.entry_points(group="console_scripts", name=name)
    assert found, f"{name} is not installed in this environment"
    (entry,) = found
    main = entry.load()  # imports the program's module, which defines its flags
    out, err = io.StringIO(), io.StringIO()
    with _put_back_as_found():
        sys.argv = [name, *args]
        flags.FLAGS.unparse_flags()  # the values of the last command parsed here are not this one's
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = exit_status(main)
    return status, out.getvalue(), err.getvalue()


def exit_status(main):
    """The status a process whose program is `main()` exits with, as `sys.exit(main())` ends it,
    printing on stderr what it prints on its way out: SystemExit's code (None 0; a message, such as
    sys.exit("error: ...") gives, printed and 1), or 1 and the traceback of an exception."""
    try:
        status = main()
    except SystemExit as stop:
        status = stop.code
    except BaseException:
        traceback.print_exc()
        return 1
    if status is None:
        return 0
    if not isinstance(status, int):
        print(status, file=sys.stderr)
        return 1
    return status


@contextlib.contextmanager
def _put_back_as_found():
    """What a program's start changes in its process, put back as it was."""
    argv, environ = sys.argv, dict(os.environ)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    verbosity = absl_logging.get_verbosity()
    values = flags.FLAGS.flag_values_dict() if flags.FLAGS.is_parsed() else None
    checks = {name: list(flags.FLAGS[name].validators) for name in flags.FLAGS}
    with open("/proc/self/comm") as f:
        process_name = f.read().strip()
    try:
        yield
    finally:
        sys.argv = argv
        os.environ.clear()
        os.environ.update(environ)
        root.handlers[:] = handlers
        root.setLevel(level)
        absl_logging.set_verbosity(verbosity)
        for name in flags.FLAGS:  # the checks a program's main adds
            flags.FLAGS[name].validators[:] = checks.get(name, [])
        flags.FLAGS.unparse_flags()
        if values is not None:
            flags.FLAGS([argv[0]])
            for flag, value in values.items():
                flags.FLAGS[flag].value = value
        set_kernel_process_name(process_name)  # absl's first `app.run` names the process after the program
