"""Inference on a CPU in two halves of the token rows, where TensorFlow would use one thread.

TensorFlow's oneDNN matmul runs a product on a single thread when its two operands and its
result together fit in one core's L2 cache (`ExecuteSingleThreadedGemm` in
tensorflow/core/kernels/mkl/mkl_matmul_ops_common.h). At ViT-Ti/16's width every product of a
call at batch 1 is that small, so a 2-core CPU ran them on one core. An encoder block
can instead carry its tokens as two halves of the rows: each half goes through the layer norms,
the projections and the MLP on its own, and TensorFlow's executor runs the two independent
products at once; only attention needs every token, so the keys and values are joined for it
and each half's queries attend to all of them (keras_vit.layers.EncoderBlock,
keras_vit.part_attention). Each row is computed by the same formula, so the outputs agree to
float rounding (oneDNN may block a half's product otherwise than the whole's).

`count` decides, per traced call, whether a block takes its rows in parts: only on the
TensorFlow backend, inside a `tf.function` that XLA does not compile (XLA ran the halves
slower), with no GPU, with oneDNN's kernels on and at least two threads, and only while the
attention's projection of all the rows is a product that fits in L2 by the rule above, not so
small that the extra operations cost more than the second core gives (MIN_MULTIPLY_ADDS), and
not so large that the parts cost more than they give (MAX_MULTIPLY_ADDS: a larger L2 lets larger
products through the rule, and on a 2 MB L2 those ran slower in parts).
KERAS_VIT_ROW_PARTS=0 keeps the rows whole (read at each trace).
"""

import os

import keras

from keras_vit import cpu_info, onednn_graph

SWITCH = "KERAS_VIT_ROW_PARTS"
# How many parts: two, the number of cores of the CPU it was measured on (docs/guides/benchmarks.md).
PARTS = 2
# The attention's projection of all the rows needs at least this many multiply-adds: a model
# 64 wide on 17 tokens ran 0.94x in halves at 0.56 million, level at 1.1 million, and 1.03x to
# 1.10x at 1.7 to 4.5 million (ViT-Ti/16 at batch 1: 7.3 million).
MIN_MULTIPLY_ADDS = 2**20
# ... and at most this many: on an Intel Xeon with AMX (2 MB of L2, so TensorFlow's rule runs
# larger products on one thread than on the 1 MB EPYC) ViT-Ti/16 in bfloat16 ran 1.15x in parts
# at batch 4 (29 million), level at batch 5 (36 million), 0.90x at batch 6 (44 million), 0.91x at
# batch 8, and ViT-B/16 at batch 1 (116 million) 0.87x. On the 1 MB EPYC this also ends the parts
# at ViT-Ti/16 batch 5 and 6 in bfloat16, which its L2 rule let through (docs/guides/benchmarks.md).
MAX_MULTIPLY_ADDS = 2**25


def enabled():
    """Whether KERAS_VIT_ROW_PARTS lets blocks take their rows in parts (unset: yes)."""
    return onednn_graph.switched_on(SWITCH)


def single_threaded(rows, width, outputs, itemsize, l2_bytes):
    """Whether TensorFlow's oneDNN runs the (rows x width) @ (width x outputs) product on one
    thread: its operands and result, `itemsize` bytes an element, fit in an L2 of `l2_bytes`."""
    return itemsize * (rows * outputs + width * (rows + outputs)) < l2_bytes


def available_threads():
    """The number of threads TensorFlow's executor can run ops on at once."""
    import tensorflow as tf

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    inter_op = tf.config.threading.get_inter_op_parallelism_threads()
    return min(cores or 1, inter_op) if inter_op > 0 else cores or 1


def count(tokens, compute_dtype):
    """How many parts of the rows an encoder block takes `tokens` (B, T, D) in: PARTS or 1."""
    if keras.backend.backend() != "tensorflow" or not enabled():
        return 1
    batch, length, width = tokens.shape
    if not (isinstance(batch, int) and isinstance(length, int) and length >= 2 * PARTS):
        return 1
    if not MIN_MULTIPLY_ADDS <= batch * length * width * width <= MAX_MULTIPLY_ADDS:
        return 1
    l2 = cpu_info.l2_bytes()
    if l2 is None or not onednn_graph.runs_on_onednn(compute_dtype):
        return 1
    itemsize = 2 if keras.backend.standardize_dtype(compute_dtype) in ("bfloat16", "float16") else 4
    if not single_threaded(batch * length, width, width, itemsize, l2):
        return 1
    return PARTS if available_threads() >= PARTS else 1


def split(tokens, parts):
    """`tokens` (B, T, D) as `parts` slices of consecutive rows (the first ones one longer)."""
    length = tokens.shape[1]
    return cut(tokens, [length // parts + (i < length % parts) for i in range(parts)])


def cut(tokens, sizes):
    """`tokens` (B, T, D) as slices of consecutive rows, `sizes` rows each (summing to T)."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [tokens[:, start : start + size] for start, size in zip(starts, sizes)]
