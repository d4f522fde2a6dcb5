"""Attention of each part of the query rows against all the keys, in operations TensorFlow
runs on one thread each, for inference in parts of the rows (keras_vit/row_parts.py).

Each query row's attention needs every key and value but no other query, so each part of the
rows can attend on its own while the other part does the same on the other core. Written with
Keras' attention (two einsums and a softmax over all the heads), the parts ran slower than one
attention of the joined rows: TensorFlow gives a batched product and oneDNN's softmax every
thread of its pool, so the two parts' attentions took turns at both cores. Here each example
and head is a pair of 2-D matrix products, which TensorFlow runs on one thread where the
operands fit in a core's L2 cache (as `row_parts` relies on for the projections), and the
softmax is written out in float32 (a maximum, an exponential, a sum and a division), which
TensorFlow's element-wise kernels run in place at this size. The arithmetic is Keras':
products in the compute dtype, the logits cast to float32 and scaled there, the probabilities
cast back before the product with the values.

Each example and head is a dozen operations, so the executor's cost per operation grows with
the batch: `applies` keeps the joined attention beyond MAX_PAIRS of them.
"""

# The most (example, head) pairs a part attends in this way. ViT-Ti/16 (3 heads) in bfloat16 on
# the 2-core EPYC, in turns in one process against the joined attention: 1.19x at batch 1, 1.09x
# at 2, 1.07x at 3, 1.06x and 1.10x at 4 (12 pairs), 0.86x and 0.99x at 5, 0.89x to 0.93x at 6.
MAX_PAIRS = 12


def applies(query):
    """Whether a part's queries (B, Tq, heads, d) attend on their own (`attend`)."""
    batch, _, heads, _ = query.shape
    return batch * heads <= MAX_PAIRS


def attend(queries, key, value):
    """softmax(Q K^T / sqrt(d)) V for each part's queries [(B, Tq_i, heads, d)] of some of the
    rows against the keys and values (B, T, heads, d) of all of them; one (B, Tq_i, heads, d)
    context per part, as the queries came. TensorFlow backend only (in graphs traced by
    keras_vit.row_parts' rule)."""
    import tensorflow as tf

    batch, _, heads, depth = key.shape
    scale = 1.0 / float(depth) ** 0.5
    # Per part, per example: the heads' contexts.
    contexts = [[[] for _ in range(batch)] for _ in queries]
    for b in range(batch):
        for h in range(heads):
            # Sliced once for all the parts, so that no copy is left for Grappler to merge (the
            # time of ViT-Ti/16 at batch 1 measured level with a slice per part).
            key_bh, value_bh = key[b, :, h], value[b, :, h]
            for part, query in enumerate(queries):
                logits = tf.matmul(query[b, :, h], key_bh, transpose_b=True)
                probs = _softmax(tf.cast(logits, "float32") * scale)
                contexts[part][b].append(tf.matmul(tf.cast(probs, value.dtype), value_bh))
    return [_join(examples) for examples in contexts]


def _join(examples):
    """(B, Tq, heads, d) from each example's list of (Tq, d) head contexts."""
    import tensorflow as tf

    stacked = [tf.stack(heads, axis=1) for heads in examples]
    # At batch 1 the batch axis is added as a view (stacking one tensor would copy it).
    return tf.stack(stacked) if len(stacked) > 1 else tf.expand_dims(stacked[0], 0)


def _softmax(logits):
    """Softmax over the last axis of float32 logits, as Keras computes it (the maximum taken out
    first), in element-wise operations."""
    import tensorflow as tf

    shifted = tf.exp(logits - tf.reduce_max(logits, axis=-1, keepdims=True))
    return shifted / tf.reduce_sum(shifted, axis=-1, keepdims=True)
