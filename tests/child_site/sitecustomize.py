"""Records that this process imported TensorFlow, for tests/child_processes.py's count.

A child of the tests finds this file first on PYTHONPATH only while KERAS_VIT_PROCESS_LOG names
the count's log (tests/child_processes.py puts it there); otherwise nothing here runs. The
standard library only: it runs before anything else the child imports.
"""

import json
import os
import sys

_LOG = os.environ.get("KERAS_VIT_PROCESS_LOG")


class _TensorFlowImport:
    """A finder that finds nothing: it notes the first import of tensorflow and steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            sys.meta_path.remove(self)
            line = {"kind": "tensorflow", "pid": os.getpid(), "test": os.environ.get("PYTEST_CURRENT_TEST")}
            with open(_LOG, "a") as f:
                f.write(json.dumps(line) + "\n")
        return None


if _LOG:
    sys.meta_path.insert(0, _TensorFlowImport())
