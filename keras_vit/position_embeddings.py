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
"""

import keras
import numpy as np
from keras import ops

from keras_vit import _clash, initializers  # noqa: F401  (_clash: before layers.py)
from keras_vit import layers as vit_layers

POSEMB_TYPES = ("learned_1d", "learned_2d", "sincos_2d", "relative", "none")
SINCOS_TEMPERATURE = 10000.0
LEARNED_2D_LAYER = "posembed_2d"
SINCOS_2D_LAYER = "posembed_sincos_2d"
ATTENTION_LAYER = "MultiHeadDotProductAttention_1"  # the official attention's name, kept
# The layers that add position information to the tokens, by name ("posembed_input": learned_1d).
INPUT_LAYERS = ("posembed_input", LEARNED_2D_LAYER, SINCOS_2D_LAYER)
# Each variant's own weights, by the layer that holds them: they are also the .npz keys
# (Transformer/posembed_2d/pos_embedding_x, .../MultiHeadDotProductAttention_1/relative_embedding).
OWN_VARIABLES = {
    LEARNED_2D_LAYER: ("pos_embedding_x", "pos_embedding_y"),
    ATTENTION_LAYER: ("relative_embedding",),
}
# The axes of those weights that follow the patch grid, resized when the grid changes.
GRID_AXES = {"pos_embedding_x": (0,), "pos_embedding_y": (0,), "relative_embedding": (0, 1)}


def check_posemb(posemb, hidden_size):
    """A one-line ValueError for an unknown variant or a width the variant cannot split."""
    if posemb not in POSEMB_TYPES:
        raise ValueError(f"posemb must be one of {', '.join(POSEMB_TYPES)}; got {posemb!r}.")
    if posemb == "learned_2d" and hidden_size % 2:
        raise ValueError(f"posemb='learned_2d' needs an even hidden size (two halves), got {hidden_size}.")
    if posemb == "sincos_2d" and (hidden_size % 4 or hidden_size < 8):
        raise ValueError(
            f"posemb='sincos_2d' needs a hidden size that is a multiple of 4, at least 8; got {hidden_size}."
        )


def _pair(value):
    if isinstance(value, int):
        return (value, value)
    return tuple(int(v) for v in value)


def _is_static(grid):
    return all(isinstance(size, int) for size in grid)


def call_grid(patch_input_shape, patch_size):
    """The (h, w) grid a VALID P x P patch convolution cuts from a (B, H, W, C) shape."""
    height, width = patch_input_shape[1], patch_input_shape[2]
    grid = (height // patch_size[0], width // patch_size[1])
    if _is_static(grid) and min(grid) < 1:
        raise ValueError(
            f"an input of {height} x {width} is smaller than one {patch_size[0]} x {patch_size[1]} patch."
        )
    return grid


def sincos_2d(grid, width, temperature=SINCOS_TEMPERATURE, dtype="float32"):
    """big_vision's posemb_sincos_2d: (h * w, width) rows [sin x, cos x, sin y, cos y].

    x is the patch column, y the patch row; the quarter-width frequencies run from 1 to
    1 / temperature geometrically. `grid` may hold scalar tensors.
    """
    quarter = width // 4
    omega = 1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / (quarter - 1))
    omega = ops.convert_to_tensor(omega.astype(np.float32))
    rows = ops.arange(grid[0], dtype="float32")
    cols = ops.arange(grid[1], dtype="float32")
    y = ops.reshape(ops.repeat(rows, grid[1]), (-1, 1)) * omega
    x = ops.reshape(ops.tile(cols, [grid[0]]), (-1, 1)) * omega
    table = ops.concatenate([ops.sin(x), ops.cos(x), ops.sin(y), ops.cos(y)], axis=1)
    return ops.cast(table, dtype)


class _GridPositionLayer(keras.layers.Layer):
    """Adds (h * w, D) patch position embeddings to (B, prefix + h * w, D) tokens.

    The prefix (class token) rows get zeros. With `patch_size` set, a call also takes the
    tensor the patches were cut from and follows its grid, as `PositionEmbedding` does.
    """

    def __init__(self, grid_size, num_prefix_tokens=1, patch_size=None, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = _pair(grid_size)
        self.num_prefix_tokens = num_prefix_tokens
        self.patch_size = None if patch_size is None else _pair(patch_size)

    def patch_embeddings(self, grid):
        """(h * w, D) embeddings of the patches of a (h, w) grid, row-major."""
        raise NotImplementedError

    def call(self, tokens, patch_input=None):
        grid = self.grid_size
        if patch_input is not None and self.patch_size is not None:
            grid = call_grid(ops.shape(patch_input), self.patch_size)
        elif tokens.shape[1] is not None and tokens.shape[1] != self.num_prefix_tokens + grid[0] * grid[1]:
            raise ValueError(
                f"{self.name} for a {grid} grid expects {self.num_prefix_tokens + grid[0] * grid[1]} "
                f"tokens, got {tokens.shape[1]}; build the model with image_size=None for other sizes."
            )
        table = ops.cast(self.patch_embeddings(grid), tokens.dtype)
        if self.num_prefix_tokens:
            table = ops.pad(table, [[self.num_prefix_tokens, 0], [0, 0]])
        return tokens + table[None]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "grid_size": self.grid_size,
                "num_prefix_tokens": self.num_prefix_tokens,
                "patch_size": self.patch_size,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class LearnedPosition2D(_GridPositionLayer):
    """The paper's 2-D learned embeddings: per patch, [X-embedding of its column, Y of its row].

    Weights `pos_embedding_x` (w, D/2) and `pos_embedding_y` (h, D/2), normal(0.02) as the
    official 1-D table. Another grid resizes each along its own axis, corner-aligned linear
    (scipy.ndimage.zoom(order=1)), which is what the 2-D resize of the learned 1-D grid does
    to a table of this form.
    """

    def __init__(self, grid_size, num_prefix_tokens=1, patch_size=None, initializer=None, **kwargs):
        super().__init__(grid_size, num_prefix_tokens, patch_size, **kwargs)
        self.initializer = keras.initializers.get(initializer or keras.initializers.RandomNormal(stddev=0.02))

    def build(self, input_shape):
        half = input_shape[-1] // 2
        height, width = self.grid_size
        # Each weight gets its own initialiser instance: a shared one gives equal values.
        self.pos_embedding_x = self.add_weight(
            name="pos_embedding_x", shape=(width, half), initializer=initializers.for_weight(self.initializer)
        )
        self.pos_embedding_y = self.add_weight(
            name="pos_embedding_y",
            shape=(height, half),
            initializer=initializers.for_weight(self.initializer),
        )

    def axis_embeddings(self, grid):
        """(X (w, D/2), Y (h, D/2)) for a grid: the stored ones, resized if it differs."""
        x_table, y_table = self.pos_embedding_x, self.pos_embedding_y
        if not _is_static(grid) or tuple(grid) != self.grid_size:
            x_table = vit_layers._linear_resize_axis(ops.convert_to_tensor(x_table), grid[1], axis=0)
            y_table = vit_layers._linear_resize_axis(ops.convert_to_tensor(y_table), grid[0], axis=0)
        return x_table, y_table

    def patch_embeddings(self, grid):
        x_table, y_table = self.axis_embeddings(grid)
        half = x_table.shape[-1]
        columns = ops.broadcast_to(x_table[None, :, :], (grid[0], grid[1], half))
        rows = ops.broadcast_to(y_table[:, None, :], (grid[0], grid[1], half))
        return ops.reshape(ops.concatenate([columns, rows], axis=-1), (-1, 2 * half))

    def get_config(self):
        config = super().get_config()
        config.update({"initializer": keras.initializers.serialize(self.initializer)})
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class SinCosPosition2D(_GridPositionLayer):
    """big_vision's fixed 2-D sin-cos embeddings (`sincos_2d`); no weights, any grid exactly."""

    def __init__(
        self, grid_size, num_prefix_tokens=1, patch_size=None, temperature=SINCOS_TEMPERATURE, **kwargs
    ):
        super().__init__(grid_size, num_prefix_tokens, patch_size, **kwargs)
        self.temperature = temperature

    def build(self, input_shape):
        self.width = input_shape[-1]

    def patch_embeddings(self, grid):
        return sincos_2d(grid, self.width, self.temperature)

    def get_config(self):
        config = super().get_config()
        config.update({"temperature": self.temperature})
        return config


