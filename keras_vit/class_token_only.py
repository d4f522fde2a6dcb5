"""A model that reads only the class token: its last encoder block computes that row alone.

A ViT that pools the class token (classifier="token", as the official checkpoints, with a head
or `pooling="token"`) uses one row of its last encoder block's output: the final LayerNorm
works row by row and the pooling takes row 0. That row still attends to every token, so the
last block needs every row's keys and values, but its query, attention, output projection,
residual and MLP for the class token alone: of the block's twelve D x D products per token
(query, key, value, output and the MLP's eight), two per token are left, and the rest for one
row, about 7% of a call's multiply-adds at ViT-B/16 224 px, and as much of a training step's
(the other rows' outputs get no gradient, so their backward pass is work for nothing too).
The outputs and gradients are the same to float rounding (the outputs bit for bit in most of
the cases measured). Timed in turns (docs/guides/benchmarks.md, "The last block's class token
alone"), inference ran 1.05x to 1.11x as fast on a 2-core AMD EPYC with AVX-512, the ViT-Ti/16
training step 1.07x to 1.10x on one without.

`call` runs a functional model's own call so (`keras_vit.ViT` where it pools the class token,
and its `representation_model()`, a `ClassTokenModel`): `computing(block, rows)` is the context
in which the graph runs, and the block it names asks `rows_wanted(self)` and returns (B, rows,
D) instead of (B, T, D). The state is per thread, as tracing is. In training the block's dropout
draws its masks for the rows it computes, so a run with dropout draws other masks than one
computing every row (each mask as likely as before); stochastic depth draws one number an
example either way. KERAS_VIT_CLASS_TOKEN_ONLY=0 computes every row (read at each call).
"""

import contextlib
import threading

import keras

from keras_vit import onednn_graph

SWITCH = "KERAS_VIT_CLASS_TOKEN_ONLY"
# The rows of the last block that a class-token model reads: the class token's.
CLASS_TOKEN_ROWS = 1
BLOCK_PREFIX = "encoderblock_"

_STATE = threading.local()


def enabled():
    """Whether KERAS_VIT_CLASS_TOKEN_ONLY lets the last block compute one row (unset: yes)."""
    return onednn_graph.switched_on(SWITCH)


def first_rows(mask=None):
    """How many leading rows of its last encoder block a call of a model that reads only the
    class token needs: CLASS_TOKEN_ROWS, or None (a mask, the switch off)."""
    if mask is not None or not enabled():
        return None
    return CLASS_TOKEN_ROWS


def last_encoder_block(model):
    """The last of `model`'s encoder blocks (named encoderblock_0, _1, ...: names are the weight
    format), or None."""
    indices = [
        int(layer.name.rsplit("_", 1)[1])
        for layer in model.layers
        if layer.name.startswith(BLOCK_PREFIX) and layer.name[len(BLOCK_PREFIX) :].isdigit()
    ]
    return model.get_layer(f"{BLOCK_PREFIX}{max(indices)}") if indices else None


def call(functional_call, block, inputs, training=None, mask=None):
    """`functional_call(inputs, training=, mask=)`, a functional model's own call, with `block`
    computing only the rows the model reads where `first_rows` says so."""
    rows = first_rows(mask)
    if rows is None or block is None:
        return functional_call(inputs, training=training, mask=mask)
    with computing(block, rows):
        return functional_call(inputs, training=training, mask=mask)


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassTokenModel(keras.Model):
    """A functional model whose outputs read only the class token of its last encoder block's
    output (a ViT's representation: keras_vit.ViT.representation_model): that block computes
    the class token's row alone."""

    def call(self, inputs, training=None, mask=None):
        return call(super().call, last_encoder_block(self), inputs, training=training, mask=mask)


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
