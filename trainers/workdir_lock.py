"""One run at a time in a workdir: the chief holds a lock on WORKDIR/.lock while its run goes on.

Two processes training into one workdir (a command started twice, or a scheduler that started
a job again while its first process, on a host it took for dead, was still running) would each
write config.json, save and prune checkpoints the other restores, and end with whichever
results.json came last. The second is refused instead, in one line naming the first.

The lock is the kernel's (`fcntl.flock` on an open file): it goes with its process however that
ends, SIGKILL included, so no stale lock is ever left to remove by hand. The file stays (removing
it while held would let a third process lock a new file of the same name); it holds the
holder's process id and host, for the message. A remote workdir (gs://) has no such lock, nor
does a platform without `fcntl`: there the run goes on unchecked, as before.
"""

import contextlib
import os
import socket

from keras_vit import fileio
from trainers.errors import TrainingError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

LOCK_FILE = ".lock"


@contextlib.contextmanager
def held(workdir):
    """Holds WORKDIR/.lock for the block; TrainingError if another process holds it."""
    if fcntl is None or fileio.is_remote(workdir):
        yield
        return
    descriptor = os.open(os.path.join(workdir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 200, 0).decode("utf-8", "replace").strip() or "another process"
            raise TrainingError(
                f"{workdir} is in use by another run ({holder}): wait for it to end or stop it, "
                "or choose another --workdir"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        os.close(descriptor)  # the lock goes with it
