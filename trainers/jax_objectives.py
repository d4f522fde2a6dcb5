"""The jax engine's masked patch prediction (--objective=masked_patch), for trainers/jax_loop.py.

The same objective as trainers/objectives.py (the corruption, targets, losses and accuracies of
keras_vit/masked_patches.py), on JAX arrays inside the engine's compiled step. The interface
jax_loop.Trainer uses: `metric_name`, `trained_variables(model)`, `variables` (every Keras
variable of its own, so the step carries them as state and the checkpoints hold them),
`per_example(images, step, training)` -> (loss (b,), accuracy (b,)) and `eval_draw`.

Which patches are corrupted, and by which others the replaced ones are replaced, is a pure
function of (--seed, step) through jax.random (fold_in): a resumed run corrupts the same patches
as an unbroken one, and the micro-batches of an accumulated step share the step's draw. The draw
covers the global batch (the step is one program over every device), where the tf engine draws
per replica, so the two engines corrupt different patches from the same seed. Evaluation uses one
fixed draw, `eval_draw`.
"""

import jax
import jax.numpy as jnp

from keras_vit import masked_patches
from trainers import objectives


class MaskedPatch:
    metric_name = objectives.MaskedPatch.metric_name
    eval_draw = objectives.EVAL_DRAW

    def __init__(self, model, target, seed):
        self.predictor = masked_patches.MaskedPatchPredictor(model, target)
        self.target = target
        self.seed = int(seed)

    # The same variables as the tf engine trains: the encoder, the mask embedding and the head.
    trained_variables = objectives.MaskedPatch.trained_variables

    @property
    def variables(self):
        return [*self.predictor.corruption.variables, *self.predictor.head.variables]

    def draw(self, batch, num_patches, step):
        """(roles, replacement sources), int32 (batch, num_patches): the corruption of `step`."""
        key = jax.random.fold_in(jax.random.key(self.seed), jnp.asarray(step).astype(jnp.uint32))
        noise = jax.random.uniform(key, (2, batch, num_patches))
        return masked_patches.corruption_plan(noise[0]), masked_patches.replacement_sources(noise[1])

    def per_example(self, images, step, training):
        """(loss (b,), accuracy (b,)), float32, of the batch corrupted by the draw of `step`."""
        patch = self.predictor.patch_size
        num_patches = (images.shape[1] // patch) * (images.shape[2] // patch)
        roles, sources = self.draw(images.shape[0], num_patches, step)
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
