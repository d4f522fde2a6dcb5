"""What a pre-training run optimises besides classification: masked patch prediction.

An objective is what a Trainer (trainers/loop.py, trainers/jax_loop.py) optimises: `metric_name`
(its evaluation metric), `train_metric` (whether the console and TensorBoard show its train-side
metric, which the Trainer keeps), `variables` (its own Keras variables), `trained_variables(model)`
(what the optimizer updates), `checkpoint_objects()` (what the run's checkpoints must hold
besides the model) and `per_example(images, labels, training)` -> (loss (b,), accuracy (b,)).
They are written in keras.ops, so one class serves every engine.

Classification (--objective=classification) is --loss's loss of the labels and the top-1 hits.

MaskedPatch (--objective=masked_patch, keras_vit/masked_patches.py): what comes in the labels'
place is the batch op mask_patches' draw (trainers/data/mask_patches.py), uniform numbers
(b, 2, N) of (--seed, step, replica) that choose which patches are corrupted and by which other
patch of the micro-batch the replaced ones are replaced; a resumed run, an unbroken one and either
engine corrupt the same patches. Evaluation batches carry one fixed draw. Loss and accuracy of an
image are means over its corrupted patches (every image has the same number of them): cross-entropy
and top-1 hits of the 512-colour class for mean_color; the same averaged over the 16 cells for
downsampled; for l2 the mean squared error over the patch's pixel values (in [-1, 1]), and as
accuracy whether the prediction's mean colour falls in the target's 3-bit colour class.
"""

from keras import ops

from keras_vit import masked_patches
from trainers import numerics

# --objective's values: the Trainer's own classification, or an objective of this file.
OBJECTIVES = ("classification", "masked_patch")
# The batch op that draws each batch's corruption for masked patch prediction.
DRAW_OP = "mask_patches"


class Classification:
    """Classification of the labels (--objective=classification), the objective of a Trainer given
    no other: --loss's per-example loss and the top-1 hits (trainers/numerics.py, shared by the
    engines), of the model's own variables. It has no variables and no train-side metric."""

    train_metric = False  # the console and TensorBoard show the training loss only
    variables = ()

    def __init__(self, model, loss):
        self.model, self.loss = model, loss
        self.metric_name = numerics.METRIC_NAMES[loss]

    def trained_variables(self, model):
        return model.trainable_variables

    def checkpoint_objects(self):
        return {}

    def per_example(self, images, labels, training):
        """(loss (b,), top-1 hits (b,)), float32, of the model's logits for the labels."""
        logits = ops.cast(self.model(images, training=training), "float32")
        return numerics.per_example_loss(self.loss, labels, logits), numerics.top1_hits(labels, logits)


class MaskedPatch:
    metric_name = "masked_patch_accuracy"
    train_metric = True  # its train accuracy, logged beside the loss

    def __init__(self, model, target, replicas=1):
        """Build it inside the strategy's scope, like the model (its variables are trained).
        `replicas`: how many replicas' rows one call of per_example sees, one after the other (a
        tf replica runs the step on its own rows: 1; the jax engine's step holds them all)."""
        self.predictor = masked_patches.MaskedPatchPredictor(model, target)
        self.target = target
        self.replicas = int(replicas)

    @property
    def variables(self):
        """Its own: the mask embedding and the prediction head (the step carries them as state)."""
        return [*self.predictor.corruption.variables, *self.predictor.head.variables]

    def trained_variables(self, model):
        """The encoder's variables (not the model's classification head or pre-logits, which this
        objective does not use), then the mask embedding and the prediction head."""
        unused = {id(v) for name in ("head", "pre_logits") for v in _layer_weights(model, name)}
        encoder = [v for v in model.trainable_variables if id(v) not in unused]
        return [*encoder, *self.predictor.trainable_variables]

    def checkpoint_objects(self):
        return {"patch_corruption": self.predictor.corruption, "masked_patch_head": self.predictor.head}

    def per_example(self, images, noise, training):
        """(loss (b,), accuracy (b,)), float32, of the batch corrupted as its draw `noise`
        (b, 2, N) says (row 0 chooses the corrupted patches, row 1 the replacements, each
        replica's rows among that replica's own)."""
        images = ops.convert_to_tensor(images)
        check_draw(noise.shape[-1], images.shape, self.predictor.patch_size)
        return numerics.masked_patch_per_example(
            self.predictor, self.target, images, noise, training, replicas=self.replicas
        )


def check_draw(drawn_patches, image_shape, patch_size):
    """ValueError unless the batch's draw covers the model's patches (mask_patches' patch size)."""
    num_patches = (image_shape[1] // patch_size) * (image_shape[2] // patch_size)
    if drawn_patches != num_patches:
        raise ValueError(
            f"the batches' masked-patch draw covers {drawn_patches} patches, but the model cuts "
            f"{image_shape[1]}x{image_shape[2]} px images into {num_patches}: end the training ops "
            f"with {DRAW_OP}({patch_size}), the model's patch size"
        )


def _layer_weights(model, name):
    return next((layer.weights for layer in model.layers if layer.name == name), [])


def make_objective(name, target, model, replicas=1):
    """The objective `name` (--objective) for `model`, or None for classification (the Trainer's
    own); `replicas` as MaskedPatch takes it."""
    if name == "classification":
        return None
    if name == "masked_patch":
        return MaskedPatch(model, target, replicas)
    raise ValueError(f"unknown objective {name!r}")
