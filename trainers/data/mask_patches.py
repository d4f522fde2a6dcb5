"""mask_patches(patch_size): the random draw of masked patch prediction (--objective=masked_patch).

A batch op in a file of its own. It leaves the images as they are and puts in the labels' place
the uniform numbers float32 (b, 2, N) that choose, for each image's N patches, which are corrupted
(row 0, ranked by keras_vit.masked_patches.corruption_plan) and by which other patch of its
micro-batch the replaced ones are replaced (row 1, replacement_sources). The corruption itself
acts on patch *embeddings* inside the model (a learned mask embedding), so it stays in the step;
what is drawn here is everything random about it. Masked patch prediction reads no labels.

The draw of an image is a pure function of (run seed, global step, replica), so a resumed run,
and either engine, corrupt the same patches; the micro-batches of an accumulated step share their
step's draw (each gets the same numbers), and evaluation batches get one fixed draw
(`EVAL_DRAW`), so successive evaluations compare like with like. In a pp string it is the last
op of training: 'decode|inception_crop(0.05)|resize(224)|flip_lr|value_range(-1,1)|mask_patches(16)';
evaluation applies it too (with the fixed draw) without being told.
"""

import numbers

import tensorflow as tf

from trainers.data.ops import register

# The step number of evaluation's fixed draw (training steps count from 0).
EVAL_DRAW = -1


def draw(seed, step, replica, batch, num_patches):
    """float32 (2, batch, num_patches) uniform numbers of (seed, step, replica): stateless, so the
    same on every host and in a resumed run.

    The dtypes are part of the draw (stateless_fold_in's key takes the folded value's dtype):
    `step` is folded in with its own dtype (the op passes training steps as int64, the step
    counter's, and the fixed evaluation step as int32), the replica as int32 (tf.distribute's
    replica id); another dtype would draw other patches.
    """
    key = tf.random.experimental.stateless_fold_in(tf.constant([seed, 0], tf.int64), step)
    key = tf.random.experimental.stateless_fold_in(key, tf.cast(replica, tf.int32))
    return tf.random.stateless_uniform(tf.stack([2, batch, num_patches]), key)


@register("mask_patches", batch=True, evaluation=True)
def mask_patches(patch_size):
    if isinstance(patch_size, bool) or not isinstance(patch_size, numbers.Integral) or patch_size < 1:
        raise ValueError(f"patch_size must be an integer >= 1 (the model's), got {patch_size!r}")
    patch_size = int(patch_size)

    def drawn(images, labels, context):
        height, width = images.shape[1], images.shape[2]
        if height % patch_size or width % patch_size:
            raise ValueError(f"images of {height}x{width} px do not split into {patch_size} px patches")
        num_patches = (height // patch_size) * (width // patch_size)
        rows = tf.shape(images)[0]
        if context.training:
            step = tf.cast(context.step, tf.int64)
        else:
            step = tf.constant(EVAL_DRAW, tf.int32)
        # One micro-batch's draw, repeated for each micro-batch of the replica's batch.
        noise = draw(context.seed, step, context.replica, rows // context.micro_batches, num_patches)
        noise = tf.tile(tf.transpose(noise, [1, 0, 2]), [context.micro_batches, 1, 1])
        return images, noise

    return drawn