def relative_offset_index(grid):
    """(h*w, h*w) int32 index into a flattened (2h-1, 2w-1) offset table, query-major.

    Entry [q, k] is the table cell of offset (row_q - row_k, col_q - col_k).
    """
    height, width = grid
    rows = ops.repeat(ops.arange(height, dtype="int32"), width)
    cols = ops.tile(ops.arange(width, dtype="int32"), [height])
    d_row = rows[:, None] - rows[None, :] + (height - 1)
    d_col = cols[:, None] - cols[None, :] + (width - 1)
    return d_row * (2 * width - 1) + d_col


@keras.saving.register_keras_serializable(package="keras_vit")
class RelativePositionAttention(vit_layers.MultiHeadSelfAttention):
    """Self-attention with the paper's relative position bias, on 2-D offsets.

    A second attention uses the query as it is and a learned embedding of each query-key
    offset as the key: logit[q, k] = query_q . R[row_q - row_k, col_q - col_k] / sqrt(D/heads),
    added to the content logits before the softmax (`position_bias`). R, the weight
    `relative_embedding`, is (2h - 1, 2w - 1, heads, D/heads) per layer, normal(0.02); for
    another grid it is resized on its two offset axes, corner-aligned linear. Pairs with a
    class token get no bias. With `patch_size` set, a call takes the patch input too (its
    grid may differ from the stored one).
    """

    def __init__(
        self, num_heads, grid_size, num_prefix_tokens=1, patch_size=None, embedding_initializer=None, **kwargs
    ):
        super().__init__(num_heads, **kwargs)
        self.grid_size = _pair(grid_size)
        self.num_prefix_tokens = num_prefix_tokens
        self.patch_size = None if patch_size is None else _pair(patch_size)
        self.embedding_initializer = keras.initializers.get(
            embedding_initializer or keras.initializers.RandomNormal(stddev=0.02)
        )

    def build(self, input_shape):
        super().build(input_shape)
        height, width = self.grid_size
        self.relative_embedding = self.add_weight(
            name="relative_embedding",
            shape=(2 * height - 1, 2 * width - 1, self.num_heads, input_shape[-1] // self.num_heads),
            initializer=initializers.for_weight(self.embedding_initializer),
        )

    def offset_table(self, grid):
        """R for a (h, w) grid: the stored table, resized when the grid differs."""
        table = self.relative_embedding
        if not _is_static(grid) or tuple(grid) != self.grid_size:
            table = ops.convert_to_tensor(table)
            table = vit_layers._linear_resize_axis(table, 2 * grid[0] - 1, axis=0)
            table = vit_layers._linear_resize_axis(table, 2 * grid[1] - 1, axis=1)
        return table

    def call(self, tokens, training=None, return_attention_scores=False, patch_input=None):
        grid = self.grid_size
        if patch_input is not None and self.patch_size is not None:
            grid = call_grid(ops.shape(patch_input), self.patch_size)
        elif tokens.shape[1] is not None and tokens.shape[1] != self.num_prefix_tokens + grid[0] * grid[1]:
            raise ValueError(
                f"relative attention for a {grid} grid expects {self.num_prefix_tokens + grid[0] * grid[1]} "
                f"tokens, got {tokens.shape[1]}; build the model with image_size=None for other sizes."
            )
        # position_bias(query) is called from the parent's call; the grid of this call reaches it
        # here. Written past Keras' attribute tracking: it is per-call data, not layer state.
        self.__dict__["_grid_of_call"] = grid
        return super().call(tokens, training=training, return_attention_scores=return_attention_scores)

    def position_bias(self, query):
        grid = self.__dict__.get("_grid_of_call", self.grid_size)
        prefix = self.num_prefix_tokens
        table = ops.cast(self.offset_table(grid), query.dtype)
        scale = 1.0 / float(query.shape[-1]) ** 0.5
        # (B, heads, N, 2h-1, 2w-1): each patch query against every offset, then each key's
        # offset picked out; cheaper than gathering a (N, N, heads, D/heads) key tensor.
        scores = ops.einsum("bqhd,yxhd->bhqyx", query[:, prefix:], table) * ops.cast(scale, query.dtype)
        shape = ops.shape(scores)
        scores = ops.reshape(scores, (shape[0], shape[1], shape[2], -1))
        index = relative_offset_index(grid)
        index = ops.broadcast_to(index[None, None], (shape[0], shape[1], shape[2], shape[2]))
        bias = ops.take_along_axis(scores, index, axis=-1)
        if prefix:
            bias = ops.pad(bias, [[0, 0], [0, 0], [prefix, 0], [prefix, 0]])
        return bias

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "grid_size": self.grid_size,
                "num_prefix_tokens": self.num_prefix_tokens,
                "patch_size": self.patch_size,
                "embedding_initializer": keras.initializers.serialize(self.embedding_initializer),
            }
        )
        return config


