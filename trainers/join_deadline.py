"""A limit on the wait for a cluster to form, ended by the command's own one-line error.

`jax.distributed.initialize` waits in native code for every process of the cluster; past its
timeout JAX's client ends the process with a fatal error of its own (exit status 134 and a C++
stack trace), which its public API cannot turn into an exception. The wait releases Python's
lock, so a thread still runs: at the limit it prints the line every other error of the command
prints, `PROGRAM: error: MESSAGE`, and ends the process with the exit status of a strategy that
cannot be created (2). Nothing of the run is written before its cluster forms, and the workdir
lock is the kernel's, released as the process ends.
"""

import contextlib
import os
import sys
import threading

from trainers.errors import StrategyError
from trainers.flags import program_name


@contextlib.contextmanager
def ends_the_process_after(seconds, message):
    """Runs its block (a wait that may never return); where that has not returned within
    `seconds`, the process ends with `message` as its one-line error."""
    returned = threading.Event()

    def watch():
        if returned.wait(seconds):
            return
        with contextlib.suppress(OSError, ValueError):  # a stream already closed
            sys.stdout.flush()
            print(f"{program_name(sys.argv)}: error: {message}", file=sys.stderr, flush=True)
        os._exit(StrategyError.exit_code)  # the waiting thread cannot be stopped any other way

    threading.Thread(target=watch, name="join-deadline", daemon=True).start()
    try:
        yield
    finally:
        returned.set()
