"""The test process's signal stack, put back after each test (tests/conftest.py).

OpenVINO's CPU plugin (2026.4) gives the thread that makes it a signal stack of its own and, when
freed, puts back the one it found there, unless another has replaced it since. Two plugins freed
in the order they were made (two `openvino.Core`s, or two models compiled on Keras' OpenVINO
backend) therefore leave the thread the first plugin's stack, already unmapped: the next signal
the thread handles (a test's SIGTERM to its own process, Ctrl-C) ends the process with a
segmentation fault. A pytest-xdist worker that had run the deploy guide's OpenVINO lines died so
at a later file's SIGTERM, and the suite hung on its replacement.
"""

import contextlib
import ctypes
import sys


class _Stack(ctypes.Structure):
    """Linux's stack_t."""

    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]

    def key(self):
        return self.ss_sp, self.ss_flags, self.ss_size


LINUX = sys.platform.startswith("linux")  # stack_t's layout and /proc/self/maps are Linux's
_LIBC = ctypes.CDLL(None, use_errno=True) if LINUX else None
_SS_DISABLE = 2  # Linux's flag of a thread without a signal stack


def current():
    """This thread's signal stack (None where it cannot be read: not Linux)."""
    stack = _Stack()
    if _LIBC is None or _LIBC.sigaltstack(None, ctypes.byref(stack)) != 0:
        return None
    return stack


def is_mapped(stack, maps="/proc/self/maps"):
    """Whether `stack` (a signal stack from current()) lies in memory the process has mapped; a
    disabled stack is never written to, so it counts as mapped."""
    if stack.ss_flags & _SS_DISABLE:
        return True
    start, end = stack.ss_sp, stack.ss_sp + stack.ss_size
    with open(maps, encoding="ascii") as regions:
        for line in regions:
            low, high = (int(address, 16) for address in line.split()[0].split("-"))
            if low <= start and end <= high:
                return True
    return False


@contextlib.contextmanager
def kept():
    """Puts this thread's signal stack back as it was before the block, whatever the block did."""
    before = current()
    try:
        yield
    finally:
        after = current()
        if before is not None and after is not None and after.key() != before.key():
            if _LIBC.sigaltstack(ctypes.byref(before), None) != 0:
                raise OSError(ctypes.get_errno(), "sigaltstack: could not put the signal stack back")
