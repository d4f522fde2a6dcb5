"""A run's checkpoints: restore on start, save at boundaries, on preemption and at the end.

`WORKDIR/checkpoints/ckpt-STEP` (tf.train.CheckpointManager) holds what the engine's trainer
names in `checkpoint_objects()`: the model, the optimizer, the step, the dropout random-number
states and the last train loss (the jax engine: host copies of its device state, taken by
`before_save()` and put back by `after_restore()`). Under MultiWorkerMirrored
every worker must take part in a save, but only the chief's copy is kept: the others write into
a temporary folder they delete. Several JAX processes do the same (each saves its own copy of the
replicated state, with no collective, and only process 0's is kept), so both engines' workers
save and stop at the same steps.

The faults of long runs:

* A checkpoint that cannot be read (truncated by a failing disk or a copy cut short, bit rot) is
  reported in one line and moved to `checkpoints/unreadable/` (never deleted), and the run resumes
  from the newest one that reads. With none readable the run stops with one line (exit code 2) and
  leaves them where they are.
* A save that fails (no space, a read-only disk, permissions) stops the run with one line (exit
  code 1) after removing what it had written, so the previous checkpoint stays the latest and the
  folder holds no partial files; rerunning once there is room resumes from it. Before each save the
  free space is compared with the size of the last checkpoint, with a warning when it will not fit.
* A save killed midway (its `ckpt-N_temp` folder still there, perhaps beside a `ckpt-N.index`
  cut short by a kill while TensorFlow merged the parts) is removed on the next start: the run
  resumes from the checkpoint before it.
"""

import os
import re
import sys
import threading

import tensorflow as tf

from keras_vit import fileio
from trainers import disk_space
from trainers.errors import TrainingError, UsageError, first_line, one_line

CHECKPOINT_DIR = "checkpoints"
# Where unreadable checkpoints are moved, inside the checkpoint folder.
UNREADABLE_DIR = "unreadable"
_STATE_FILE = "checkpoint"
_PREFIX = re.compile(r"^ckpt-(\d+)$")


class RunCheckpoints:
    def __init__(self, trainer, workdir, *, chief, task_id=0, keep=3):
        self.trainer = trainer
        self.workdir = workdir
        self.chief = chief
        self.keep = keep
        # What the engine's trainer keeps (trainers/loop.py, trainers/jax_loop.py).
        self.checkpoint = tf.train.Checkpoint(**trainer.checkpoint_objects())
        # The chief's folder: where every worker restores from.
        self.directory = fileio.join(workdir, CHECKPOINT_DIR)
        self.save_directory = self.directory
        if not chief:
            self.save_directory = fileio.join(workdir, f".worker_{task_id}_tmp", CHECKPOINT_DIR)
        self.manager = self._new_manager()
        self.saved_step = None

    def _new_manager(self):
        return tf.train.CheckpointManager(self.checkpoint, self.save_directory, max_to_keep=self.keep)

    def restore(self):
        """Restores the newest readable checkpoint of the workdir, if any; returns its path or None.

        Unreadable newer ones are reported and (by the chief) moved to checkpoints/unreadable/.
        Raises UsageError when checkpoints exist and none of them can be read.
        """
        if self.chief:
            _remove_interrupted_saves(self.directory)
        unreadable = []
        for prefix in find_checkpoints(self.directory):
            try:
                self.checkpoint.restore(prefix).assert_existing_objects_matched()
                self.trainer.after_restore()
            except Exception as err:
                reason = read_error(prefix)
                if reason is None:
                    # It reads, but holds another model or optimizer (--allow_config_change
                    # with a change of either): nothing to fall back to.
                    raise UsageError(
                        f"{prefix} does not fit this run's model or optimizer ({first_line(err)}): a "
                        "checkpoint holds the state of the settings it was saved with; rerun with "
                        "those (the workdir's config.json), or use another --workdir"
                    ) from None
                unreadable.append((prefix, reason))
                print(
                    f"checkpoint {prefix} cannot be read ({reason}); "
                    + (
                        f"moving it to {fileio.join(self.directory, UNREADABLE_DIR)} and "
                        if self.chief
                        else ""
                    )
                    + "trying the previous one.",
                    flush=True,
                )
                continue
            if unreadable and self.chief:
                self._move_aside([p for p, _ in unreadable])
            self.saved_step = self.step
            return prefix
        if unreadable:
            found = "; ".join(f"{os.path.basename(p)}: {reason}" for p, reason in unreadable)
            raise UsageError(
                f"no readable checkpoint in {self.directory}: found {len(unreadable)}, none can be read "
                f"({found}); they are left in place. Put back a good copy of the folder, or move it "
                "away to start this run again from step 0."
            )
        return None

    def _move_aside(self, prefixes):
        """Moves the files of `prefixes` into checkpoints/unreadable/ and drops them from the
        checkpoint state, so the manager keeps (and later rotates) only readable ones."""
        aside = fileio.join(self.directory, UNREADABLE_DIR)
        fileio.makedirs(aside)
        for prefix in prefixes:
            for path in _checkpoint_files(prefix):
                target = fileio.join(aside, os.path.basename(path))
                number = 1
                while fileio.exists(target):  # an earlier run may have moved one of that name
                    target = fileio.join(aside, f"{os.path.basename(path)}.{number}")
                    number += 1
                fileio.replace(path, target)
        _write_state(self.directory)
        self.manager = self._new_manager()

    @property
    def step(self):
        return int(self.trainer.step.numpy())

    @property
    def latest(self):
        return self.manager.latest_checkpoint

    def save(self):
        with _SAVING:
            self._save()

    def _save(self):
        step = self.step
        directory = self.save_directory
        if self.chief:
            warning = disk_space.room_warning(directory, self.manager.latest_checkpoint)
            if warning:
                print(warning, file=sys.stderr, flush=True)
        before = _entries(directory)
        previous = self.manager.latest_checkpoint
        try:
            self.trainer.before_save()
            path = self.manager.save(checkpoint_number=step)
            if not tf.io.gfile.exists(f"{path}.index"):
                raise OSError(f"{path}.index is missing after the save")
            tf.compat.v1.train.NewCheckpointReader(path)  # the index must read back
        except Exception as error:
            cause = disk_space.write_cause(error)
            if cause is None and not isinstance(error, (OSError, tf.errors.OpError)):
                raise
            self._undo_save(directory, before)
            where = disk_space.write_error_path(error, fileio.join(directory, f"ckpt-{step}"))
            raise TrainingError(
                f"cannot write the checkpoint of step {step} to {where}: "
                f"{cause[1] if cause else one_line(getattr(error, 'message', None) or error)}. "
                f"Its partial files were removed; the latest checkpoint is "
                f"{previous or 'none'} and is intact. Free space or fix the folder, then rerun the "
                "same command to resume."
            ) from None
        self.saved_step = step
        if not self.chief:
            fileio.rmtree(fileio.dirname(self.manager.directory))

    def _undo_save(self, directory, before):
        """After a failed save: deletes whatever it created and lists the checkpoints left in the
        state file again, so the folder is as it was before the save."""
        for name in _entries(directory) - before:
            _remove_quietly(fileio.join(directory, name))
        try:
            _write_state(directory)
        except (OSError, tf.errors.OpError):
            pass  # no room even for the state file: restore() lists the folder, not only the state
        self.manager = self._new_manager()

    def save_if_new(self):
        """The end of a run: a checkpoint of the final step unless one was just written."""
        if self.saved_step != self.step:
            self.save()


