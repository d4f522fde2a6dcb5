"""posemb="learned_1d" (the default): the official learned table, one row per token.

The layer is the official `posembed_input` (`keras_vit.layers.PositionEmbedding`), and its table
`Transformer/posembed_input/pos_embedding` is the one every official checkpoint holds, with a
class-token row or (big_vision) without one. Loading it into a model of another grid is the
official high-resolution fine-tuning step: the patch rows resized in 2-D, the class row kept.
"""

import logging
import math

import numpy as np

from keras_vit import layers as vit_layers
from keras_vit.errors import CheckpointError
from keras_vit.posembs.base import PosembType

LAYER = "posembed_input"
POSEMB = f"Transformer/{LAYER}/pos_embedding"
# keras_vit's one addition to the layout: the (h, w) patch grid of a learned 1-D table whose
# grid is not square, which its row count cannot tell (200 rows: 10 x 20, 20 x 10, 8 x 25...).
# Official files have square grids and never carry it.
POSEMB_GRID = f"Transformer/{LAYER}/grid_size"

logger = logging.getLogger("keras_vit")


def split_posemb(posemb):
    """(number of prefix rows, patch grid side) of a (1, rows, D) square-grid embedding."""
    rows = posemb.shape[1]
    side = math.isqrt(rows)
    if side * side == rows:
        return 0, side
    side = math.isqrt(rows - 1)
    if side * side == rows - 1:
        return 1, side
    return None, None


def adapt_table(posemb, model, model_has_cls, source, recorded_grid=None):
    """The official high-resolution fine-tuning step, plus big_vision's no-class-row layout.

    The stored grid: the one the file records (a non-square one), else the model's own when
    the rows fit it (files of older versions from non-square models), else a square one.
    """
    grid = tuple(model.get_layer(LAYER).grid_size)
    rows_of = posemb.shape[1]
    if recorded_grid is not None:
        stored = tuple(int(size) for size in recorded_grid)
        prefix = rows_of - stored[0] * stored[1]
        if prefix not in (0, 1):
            raise CheckpointError(
                f"{source}: position embeddings with {rows_of} rows do not fit the "
                f"{stored[0]}x{stored[1]} patch grid the file records; the file is damaged, save it again"
            )
    else:
        stored, prefix = grid, rows_of - grid[0] * grid[1]
    if prefix not in (0, 1):
        prefix, side = split_posemb(posemb)
        if prefix is None:
            raise CheckpointError(
                f"{source}: position embeddings with {rows_of} rows are neither the "
                f"model's {grid[0]}x{grid[1]} patch grid nor a square one; build the model with "
                "the input_shape the file was saved with"
            )
        stored = (side, side)
    rows = posemb[:, prefix:]
    if stored != grid:
        # Imported here, where a table is resized: scipy.ndimage is a tenth of a second of every
        # command's start, and most loads keep the grid.
        import scipy.ndimage

        zoom = (grid[0] / stored[0], grid[1] / stored[1], 1)
        rows = scipy.ndimage.zoom(rows[0].reshape(*stored, -1), zoom, order=1)
        rows = rows.reshape(1, grid[0] * grid[1], -1)
        logger.info(
            "keras_vit: resized position embeddings from a %dx%d to a %dx%d patch grid "
            "(scipy.ndimage.zoom, order 1, class-token row kept)",
            *stored,
            *grid,
        )
    if not model_has_cls:
        return rows
    if prefix:
        return np.concatenate([posemb[:, :1], rows], axis=1)
    # big_vision adds position embeddings before prepending the class token, so the class
    # token carries none: a zero row reproduces that exactly.
    logger.info(
        "keras_vit: checkpoint has no class-token position row (big_vision layout); "
        "using zeros, which is what big_vision computes"
    )
    return np.concatenate([np.zeros_like(rows[:, :1]), rows], axis=1)


class Learned1D(PosembType):
    name = "learned_1d"
    summary = "official"
    layer_name = LAYER
    variables = {LAYER: ("pos_embedding",)}
    # timm's and transformers' ViTs have this table (their pos_embed / position_embeddings).
    hf_exportable = True

    def input_layer(self, grid_size, num_prefix_tokens, patch_size=None, dtype=None):
        return vit_layers.PositionEmbedding(
            grid_size, num_prefix_tokens, patch_size=patch_size, name=LAYER, dtype=dtype
        )

    def stored_grid(self, params):
        if POSEMB not in params:
            return None
        if POSEMB_GRID in params:
            return tuple(int(size) for size in params[POSEMB_GRID])
        _, side = split_posemb(params[POSEMB])
        return (side, side) if side else None

    def adapt(self, key, value, shape, model, params, source):
        # The class-token row and the recorded grid make this table's resize its own.
        has_cls = any(layer.name == "cls" for layer in model.layers)
        return adapt_table(value, model, has_cls, source, params.get(POSEMB_GRID))


TYPE = Learned1D()
