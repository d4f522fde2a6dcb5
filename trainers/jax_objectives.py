"""The jax engine's masked patch prediction (--objective=masked_patch), for trainers/jax_loop.py.

The same objective as trainers/objectives.py: its loss and accuracy are trainers/numerics.py's
(keras.ops, shared by the engines), on JAX arrays inside the engine's compiled step. The interface
jax_loop.Trainer uses: `metric_name`, `trained_variables(model)`, `variables` (every Keras
variable of its own, so the step carries them as state and the checkpoints hold them) and
`per_example(images, labels, training)` -> (loss (b,), accuracy (b,)).

The labels' place holds the batch op mask_patches' draw (trainers/data/mask_patches.py), the
same numbers the tf engine's replicas get: drawn per (--seed, step, replica). The step sees the
global batch, replica after replica, so each replica's rows choose their replacement patches
among that replica's own micro-batch, as under the tf engine: both engines corrupt the same
patches from the same seed.
"""

from keras_vit import masked_patches
from trainers import numerics, objectives


class MaskedPatch:
    metric_name = objectives.MaskedPatch.metric_name
    train_metric = True

    def __init__(self, model, target, replicas):
        self.predictor = masked_patches.MaskedPatchPredictor(model, target)
        self.target = target
        self.replicas = int(replicas)

    # The same variables as the tf engine trains: the encoder, the mask embedding and the head.
    trained_variables = objectives.MaskedPatch.trained_variables

    @property
    def variables(self):
        return [*self.predictor.corruption.variables, *self.predictor.head.variables]

    def per_example(self, images, noise, training):
        """(loss (b,), accuracy (b,)), float32, of the batch corrupted as its draw `noise` says;
        the step holds every replica's rows, each choosing its replacements among its own."""
        objectives.check_draw(noise.shape[-1], images.shape, self.predictor.patch_size)
        return numerics.masked_patch_per_example(
            self.predictor, self.target, images, noise, training, replicas=self.replicas
        )