# Held while this process writes a checkpoint: a process that must end at once
# (trainers/peer_watch.py) waits for the save under way, so that it leaves none half-written.
_SAVING = threading.Lock()


def newest_checkpoint(workdir, wait_s=120):
    """The newest checkpoint of `workdir` once no save of this process is under way (waiting up to
    `wait_s`); no save starts after it: the process is about to end."""
    _SAVING.acquire(timeout=wait_s)
    found = find_checkpoints(fileio.join(workdir, CHECKPOINT_DIR))
    return found[0] if found else None


def find_checkpoints(directory):
    """The checkpoint prefixes in `directory` (those with an index file), newest first.

    Found by listing, not only through the state file, so a lost or stale state file does not hide
    the checkpoints beside it.
    """
    found = []
    for path in tf.io.gfile.glob(fileio.join(directory, "ckpt-*.index")):
        prefix = path[: -len(".index")]
        if _PREFIX.match(os.path.basename(prefix)):
            found.append(prefix)
    return sorted(found, key=_step_of, reverse=True)


def read_error(prefix):
    """Why the checkpoint `prefix` cannot be read (one line), or None when every tensor reads.

    Reads the whole checkpoint, checksums included: only called after a restore failed.
    """
    try:
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as error:  # every way a file can fail to read: IndexError, DataLossError, ...
        return one_line(getattr(error, "message", None) or error) or type(error).__name__
    return None


def _write_state(directory):
    """Rewrites the state file to list the checkpoints in `directory`, newest last, by their
    relative names (as the manager writes them, so a copied workdir stays valid)."""
    prefixes = sorted(find_checkpoints(directory), key=_step_of)
    if not prefixes:
        return
    names = [os.path.basename(p) for p in prefixes]
    # The manager rotates only the checkpoints that have a timestamp: the index files' times.
    times = [tf.io.gfile.stat(f"{p}.index").mtime_nsec / 1e9 for p in prefixes]
    # The text form of TensorFlow's CheckpointState proto, as the manager writes it.
    lines = [f'model_checkpoint_path: "{names[-1]}"']
    lines += [f'all_model_checkpoint_paths: "{name}"' for name in names]
    lines += [f"all_model_checkpoint_timestamps: {t!r}" for t in times]
    fileio.write_atomic(fileio.join(directory, _STATE_FILE), "\n".join(lines) + "\n")


def _step_of(prefix):
    return int(_PREFIX.match(os.path.basename(prefix)).group(1))


def _checkpoint_files(prefix):
    return tf.io.gfile.glob(f"{prefix}.index") + tf.io.gfile.glob(f"{prefix}.data-*")


def _entries(directory):
    try:
        return set(fileio.listdir(directory))
    except OSError:
        return set()


def _remove_interrupted_saves(directory):
    """Deletes the `ckpt-N_temp` folders and state-file temporaries that a save killed midway
    leaves behind; they are never a checkpoint.

    With its `ckpt-N_temp` folder still there, the save of step N had not finished: TensorFlow
    merges the folder's parts into `ckpt-N.index` and `ckpt-N.data-*` under their final names and
    deletes the folder only then, so a kill during the merge leaves a `ckpt-N.index` cut short.
    Those files go too: they are an unfinished save, not a checkpoint that rotted."""
    for name in _entries(directory):
        if name.startswith("ckpt-") and name.endswith("_temp"):
            prefix = fileio.join(directory, name[: -len("_temp")])
            for path in _checkpoint_files(prefix):
                _remove_quietly(path)
            _remove_quietly(fileio.join(directory, name))
        elif name.startswith(f"{_STATE_FILE}.tmp") or name.startswith(fileio.TEMP_PREFIX):
            _remove_quietly(fileio.join(directory, name))


def _remove_quietly(path):
    """Deletes a file or folder; one already gone (or not removable) is left to the next start."""
    try:
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)
    except tf.errors.OpError:
        pass
