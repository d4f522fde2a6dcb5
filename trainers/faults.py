"""The faults a long run meets after it has started, as one-line errors.

A record of the dataset that cannot be read surfaces from inside the compiled loop as a bare
`DataLossError` ("truncated record at 297353") that names no file; a write the disk refuses
surfaces from whichever writer hit it. `as_trainer_error` turns both into the trainers' one-line
errors (trainers/errors.py) and leaves every other exception alone: those are bugs, and their
traceback is what a bug report needs.
"""

import errno

import tensorflow as tf

from keras_vit import fileio
from trainers import disk_space
from trainers.data.tfds_source import damaged_message
from trainers.errors import DatasetError, TrainingError, one_line


def as_trainer_error(error, *, workdir, spec):
    """The TrainerError that `error`, raised while a run trains, stands for; None if it is not a
    fault of the data or the disk."""
    if isinstance(error, tf.errors.DataLossError):
        return _damaged_data(error, spec)
    cause = disk_space.write_cause(error)
    if cause is None or not isinstance(error, (OSError, tf.errors.OpError)):
        return None
    text = str(getattr(error, "message", None) or error)
    path = getattr(error, "filename", None) or ""
    disk_wide = cause[0] in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
    if not disk_wide and workdir not in text and workdir not in str(path):
        return None  # not a write into the workdir (e.g. a data file that vanished)
    target = fileio.written_path(path) or workdir
    return TrainingError(
        f"cannot write {target}: {cause[1]}. The checkpoints already written are intact; free space "
        "or fix the folder, then rerun the same command to resume."
    )


def _damaged_data(error, spec):
    find = getattr(getattr(spec, "reader", None), "damaged_files", None)
    damaged = find() if find else []
    if damaged:
        return DatasetError(damaged_message(spec.name, damaged))
    detail = one_line(getattr(error, "message", None) or error).split("}} ")[-1].split(" [Op:")[0]
    return DatasetError(
        f"{spec.name}: a record cannot be read ({detail}). Prepare the dataset again "
        "(python -m trainers.prepare) or copy its files back from a good copy."
    )
