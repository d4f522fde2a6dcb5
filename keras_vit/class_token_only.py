"""Inference of a model that reads only the class token: its last encoder block computes that row.

A ViT that pools the class token (classifier="token", as the official checkpoints, with a head
or `pooling="token"`) uses one row of its last encoder block's output: the final LayerNorm
works row by row and the pooling takes row 0. That row still attends to every token, so the
last block needs every row's keys and values, but its query, attention, output projection,
residual and MLP for the class token alone: of the block's twelve D x D products per token
(query, key, value, output and the MLP's eight), two per token are left, and the rest for one
row, about 7% of a call's multiply-adds at ViT-B/16 224 px. The outputs are the same to float
rounding (bit for bit in most of the cases measured). In one process, timed in turns on a
2-core AMD EPYC with AVX-512 BF16 (docs/guides/benchmarks.md, "The last block's class token
alone"), inference ran 1.03x to 1.08x as fast.

`first_rows(model, training, mask)` says how many rows a call needs (1) or None, and
`computing(block, rows)` is the context in which the model runs its graph: the block it names
asks `rows_wanted(self)` and returns (B, rows, D) instead of (B, T, D). The state is per
thread, as tracing is. Training computes every row (the dropout masks and the trainers' steps
stay as they are). KERAS_VIT_CLASS_TOKEN_ONLY=0 computes every row (read at each call).
"""

import contextlib
import threading

from keras_vit import onednn_graph

SWITCH = "KERAS_VIT_CLASS_TOKEN_ONLY"
# The rows of the last block that a class-token model reads: the class token's.
CLASS_TOKEN_ROWS = 1

_STATE = threading.local()


def enabled():
    """Whether KERAS_VIT_CLASS_TOKEN_ONLY lets the last block compute one row (unset: yes)."""
    return onednn_graph.switched_on(SWITCH)


def first_rows(model, training=None, mask=None):
    """How many leading rows of its last encoder block `model` (a keras_vit.ViT) needs in this
    call: CLASS_TOKEN_ROWS where its output reads only the class token, else None (every row)."""
    if training or mask is not None or not enabled():
        return None
    if getattr(model, "pooling", None) != "token" or getattr(model, "num_layers", 0) < 1:
        return None
    return CLASS_TOKEN_ROWS


@contextlib.contextmanager
def computing(block, rows):
    """Within it, `rows_wanted(block)` is `rows` in this thread (None: every row)."""
    outer = getattr(_STATE, "held", None)
    _STATE.held = (block, rows)
    try:
        yield
    finally:
        _STATE.held = outer


def rows_wanted(block):
    """The leading rows `block` is asked to compute in this thread's current call, or None."""
    held = getattr(_STATE, "held", None)
    if held is None or held[0] is not block:
        return None
    return held[1]
