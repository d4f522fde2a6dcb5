"""Position-information variants of the ViT paper's ablation (Appendix D.4, Table 8).

`ViT(posemb=...)` picks one:

- "learned_1d" (default): one learned row per token, the official `posembed_input` layer
  (`keras_vit.layers.PositionEmbedding`); the class token has its own learned row.
- "learned_2d": an X-embedding (one row per patch column) and a Y-embedding (one row per
  patch row) of D/2 each, concatenated [X, Y] for each patch (`LearnedPosition2D`).
- "sincos_2d": big_vision's fixed 2-D sin-cos table (`posemb_sincos_2d`, temperature
  10000), computed for every grid, no weights (`SinCosPosition2D`).
- "relative": no position added to the tokens; every attention layer adds a bias to its
  logits, the dot product of the query with a learned embedding of the query-key offset
  (`RelativePositionAttention`).
- "none": no position information at all.

The class token gets no position information except in "learned_1d": it is a learned vector
already, so a learned row for it would only add a second learned vector to the first, and
big_vision adds its sin-cos table to the patches before the class token is prepended too. In
"relative" every logit that involves the class token (as query or as key) gets no bias.

The paper's relative attention is "1-dimensional": an embedding per offset p_q - p_k of the
flattened patch index. Here the offset is the 2-D one, (row_q - row_k, col_q - col_k), on a
(2h - 1, 2w - 1) table per layer. The 1-D index offset r * w + c aliases pairs that are not
the same displacement (a step right off the row's end is a step down), and cannot be carried
to another grid; the 2-D table can, resized like the learned grid (corner-aligned linear, as
scipy.ndimage.zoom(order=1)): the centre (offset 0) stays at the centre, and offset d on
the new grid reads what the old table held at d * (h - 1) / (h' - 1), the same rescaling of
distances that resizing a learned 1-D grid applies to positions.

Each type is a module of `keras_vit.posembs` (the layers named above live there and are
re-exported here), registered there; `keras_vit.posembs.register` adds a type of one's own.
"""

from keras_vit import _clash  # noqa: F401, I001  (first: before anything reaches layers.py)

from keras_vit import posembs
from keras_vit.posembs.grid_layer import call_grid
from keras_vit.posembs.learned_2d import LearnedPosition2D
from keras_vit.posembs.relative import RelativePositionAttention, relative_offset_index
from keras_vit.posembs.sincos_2d import SINCOS_TEMPERATURE, SinCosPosition2D, sincos_2d

# The built-in types, in the registry's order (the first is the default); posembs.names() has
# any registered later too.
POSEMB_TYPES = posembs.BUILT_IN


def check_posemb(posemb, hidden_size):
    """A one-line ValueError for an unknown variant or a width the variant cannot split."""
    posembs.check(posemb, hidden_size)


__all__ = [
    "POSEMB_TYPES",
    "SINCOS_TEMPERATURE",
    "LearnedPosition2D",
    "RelativePositionAttention",
    "SinCosPosition2D",
    "call_grid",
    "check_posemb",
    "relative_offset_index",
    "sincos_2d",
]
