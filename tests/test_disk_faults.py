"""The free-space check before a save and the one-line errors of writes the disk refuses
(in-process; the end-to-end runs are in tests/test_checkpoint_faults.py)."""

import errno
import os

import pytest
import tensorflow as tf

from trainers import disk_space, faults
from trainers.errors import TrainingError


def _checkpoint(folder, step, data_bytes):
    """A checkpoint's files of `data_bytes` (sparse: the size counts, no disk is used)."""
    prefix = os.path.join(folder, f"ckpt-{step}")
    with open(f"{prefix}.index", "wb") as f:
        f.write(b"x" * 100)
    with open(f"{prefix}.data-00000-of-00001", "wb") as f:
        f.truncate(data_bytes)
    return prefix


def test_a_save_that_will_not_fit_is_warned_about_in_one_line(tmp_path):
    free = disk_space.free_bytes(str(tmp_path))
    assert free and free > 0
    big = _checkpoint(str(tmp_path), 100, free + 10**9)
    warning = disk_space.room_warning(str(tmp_path), big)
    assert warning.startswith("warning: ") and "\n" not in warning
    assert str(tmp_path) in warning and "ckpt-100" in warning and "free" in warning
    small = _checkpoint(str(tmp_path), 200, 1000)
    assert disk_space.room_warning(str(tmp_path), small) is None
    assert disk_space.room_warning(str(tmp_path), None) is None  # the first save: nothing to compare


def test_free_space_of_a_folder_not_created_yet_is_its_disks():
    assert disk_space.free_bytes("/nonexistent/run/checkpoints") == disk_space.free_bytes("/")
    assert disk_space.free_bytes("gs://bucket/run") is None


@pytest.mark.parametrize(
    "error, words",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "no space left"),
        (OSError(errno.EROFS, "Read-only file system"), "read-only"),
        (tf.errors.ResourceExhaustedError(None, None, "/w/x; No space left on device"), "no space left"),
        (tf.errors.PermissionDeniedError(None, None, "/w/x; Permission denied"), "permission denied"),
        (tf.errors.UnknownError(None, None, "/w/x; File too large"), "file too large"),
    ],
)
def test_writes_the_disk_refused_are_recognised(error, words):
    assert words in disk_space.write_cause(error)[1]


def test_a_refused_write_in_the_workdir_names_the_file_not_its_temporary(tmp_path):
    workdir = str(tmp_path / "run")
    error = OSError(errno.EROFS, "Read-only file system", f"{workdir}/.tmp-0a1b2c3d-config.json")
    fault = faults.as_trainer_error(error, workdir=workdir, spec=None)
    assert isinstance(fault, TrainingError) and fault.exit_code == 1
    assert f"cannot write {workdir}/config.json: read-only file system." in str(fault)


def test_errors_that_are_no_write_into_the_workdir_are_left_alone(tmp_path):
    workdir = str(tmp_path / "run")
    elsewhere = tf.errors.NotFoundError(None, None, "/data/tfds/x.tfrecord; No such file or directory")
    assert faults.as_trainer_error(elsewhere, workdir=workdir, spec=None) is None
    bug = tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [2] vs. [3]")
    assert faults.as_trainer_error(bug, workdir=workdir, spec=None) is None


def test_a_full_disk_without_a_file_name_still_stops_with_one_line_naming_the_workdir(tmp_path):
    """zipfile (model.npz) reports ENOSPC with no file name."""
    workdir = str(tmp_path / "run")
    fault = faults.as_trainer_error(
        OSError(errno.ENOSPC, "No space left on device"), workdir=workdir, spec=None
    )
    assert isinstance(fault, TrainingError)
    assert str(fault).startswith(f"cannot write {workdir}: no space left on the device.")


@pytest.mark.parametrize(
    "error, words",
    [
        (PermissionError(errno.EACCES, "Permission denied", "/w/run"), "permission denied"),
        (
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/proc/run"),
            "no such file or directory",
        ),
        (tf.errors.PermissionDeniedError(None, None, "gs://b/run; Permission denied"), "permission denied"),
    ],
)
def test_a_workdir_that_cannot_be_created_is_one_line_naming_it(monkeypatch, error, words):
    """A run's first write: it was a traceback (the few-shot command's TensorBoard writer), or the
    mid-run line that speaks of checkpoints already written and of a folder that vanished."""

    def refuse(path):
        raise error

    monkeypatch.setattr(disk_space.fileio, "makedirs", refuse)
    with pytest.raises(TrainingError) as raised:
        disk_space.create_workdir("/w/run")
    assert str(raised.value) == (
        f"cannot create the workdir /w/run: {words}; give --workdir a folder this process can create "
        "and write to."
    )
    assert raised.value.exit_code == 1


def test_a_path_under_a_file_is_a_refused_write():
    assert disk_space.write_cause(NotADirectoryError(errno.ENOTDIR, "Not a directory", "/w/f/x"))
    error = tf.errors.FailedPreconditionError(None, None, "/w/f is not a directory")
    assert "not a directory" in disk_space.write_cause(error)[1]
