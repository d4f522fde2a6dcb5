"""Records that this process imported TensorFlow, for tests/child_processes.py's count.

A child of the tests finds this file first on PYTHONPATH only while KERAS_VIT_PROCESS_LOG names
the count's log (tests/child_processes.py puts it there); otherwise nothing here runs. The
standard library only: it runs before anything else the child imports. Python runs one
`sitecustomize`, the first it finds, so this one then runs the next on the path: a test's own
(tests/test_startup.py notes what a command imported with one) runs under the count too.
"""

import importlib.util
import json
import os
import sys

_LOG = os.environ.get("KERAS_VIT_PROCESS_LOG")


class _TensorFlowImport:
    """A finder that hands on TensorFlow's own spec, with a loader that notes the import when it
    runs (a `find_spec` alone, as torch makes to see what is installed, imports nothing)."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader.exec_module = self._noted(spec.loader.exec_module)
        return spec

    def _noted(self, exec_module):
        def exec_and_note(module):
            if self in sys.meta_path:
                sys.meta_path.remove(self)
                line = {
                    "kind": "tensorflow",
                    "pid": os.getpid(),
                    "test": os.environ.get("PYTEST_CURRENT_TEST"),
                    # tests/child_processes.py's SERVER_VARIABLE: a command server's start.
                    "server": "KERAS_VIT_COMMAND_SERVER" in os.environ,
                }
                _append(json.dumps(line) + "\n")
            exec_module(module)

        return exec_and_note


def _append(text):
    """Adds `text` to the log, unless this child is held to a file size (a test's full disk,
    RLIMIT_FSIZE): there the write would be cut short or fail, and fail the child with it."""
    import resource

    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        return
    try:
        with open(_LOG, "a") as f:
            f.write(text)
    except OSError:  # the count is a measurement: it must never stop the child
        pass


def _run_the_next_sitecustomize():
    """Runs the `sitecustomize.py` that Python would have found after this one, if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    folders = [os.path.abspath(folder or os.curdir) for folder in sys.path]
    for folder in folders[folders.index(here) + 1 :] if here in folders else []:
        path = os.path.join(folder, "sitecustomize.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_next_sitecustomize", path)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if _LOG:
    sys.meta_path.insert(0, _TensorFlowImport())
_run_the_next_sitecustomize()
