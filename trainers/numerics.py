"""The step's numerics, written once in keras.ops, so every engine computes the same function.

Losses: "softmax" is the cross-entropy of the softmax against the class index (int labels (b,)),
or against soft targets (float labels (b, classes) summing to 1: Mixup's, trainers/data/augreg.py).
"sigmoid" is big_vision's sigmoid_xent for multi-label data: per example, the sum over classes of
the binary cross-entropy of sigmoid(logit) against a multi-hot target (float labels (b, classes));
int labels become one-hot targets. Evaluation reports the top-1 hit rate: "accuracy" under softmax,
"prec@1" under sigmoid (whether the top-scoring class is one of the image's labels; the same number
as accuracy when every image has one label).

Each function is the expression the engines computed before it was shared, so a run's numbers
are unchanged bit for bit on each engine: on TensorFlow, the sigmoid loss below is the formula of
tf.nn.sigmoid_cross_entropy_with_logits, operation for operation.
"""

import keras
from keras import ops

# --loss: what the step minimises (trainers/fields.py offers these as the flag's values).
LOSSES = ("softmax", "sigmoid")
METRIC_NAMES = {"softmax": "accuracy", "sigmoid": "prec@1"}


def per_example_loss(loss, labels, logits):
    """float32 (b,): `loss` ("softmax" or "sigmoid") of each example, computed from logits in float32."""
    logits = ops.cast(logits, "float32")
    multi_hot = len(labels.shape) == 2
    if loss == "softmax":
        if multi_hot:
            # Soft targets (b, classes), e.g. Mixup's: -sum_c target_c * log_softmax(logits)_c.
            # A multi-label dataset is refused under softmax before training (trainers/training.py).
            targets = ops.cast(labels, "float32")
            return keras.losses.categorical_crossentropy(targets, logits, from_logits=True)
        return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    if loss != "sigmoid":
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}.")
    targets = ops.cast(labels, "float32") if multi_hot else ops.one_hot(labels, logits.shape[-1])
    # max(x, 0) - x * z + log(1 + exp(-|x|)): finite for logits of any size.
    per_class = (ops.maximum(logits, 0.0) - logits * targets) + ops.log1p(ops.exp(-ops.abs(logits)))
    return ops.sum(per_class, axis=-1)


def top1_hits(labels, logits):
    """float32 (b,): 1 where the top-scoring class is the label (int (b,)) or one of them (multi-hot)."""
    top = ops.cast(ops.argmax(logits, axis=-1), "int32")
    if len(labels.shape) == 2:
        chosen = ops.take_along_axis(labels, ops.expand_dims(top, -1), axis=-1)[:, 0]
        return ops.cast(chosen > 0, "float32")
    return ops.cast(ops.equal(top, ops.cast(labels, "int32")), "float32")


def clip_factor(norm, clip):
    """What the gradients are multiplied by to clip their global `norm` at `clip` (1 below it):
    tf.clip_by_global_norm's factor."""
    return clip / ops.maximum(norm, clip)


def micro_batches(x, accum_steps, replicas=1):
    """(accum_steps, rows / accum_steps, ...) from a batch (rows, ...) of `replicas` replicas'
    rows, one after the other: micro-batch i holds the i-th slice of every replica's rows, as each
    replica splitting its own rows would."""
    shape = ops.shape(x)  # a traced dimension where the batch's is not known ahead (TensorFlow)
    per_micro = shape[0] // (replicas * accum_steps)
    x = ops.reshape(x, (replicas, accum_steps, per_micro, *shape[1:]))
    x = ops.swapaxes(x, 0, 1)
    return ops.reshape(x, (accum_steps, replicas * per_micro, *shape[1:]))
