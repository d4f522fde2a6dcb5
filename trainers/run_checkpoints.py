"""A run's checkpoints: restore on start, save at boundaries, on preemption and at the end.

`WORKDIR/checkpoints/ckpt-STEP` (tf.train.CheckpointManager) holds the model, the optimizer,
the step, the dropout random-number states and the last train loss. Under MultiWorkerMirrored
every worker must take part in a save, but only the chief's copy is kept: the others write into
a temporary folder they delete.
"""

import tensorflow as tf

from keras_vit import fileio

CHECKPOINT_DIR = "checkpoints"


class RunCheckpoints:
    def __init__(self, trainer, workdir, *, chief, task_id=0, keep=3):
        self.trainer = trainer
        self.workdir = workdir
        self.chief = chief
        self.checkpoint = tf.train.Checkpoint(
            model=trainer.model,
            optimizer=trainer.optimizer,
            step=trainer.step,
            last_loss=trainer.last_loss,
            rng=trainer.rng_state,
        )
        directory = fileio.join(workdir, CHECKPOINT_DIR)
        if not chief:
            directory = fileio.join(workdir, f".worker_{task_id}_tmp", CHECKPOINT_DIR)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=keep)
        self.saved_step = None

    def restore(self):
        """Restores the newest checkpoint of the workdir, if any; returns its path or None."""
        latest = tf.train.latest_checkpoint(fileio.join(self.workdir, CHECKPOINT_DIR))
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            self.saved_step = self.step
        return latest

    @property
    def step(self):
        return int(self.trainer.step.numpy())

    @property
    def latest(self):
        return self.manager.latest_checkpoint

    def save(self):
        step = self.step
        self.manager.save(checkpoint_number=step)
        self.saved_step = step
        if not self.chief:
            fileio.rmtree(fileio.dirname(self.manager.directory))

    def save_if_new(self):
        """The end of a run: a checkpoint of the final step unless one was just written."""
        if self.saved_step != self.step:
            self.save()
