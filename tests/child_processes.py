"""Counts the processes a test run starts and the TensorFlow imports it pays for.

    KERAS_VIT_PROCESS_LOG=/tmp/processes.jsonl .venv/bin/python -m pytest -n 2 --dist=loadfile ...
    .venv/bin/python tests/child_processes.py /tmp/processes.jsonl

With KERAS_VIT_PROCESS_LOG set, tests/conftest.py calls `install`: every test process (the
pytest-xdist workers too) notes its own TensorFlow import when it happens, every child process
started through `subprocess` is noted with the test that started it, and a Python child gets
tests/child_site/sitecustomize.py first on its PYTHONPATH, which notes the child's TensorFlow
import. A server of tests/command_server.py (started by whichever test first needs it, then
serving every test of the run) is noted as a server, and its import as the servers', not as a
child of that test. Run as a script, it prints the counts. Off (the default), nothing is patched.
"""

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter

LOG_VARIABLE = "KERAS_VIT_PROCESS_LOG"
CHILD_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child_site")
# Set in the environment of tests/command_server.py's servers (read by child_site's note too).
SERVER_VARIABLE = "KERAS_VIT_COMMAND_SERVER"


def _current_test():
    """The node id of the test being set up, run or torn down ("" outside a test)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def _note(log, **line):
    with open(log, "a") as f:
        f.write(json.dumps(line) + "\n")


def _with_child_site(env, log):
    """The child's environment, with the TensorFlow-import note first on its PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    env[LOG_VARIABLE] = log
    if "PYTEST_CURRENT_TEST" in os.environ:  # the test the child's note names, whatever its env
        env["PYTEST_CURRENT_TEST"] = os.environ["PYTEST_CURRENT_TEST"]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [CHILD_SITE, env.get("PYTHONPATH")]))
    return env


def install(log):
    """Notes this process's TensorFlow import, and every child it starts from now on."""
    if CHILD_SITE not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        # Not a child of a counted process (an xdist worker is, whose sitecustomize notes it): the
        # same note, when this process imports TensorFlow (pytest-xdist's controller does not).
        spec = importlib.util.spec_from_file_location(
            "_tensorflow_note", os.path.join(CHILD_SITE, "sitecustomize.py")
        )
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    original = subprocess.Popen.__init__

    def noted(self, args, *rest, **kwargs):
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
        kind = "server" if (kwargs.get("env") or os.environ).get(SERVER_VARIABLE) else "child"
        _note(log, kind=kind, test=_current_test(), argv=[str(a) for a in argv[:4]])
        kwargs["env"] = _with_child_site(kwargs.get("env"), log)
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = noted


def note_forked(argv):
    """Notes a child forked from tests/command_server.py's server (a process that imported
    TensorFlow once, as the server's own start noted): a child, without an import of its own."""
    log = os.environ.get(LOG_VARIABLE)
    if log:
        _note(log, kind="child", test=_current_test(), argv=[str(a) for a in argv[:4]], forked=True)


def report(log):
    """Test cases that started a child (one that imported TensorFlow), children, command servers,
    TensorFlow imports."""
    lines, damaged = [], 0
    with open(log) as f:
        for text in f:
            try:
                lines.append(json.loads(text))
            except ValueError:  # a note cut short (a process that ended while writing)
                damaged += 1
    children = [line for line in lines if line["kind"] == "child" and line["test"]]
    imports = [line for line in lines if line["kind"] == "tensorflow"]
    server_imports = [line for line in imports if line.get("server")]
    by_test = Counter(line["test"] for line in children)
    importing = {
        line["test"].rsplit(" (", 1)[0] for line in imports if line["test"] and not line.get("server")
    }
    print(f"test cases that started a child process: {len(by_test)}")
    print(f"  of which a child imported TensorFlow: {len(importing)}")
    print(f"child processes started by tests: {len(children)}")
    forked = sum(1 for line in children if line.get("forked"))
    print(f"  of which forked from a process that had imported TensorFlow: {forked}")
    print(f"command servers started: {sum(1 for line in lines if line['kind'] == 'server')}")
    outside = sum(1 for line in imports if not line["test"])
    by_whom = f"{outside} by pytest's own processes, {len(server_imports)} by the servers"
    print(f"TensorFlow imports: {len(imports)} ({by_whom})")
    if damaged:
        print(f"notes that could not be read: {damaged}")
    for test, count in sorted(by_test.items()):
        commands = sorted(
            {" ".join(line["argv"][:3]).replace("\n", " ")[:70] for line in children if line["test"] == test}
        )
        mark = "tf" if test in importing else "  "
        print(f"  {count:3d} {mark}  {test}  {'; '.join(commands)[:160]}")


if __name__ == "__main__":
    report(sys.argv[1])
