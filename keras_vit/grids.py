"""The patch grid an image size gives, and the grid a model's position embeddings are stored for.

Its own module because the model (which builds the position layers) and the reader of `.keras`
files (which finds the stored grid from a saved model's arguments) both need it, and the
weights must not import the models.
"""

import numbers

from keras_vit import resnet

DEFAULT_IMAGE_SIZE = 224


def pair(value):
    if isinstance(value, numbers.Integral):  # NumPy's integers too
        return (int(value), int(value))
    return tuple(int(v) for v in value)


def image_size(value):
    """(height, width) of an image size: None (any size) for either or both."""
    if value is None:
        return (None, None)
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) != 2:
        raise ValueError(f"image_size must be an int or (height, width), got {value}.")
    return tuple(None if v is None else int(v) for v in value)


def patch_grid(size, patch_size, resnet_layers):
    """The (h, w) patch grid for an image size (None where the size is None).

    Like the official VALID patch convolution, a partial last row or column of patches is
    dropped (ViT-H/14 at 384 px has a 27 x 27 grid). The hybrid's SAME-padded stem rounds up
    at each of its stride-2 steps.
    """
    patch = pair(patch_size)
    original, size = tuple(size), list(size)
    if resnet_layers is not None:
        # Root conv and max pool (stride 2 each), then every stage after the first.
        for _ in range(resnet.downsamplings(resnet_layers)):
            size = [None if s is None else -(-s // 2) for s in size]
    grid = tuple(None if s is None else s // p for s, p in zip(size, patch))
    if min((g for g in grid if g is not None), default=1) < 1:
        raise ValueError(
            f"image size {original} is smaller than one patch of the token "
            f"grid (patch size {patch}); use a larger image_size."
        )
    return grid


def stored_grid(size, patch_size, resnet_layers, base_image_size=None):
    """The grid the position embeddings of a model of `size` are stored for.

    A fixed size: its own grid. Any size on an axis (None): that axis follows
    `base_image_size` (default 224), the size the embeddings were trained at.
    """
    size = image_size(size)
    if None not in size:
        return patch_grid(size, patch_size, resnet_layers)
    base = image_size(base_image_size or DEFAULT_IMAGE_SIZE)
    if None in base:
        raise ValueError(f"base_image_size must be a size, got {base_image_size}.")
    # A fixed axis keeps its own size: only the None axes follow the base size.
    base = tuple(b if s is None else s for s, b in zip(size, base))
    return patch_grid(base, patch_size, resnet_layers)
