"""Room on the workdir's disk, and the one-line errors of writes that fail.

A week-long run must not learn that its disk is full from a traceback in the middle of a save:
before each checkpoint the free space of a local workdir is compared with the size of the last
checkpoint (the next one has the same variables, so it needs as much), and a write that fails
anyway (no space, a read-only or vanished disk, permissions, a file-size limit) becomes one line
that names the path and the cause.
"""

import errno
import os
import shutil

import tensorflow as tf

from keras_vit import fileio
from trainers.errors import TrainingError, one_line

# errno values (and TensorFlow's wording of them) of a write that the disk, not the program, refused.
WRITE_ERRNOS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large (a file-size limit)",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or directory (the folder vanished)",
    errno.EIO: "input/output error (a failing disk)",
    errno.ENOTDIR: "not a directory (a file stands where a folder should be)",
}
_WRITE_WORDS = {
    "no space left": errno.ENOSPC,
    "quota exceeded": errno.EDQUOT,
    "file too large": errno.EFBIG,
    "read-only file system": errno.EROFS,
    "permission denied": errno.EACCES,
    "operation not permitted": errno.EPERM,
    "no such file or directory": errno.ENOENT,
    "input/output error": errno.EIO,
    "not a directory": errno.ENOTDIR,
}


def free_bytes(path):
    """Bytes free for this user on the disk of local `path` (its nearest existing parent); None
    for a remote path (gs://: no fixed size) or when it cannot be told."""
    if fileio.is_remote(path):
        return None
    path = os.path.abspath(os.fspath(path))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def checkpoint_bytes(prefix):
    """The bytes of the checkpoint `prefix` (its .index and .data-* files) as they take on disk."""
    total = 0
    for path in tf.io.gfile.glob(f"{prefix}.index") + tf.io.gfile.glob(f"{prefix}.data-*"):
        try:
            total += tf.io.gfile.stat(path).length
        except tf.errors.OpError:
            continue
    return total


def room_warning(directory, last_prefix):
    """A one-line warning when the disk of `directory` has less room than the checkpoint
    `last_prefix` took (the next save would need as much); None when it fits or cannot be told."""
    free = free_bytes(directory) if last_prefix else None
    if free is None:
        return None
    needed = checkpoint_bytes(last_prefix)
    if not needed or free >= needed:
        return None
    return (
        f"warning: {directory} has {megabytes(free)} free but the last checkpoint "
        f"({os.path.basename(last_prefix)}) took {megabytes(needed)}: the next save will likely fail "
        "and stop the run; free some space on that disk."
    )


def megabytes(count):
    """Bytes as people read them on a disk: kB below a megabyte, else MB or GB."""
    if count < 1e6:
        return f"{count / 1e3:.0f} kB"
    if count < 1e9:
        return f"{count / 1e6:.1f} MB"
    return f"{count / 1e9:.2f} GB"


def write_cause(error):
    """(errno, words) when `error` (OSError or a TensorFlow error) is a write the disk refused,
    else None."""
    number = getattr(error, "errno", None)
    if number in WRITE_ERRNOS:
        return number, WRITE_ERRNOS[number]
    text = str(getattr(error, "message", None) or error).lower()
    for words, number in _WRITE_WORDS.items():
        if words in text:
            return number, WRITE_ERRNOS[number]
    return None


def create_workdir(workdir):
    """Makes a run's workdir and its parents (an existing folder is fine): the run's first write.
    A folder this process cannot make (no permission, a read-only or full disk, a path that
    cannot hold folders) is one line that names it and the cause, where it was a traceback."""
    try:
        fileio.makedirs(workdir)
    except (OSError, tf.errors.OpError) as error:
        if isinstance(error, OSError) and error.strerror:
            reason = error.strerror.lower()  # the system's own words for a local path
        else:
            cause = write_cause(error)
            reason = cause[1] if cause else one_line(getattr(error, "message", None) or error)
        raise TrainingError(
            f"cannot create the workdir {workdir}: {reason}; give --workdir a folder this process "
            "can create and write to."
        ) from None


def write_error_path(error, default):
    """The path an OSError names, else `default`."""
    return getattr(error, "filename", None) or default
