"""The list of a package's commands that `python -m keras_vit` and `python -m trainers` print.

A command is a module run as `python -m PACKAGE.NAME`: a file with an `if __name__ ==
"__main__":` block, or a sub-package with a `__main__.py`. What it does is the first paragraph
of its docstring, so the list and the modules cannot disagree. The files are parsed, not
imported: listing starts nothing (no TensorFlow). Each command's `__main__` block is
`commands.exit_with(main)`. The standard library only.
"""

import ast
import contextlib
import os
import signal
import sys

_MAIN_GUARD = ("__name__", "__main__")
# The status a shell reports for a program that SIGPIPE stopped (128 + 13), as `yes | head` gives.
STOPPED_BY_A_CLOSED_PIPE = 141
# The status of a command given bad arguments, as argparse ends.
USAGE_ERROR = 2


class Terminated(BaseException):
    """SIGTERM, raised where the command is (as Ctrl-C raises KeyboardInterrupt), so that its
    `finally` blocks and context managers run before it ends: an export's scratch files (the
    weights, gigabytes for the large models) and its child process were left behind."""


def _on_sigterm(signum, frame):
    raise Terminated


def exit_with(main):
    """`sys.exit(main())` for a command's `__main__` block, with three ends of its own, each
    without the traceback Python prints:

    - whoever read its output went away (`--help | head`, a pager quit early): the next print
      raised BrokenPipeError; the command ends at once, silent, with the shell's status for a
      program stopped by SIGPIPE;
    - Ctrl-C where the command has no handler of its own (the trainers' is trainers/cli.py's):
      it ends killed by SIGINT, as Python ends it, so that a shell loop that ran it stops too;
    - SIGTERM where nothing else has taken it (the trainers take it as they start): its
      clean-up runs, then it ends killed by SIGTERM, as it would have without the clean-up.
    """
    with contextlib.suppress(ValueError):  # ValueError: not the main thread
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        status = main()
        sys.stdout.flush()  # what print left buffered fails here, not in the interpreter's teardown
    except (KeyboardInterrupt, Terminated) as stop:
        number = signal.SIGINT if isinstance(stop, KeyboardInterrupt) else signal.SIGTERM
        with contextlib.suppress(OSError):
            sys.stdout.flush()
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        raise  # where the signal cannot kill (another platform), Python's own end
    except BrokenPipeError:
        # The interpreter flushes both streams as it exits, and would fail and complain again.
        nowhere = os.open(os.devnull, os.O_WRONLY)
        for descriptor in (1, 2):
            os.dup2(nowhere, descriptor)
        sys.exit(STOPPED_BY_A_CLOSED_PIPE)
    sys.exit(status)


def _runs_as_main(tree):
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = [node.test.left, *node.test.comparators]
            values = [getattr(n, "id", None) or getattr(n, "value", None) for n in names]
            if tuple(values) == _MAIN_GUARD:
                return True
    return False


def _summary(tree):
    """The docstring's first paragraph, on one line."""
    docstring = ast.get_docstring(tree) or ""
    return " ".join(docstring.split("\n\n")[0].split())


def find(package):
    """[(command, what it does)] of an imported package's commands, sorted by name."""
    folder = os.path.dirname(package.__file__)
    found = []
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        if os.path.isdir(path):
            path, name = os.path.join(path, "__main__.py"), entry
            if not os.path.isfile(path):
                continue
        elif entry.endswith(".py") and not entry.startswith("_"):
            name = entry[: -len(".py")]
        else:
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        if name == os.path.basename(folder) or not (path.endswith("__main__.py") or _runs_as_main(tree)):
            continue
        found.append((f"python -m {package.__name__}.{name}", _summary(tree)))
    return found


def listing(package):
    """The text `python -m PACKAGE` prints: a line per command, with what it does."""
    commands = find(package)
    width = max(len(command) for command, _ in commands)
    lines = [f"Commands of {package.__name__}:"]
    lines += [f"  {command:<{width}}  {summary}" for command, summary in commands]
    return "\n".join(lines)


def list_commands(package, argv):
    """`python -m PACKAGE [ARGS]`: the list, status 0; with anything but --help after it, the list
    and a one-line error, status 2 (`python -m keras_vit predict x.png`, a space for the dot,
    had ended 0 having done nothing)."""
    text = listing(package)
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(text)
        return 0
    print(text, file=sys.stderr)
    wanted = f"python -m {package.__name__}.{argv[0]}"
    named = [command for command, _ in find(package) if command == wanted]
    hint = f"run {wanted} {' '.join(argv[1:])}".rstrip() if named else "run one of the commands above"
    print(f"error: python -m {package.__name__} takes no arguments; {hint}", file=sys.stderr)
    return USAGE_ERROR
