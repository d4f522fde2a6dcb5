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

from keras_vit import masked_patches

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


def global_norm(grads):
    """float32 scalar: the L2 norm of all the gradients together, the norm the clip bounds.

    Written as tf.linalg.global_norm computes it (each tensor's half sum of squares, one sum of
    those, times 2), which on TensorFlow gives its bits; on JAX the same expression gives the bits
    of optax.global_norm's running sum (halving and doubling are exact for squares above float32's
    subnormal range, and XLA sums the stacked per-tensor terms in order). So each engine's clipped
    steps are what they were before it was shared."""
    halves = ops.stack([ops.sum(ops.square(ops.cast(g, "float32")) * 0.5) for g in grads])
    return ops.sqrt(ops.sum(halves) * 2.0)


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


def masked_patch_per_example(predictor, target, images, noise, training, replicas=1):
    """(loss (b,), accuracy (b,)), float32, of masked patch prediction (--objective=masked_patch,
    keras_vit/masked_patches.py) on the batch corrupted as its draw `noise` (b, 2, N) says: row 0
    chooses the corrupted patches, row 1 the replacements, each replica's rows among its own
    (`replicas`: how many replicas' rows the batch holds, one after the other). Loss and accuracy
    of an image are means over its corrupted patches."""
    roles = masked_patches.corruption_plan(noise[:, 0])
    sources = replacement_sources(noise[:, 1], replicas)
    outputs = ops.cast(predictor(images, roles, sources, training=training), "float32")
    targets = predictor.targets(ops.cast(images, "float32"))
    per_patch_loss, per_patch_hit = masked_patch_per_patch(outputs, targets, target, predictor.channels)
    corrupted = ops.cast(roles != masked_patches.CLEAN, "float32")
    count = ops.sum(corrupted, axis=-1)
    return (
        ops.sum(per_patch_loss * corrupted, axis=-1) / count,
        ops.sum(per_patch_hit * corrupted, axis=-1) / count,
    )


def replacement_sources(noise, replicas=1):
    """Flat indices into the batch's patches of each replaced patch's replacement: each replica's
    rows (b / replicas of them, in order) take theirs from that replica's rows."""
    if replicas == 1:
        return masked_patches.replacement_sources(noise)
    rows, num_patches = noise.shape
    per_replica = rows // replicas
    parts = [
        masked_patches.replacement_sources(noise[r * per_replica : (r + 1) * per_replica])
        + r * per_replica * num_patches
        for r in range(replicas)
    ]
    return ops.concatenate(parts)


def masked_patch_per_patch(outputs, targets, target, channels):
    """Per-patch (loss, hit) (b, n): the cross-entropy and top-1 hit of the 512-colour class
    (mean_color; downsampled: averaged over the 16 cells), or for l2 the mean squared error of the
    pixels and whether the prediction's mean colour is the target's 3-bit colour class."""
    if target == "l2":
        loss = ops.mean(ops.square(outputs - targets), axis=-1)

        def mean_color(pixels):
            shape = ops.shape(pixels)
            per_channel = ops.reshape(pixels, (shape[0], shape[1], -1, channels))
            return masked_patches.color_classes(ops.mean(per_channel, axis=2))

        return loss, ops.cast(ops.equal(mean_color(outputs), mean_color(targets)), "float32")
    if target == "downsampled":
        shape = ops.shape(outputs)
        outputs = ops.reshape(outputs, (shape[0], shape[1], targets.shape[-1], -1))
    loss = keras.losses.sparse_categorical_crossentropy(targets, outputs, from_logits=True)
    hits = ops.cast(ops.equal(ops.cast(ops.argmax(outputs, axis=-1), "int32"), targets), "float32")
    if target == "downsampled":
        loss, hits = ops.mean(loss, axis=-1), ops.mean(hits, axis=-1)
    return loss, hits
