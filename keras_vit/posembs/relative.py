"""posemb="relative": no position added to the tokens; each attention layer biases its logits.

The bias of logit [q, k] is the dot product of the query with a learned embedding of the 2-D
offset between the two patches (keras_vit.position_embeddings tells why 2-D, not the paper's
1-D index offset). Its table is a weight of every block's attention layer.
"""

import keras
from keras import ops

from keras_vit import initializers
from keras_vit import layers as vit_layers
from keras_vit.posembs.base import ATTENTION_LAYER, PosembType, npz_key
from keras_vit.posembs.grid_layer import call_grid, is_static, pair

VARIABLE = "relative_embedding"


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
        self.grid_size = pair(grid_size)
        self.num_prefix_tokens = num_prefix_tokens
        self.patch_size = None if patch_size is None else pair(patch_size)
        self.embedding_initializer = keras.initializers.get(
            embedding_initializer or keras.initializers.RandomNormal(stddev=0.02)
        )

    def build(self, input_shape):
        super().build(input_shape)
        height, width = self.grid_size
        self.relative_embedding = self.add_weight(
            name=VARIABLE,
            shape=(2 * height - 1, 2 * width - 1, self.num_heads, input_shape[-1] // self.num_heads),
            initializer=initializers.for_weight(self.embedding_initializer),
        )

    def offset_table(self, grid):
        """R for a (h, w) grid: the stored table, resized when the grid differs."""
        table = self.relative_embedding
        if not is_static(grid) or tuple(grid) != self.grid_size:
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


class Relative(PosembType):
    name = "relative"
    summary = "attention bias per 2-D offset"
    # The table is a weight of each block's attention layer (keeping its official name).
    variables = {ATTENTION_LAYER: (VARIABLE,)}
    # (2h - 1, 2w - 1, heads, D/heads): the two offset axes follow the grid.
    grid_axes = {VARIABLE: (0, 1)}

    def attention_layer(self, grid_size, num_prefix_tokens, patch_size=None):
        config = {
            "grid_size": pair(grid_size),
            "num_prefix_tokens": num_prefix_tokens,
            "patch_size": None if patch_size is None else pair(patch_size),
        }
        return {"class_name": keras.saving.get_registered_name(RelativePositionAttention), "config": config}

    def stored_grid(self, params):
        table = params.get(npz_key(ATTENTION_LAYER, VARIABLE))
        return None if table is None else tuple((size + 1) // 2 for size in table.shape[:2])


TYPE = Relative()
