"""posemb="sincos_2d": big_vision's fixed 2-D sin-cos table, computed for every grid; no weights."""

import keras
import numpy as np
from keras import ops

from keras_vit.posembs.base import PosembType
from keras_vit.posembs.grid_layer import GridPositionLayer

SINCOS_TEMPERATURE = 10000.0
LAYER = "posembed_sincos_2d"


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


@keras.saving.register_keras_serializable(package="keras_vit")
class SinCosPosition2D(GridPositionLayer):
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


class SinCos2D(PosembType):
    name = "sincos_2d"
    summary = "fixed"
    layer_name = LAYER

    def check_width(self, hidden_size):
        # Four quarters (sin and cos of x and y), and at least two frequencies in each.
        if hidden_size % 4 or hidden_size < 8:
            raise ValueError(
                "posemb='sincos_2d' needs a hidden size that is a multiple of 4, at least 8; "
                f"got {hidden_size}."
            )

    def input_layer(self, grid_size, num_prefix_tokens, patch_size=None, dtype=None):
        return SinCosPosition2D(grid_size, num_prefix_tokens, patch_size, name=LAYER, dtype=dtype)


TYPE = SinCos2D()
