"""The jax engine's masked patch prediction (--objective=masked_patch), for trainers/jax_loop.py.

The same objective as trainers/objectives.py (the corruption, targets, losses and accuracies of
keras_vit/masked_patches.py), on JAX arrays inside the engine's compiled step. The interface
jax_loop.Trainer uses: `metric_name`, `trained_variables(model)`, `variables` (every Keras
variable of its own, so the step carries them as state and the checkpoints hold them) and
`per_example(images, labels, training)` -> (loss (b,), accuracy (b,)).

The labels' place holds the batch op mask_patches' draw (trainers/data/mask_patches.py), the
same numbers the tf engine's replicas get: drawn per (--seed, step, replica). The step sees the
global batch, replica after replica, so each replica's rows choose their replacement patches
among that replica's own micro-batch, as under the tf engine: both engines corrupt the same
patches from the same seed.
"""

import jax
import jax.numpy as jnp

from keras_vit import masked_patches
from trainers import objectives


class MaskedPatch:
    metric_name = objectives.MaskedPatch.metric_name

    def __init__(self, model, target, replicas):
        self.predictor = masked_patches.MaskedPatchPredictor(model, target)
        self.target = target
        self.replicas = int(replicas)

    # The same variables as the tf engine trains: the encoder, the mask embedding and the head.
    trained_variables = objectives.MaskedPatch.trained_variables

    @property
    def variables(self):
        return [*self.predictor.corruption.variables, *self.predictor.head.variables]

    def _sources(self, noise):
        """Flat indices into the batch's patches: each replica's rows (b / replicas of them, in
        order) take their replacements from that replica's rows, as each tf replica does."""
        rows, num_patches = noise.shape
        per_replica = rows // self.replicas
        parts = [
            masked_patches.replacement_sources(noise[r * per_replica : (r + 1) * per_replica])
            + r * per_replica * num_patches
            for r in range(self.replicas)
        ]
        return jnp.concatenate(parts)

    def per_example(self, images, noise, training):
        """(loss (b,), accuracy (b,)), float32, of the batch corrupted as its draw `noise` says."""
        objectives.check_draw(noise.shape[-1], images.shape, self.predictor.patch_size)
        roles = masked_patches.corruption_plan(noise[:, 0])
        sources = self._sources(noise[:, 1])
        outputs = self.predictor(images, roles, sources, training=training).astype(jnp.float32)
        targets = self.predictor.targets(images.astype(jnp.float32))
        per_patch_loss, per_patch_hit = self._per_patch(outputs, targets)
        corrupted = (roles != masked_patches.CLEAN).astype(jnp.float32)
        count = jnp.sum(corrupted, axis=-1)
        return (
            jnp.sum(per_patch_loss * corrupted, axis=-1) / count,
            jnp.sum(per_patch_hit * corrupted, axis=-1) / count,
        )

    def _per_patch(self, outputs, targets):
        """Per-patch (loss, hit) (b, n), as objectives.MaskedPatch._per_patch."""
        if self.target == "l2":
            loss = jnp.mean(jnp.square(outputs - targets), axis=-1)
            channels = self.predictor.channels
            same = _mean_color(outputs, channels) == _mean_color(targets, channels)
            return loss, same.astype(jnp.float32)
        if self.target == "downsampled":
            outputs = outputs.reshape(*outputs.shape[:2], targets.shape[-1], -1)
        log_probs = jax.nn.log_softmax(outputs, axis=-1)
        loss = -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
        hits = (jnp.argmax(outputs, axis=-1).astype(jnp.int32) == targets).astype(jnp.float32)
        if self.target == "downsampled":
            loss, hits = jnp.mean(loss, axis=-1), jnp.mean(hits, axis=-1)
        return loss, hits


def _mean_color(pixels, channels):
    """The 3-bit colour class of each patch's mean colour, from its flattened pixels (b, n, p*p*c)."""
    per_channel = pixels.reshape(*pixels.shape[:2], -1, channels)
    return masked_patches.color_classes(jnp.mean(per_channel, axis=2))
