"""Image files to model inputs, resized the way the official evaluation resizes them.

The evaluation pipelines (vit_jax's input pipeline, and `trainers.data.ops.eval_ops` here)
decode an image to RGB and resize it, whatever its aspect ratio, to the model's square size
with `tf.image.resize(method="bilinear")`: half-pixel centres, no antialiasing, float
pixels in [0, 255], no crop. `resize` computes exactly that in NumPy, so predictions do not
depend on TensorFlow or the Keras backend, and match what the trainers measured.

JPEGs are decoded with the accurate integer IDCT (Pillow's), as the trainers' pipeline and an
exported SavedModel decode them (`tf.io.decode_jpeg(dct_method="INTEGER_ACCURATE")`): the same
pixels. PNG and other lossless formats decode to the same pixels either way.

Files are read with Pillow (JPEG, PNG, GIF, BMP, WebP, TIFF, ...); grayscale, palette, RGBA
and CMYK images become RGB (alpha dropped, as `tf.io.decode_image(channels=3)` does), a 16-bit
image its top 8 bits (as TensorFlow's decoders do); floating-point images are refused. An EXIF
orientation tag is applied (a phone photo taken upright is classified upright), as image
viewers do; TensorFlow's decoders do not apply it, so datasets of such photos for training are
best stored upright.
"""

import io
import warnings

import numpy as np
import PIL.Image
import PIL.ImageOps

from keras_vit import fileio


class ImageError(ValueError):
    """A file that cannot be read as an image; the message is one line naming it."""


def target_size(model_or_size):
    """(height, width) images are resized to: a model's input size, an int, or a pair.

    A model that takes any size gets the size its position embeddings were stored for
    (its weights' own resolution), the size it was trained at.
    """
    if isinstance(model_or_size, int):
        return (model_or_size, model_or_size)
    if isinstance(model_or_size, (tuple, list)):
        height, width = model_or_size
        return (int(height), int(width))
    size = tuple(model_or_size.image_size)
    base = tuple(getattr(model_or_size, "base_image_size", None) or (224, 224))
    return tuple(int(b if s is None else s) for s, b in zip(size, base))


def read_image(path):
    """The pixels of an image file: uint8 (height, width, 3); ImageError if it is not one."""
    try:
        with fileio.open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise ImageError(
            f"{path}: cannot read the file ({err.strerror or err}); pass an image file"
        ) from None
    return decode_image(data, path)


def decode_image(data, name="image"):
    """Encoded image bytes -> uint8 (height, width, 3); the first frame of an animation."""
    try:
        with warnings.catch_warnings():
            # Pillow warns of a photo past 89 M pixels (a camera's largest), as a possible
            # decompression bomb; it is read to be shrunk. Past twice that it refuses (below).
            warnings.simplefilter("ignore", PIL.Image.DecompressionBombWarning)
            with PIL.Image.open(io.BytesIO(data)) as image:
                image.seek(0)
                upright = PIL.ImageOps.exif_transpose(image)
                return np.asarray(_eight_bits(upright, name).convert("RGB"), dtype=np.uint8)
    except ImageError:
        raise
    except PIL.Image.DecompressionBombError as err:
        said = str(err).split(", could be")[0]  # "Image size (N pixels) exceeds limit of M pixels"
        raise ImageError(f"{name}: {said}, more than Pillow opens; shrink the image first") from None
    except (PIL.UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        reason = "not an image file Pillow can read" if isinstance(err, PIL.UnidentifiedImageError) else err
        raise ImageError(f"{name}: {reason}; pass a JPEG, PNG, GIF, BMP, WebP or TIFF image") from None


def _eight_bits(image, name):
    """A one-channel image of more than 8 bits a pixel as 8 bits, its top 8 bits, as
    TensorFlow's decoders reduce a 16-bit PNG (`value >> 8`); Pillow's own conversion to RGB
    clips every value past 255, which turns such an image white."""
    if image.mode.startswith("I;16") or image.mode == "I":  # 16-bit, or 32-bit integers
        pixels = np.asarray(image).astype(np.int64)
        if pixels.size and (pixels.min() < 0 or pixels.max() > 65535):
            raise ImageError(f"{name}: pixels past 16 bits; save the image with 8 or 16 bits a channel")
        return PIL.Image.fromarray((pixels >> 8).astype(np.uint8))
    if image.mode == "F":
        raise ImageError(
            f"{name}: floating-point pixels have no fixed range; save the image with 8 or 16 bits a channel"
        )
    return image


def resize(image, size):
    """(h, w, c) pixels -> float32 (height, width, c), as tf.image.resize(method="bilinear").

    Each output pixel samples the input at ((i + 0.5) * h / height - 0.5), clamped to the
    image, and blends its two neighbours on each axis linearly.
    """
    image = np.asarray(image, dtype=np.float32)
    height, width = target_size(size)
    (top, bottom, dy), (left, right, dx) = (
        _sample_points(image.shape[0], height),
        _sample_points(image.shape[1], width),
    )
    rows = image[top] * (1 - dy)[:, None, None] + image[bottom] * dy[:, None, None]
    return rows[:, left] * (1 - dx)[None, :, None] + rows[:, right] * dx[None, :, None]


def _sample_points(in_size, out_size):
    """Lower and upper source indices and the weight of the upper one, per output index."""
    position = (np.arange(out_size, dtype=np.float64) + 0.5) * (in_size / out_size) - 0.5
    floor = np.floor(position)
    lower = np.clip(floor, 0, in_size - 1).astype(np.int64)
    upper = np.clip(np.ceil(position), 0, in_size - 1).astype(np.int64)
    return lower, upper, (position - floor).astype(np.float32)


def load_image(path, model_or_size):
    """An image file as a batch of one for `model`: float32 (1, height, width, 3) in [0, 255].

    `model_or_size`: a keras_vit model (its input size), an int or (height, width). For a
    model built with the default `include_preprocessing=True`:

        probs = model.predict(keras_vit.load_image("cat.jpg", model))
    """
    return resize(read_image(path), model_or_size)[None]


def load_images(paths, model_or_size):
    """Several image files as one batch: float32 (len(paths), height, width, 3)."""
    return np.stack([resize(read_image(path), model_or_size) for path in paths])
