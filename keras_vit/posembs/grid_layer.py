"""The base of the layers that add (h * w, D) patch position embeddings to the tokens."""

import keras
from keras import ops


def pair(value):
    if isinstance(value, int):
        return (value, value)
    return tuple(int(v) for v in value)


def is_static(grid):
    return all(isinstance(size, int) for size in grid)


def call_grid(patch_input_shape, patch_size):
    """The (h, w) grid a VALID P x P patch convolution cuts from a (B, H, W, C) shape."""
    height, width = patch_input_shape[1], patch_input_shape[2]
    grid = (height // patch_size[0], width // patch_size[1])
    if is_static(grid) and min(grid) < 1:
        raise ValueError(
            f"an input of {height} x {width} is smaller than one {patch_size[0]} x {patch_size[1]} patch."
        )
    return grid


class GridPositionLayer(keras.layers.Layer):
    """Adds (h * w, D) patch position embeddings to (B, prefix + h * w, D) tokens.

    The prefix (class token) rows get zeros. With `patch_size` set, a call also takes the
    tensor the patches were cut from and follows its grid, as `PositionEmbedding` does.
    A subclass writes `patch_embeddings(grid)` (and `build`, for weights).
    """

    def __init__(self, grid_size, num_prefix_tokens=1, patch_size=None, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = pair(grid_size)
        self.num_prefix_tokens = num_prefix_tokens
        self.patch_size = None if patch_size is None else pair(patch_size)

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
