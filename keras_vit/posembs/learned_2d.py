"""posemb="learned_2d": the paper's 2-D learned embeddings, an X half and a Y half per patch.

Also the template of a new type (docs/contributing.md, "Adding a position-embedding type"):
the layer that adds the position information, then the `PosembType` that says how the model
builds it, what its weights are in a file and how they follow another grid, registered in
keras_vit/posembs/__init__.py.
"""

import keras
from keras import ops

from keras_vit import initializers
from keras_vit import layers as vit_layers
from keras_vit.posembs.base import PosembType, npz_key
from keras_vit.posembs.grid_layer import GridPositionLayer, is_static

LAYER = "posembed_2d"


@keras.saving.register_keras_serializable(package="keras_vit")
class LearnedPosition2D(GridPositionLayer):
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
        if not is_static(grid) or tuple(grid) != self.grid_size:
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


class Learned2D(PosembType):
    name = "learned_2d"
    summary = "X and Y halves"
    layer_name = LAYER
    # In the order build() creates them: a Keras weights file keeps them by that index.
    variables = {LAYER: ("pos_embedding_x", "pos_embedding_y")}
    # X has a row per patch column, Y one per patch row: each follows the grid on its first axis.
    grid_axes = {"pos_embedding_x": (0,), "pos_embedding_y": (0,)}

    def check_width(self, hidden_size):
        if hidden_size % 2:
            raise ValueError(
                f"posemb='learned_2d' needs an even hidden size (two halves), got {hidden_size}."
            )

    def input_layer(self, grid_size, num_prefix_tokens, patch_size=None, dtype=None):
        return LearnedPosition2D(grid_size, num_prefix_tokens, patch_size, name=LAYER, dtype=dtype)

    def stored_grid(self, params):
        x_table, y_table = (params.get(npz_key(LAYER, name)) for name in self.variables[LAYER])
        if x_table is None or y_table is None:
            return None
        return (y_table.shape[0], x_table.shape[0])


TYPE = Learned2D()