def input_layer(posemb, grid_size, num_prefix_tokens, patch_size=None, dtype=None):
    """The layer that adds position embeddings to the tokens for `posemb`, or None.

    Not for "learned_1d", whose `posembed_input` layer the model builds itself.
    """
    if posemb == "learned_2d":
        return LearnedPosition2D(grid_size, num_prefix_tokens, patch_size, name=LEARNED_2D_LAYER, dtype=dtype)
    if posemb == "sincos_2d":
        return SinCosPosition2D(grid_size, num_prefix_tokens, patch_size, name=SINCOS_2D_LAYER, dtype=dtype)
    return None


def attention_layer(posemb, grid_size, num_prefix_tokens, patch_size=None):
    """EncoderBlock's `attention_layer` argument for `posemb`: None but for "relative"."""
    if posemb != "relative":
        return None
    config = {
        "grid_size": _pair(grid_size),
        "num_prefix_tokens": num_prefix_tokens,
        "patch_size": None if patch_size is None else _pair(patch_size),
    }
    return {"class_name": keras.saving.get_registered_name(RelativePositionAttention), "config": config}


def resize_grid_weight(name, value, shape):
    """A stored `name` weight (GRID_AXES) resized to `shape` on its grid axes, as a call would.

    Returned unchanged where another axis differs (the caller reports the mismatch).
    """
    value = np.asarray(value, np.float32)
    axes = GRID_AXES[name]
    if value.ndim != len(shape) or any(
        value.shape[a] != shape[a] for a in range(value.ndim) if a not in axes
    ):
        return value
    resized = ops.convert_to_tensor(value)
    for axis in axes:
        resized = vit_layers._linear_resize_axis(resized, int(shape[axis]), axis=axis)
    return np.asarray(ops.convert_to_numpy(resized), np.float32)
