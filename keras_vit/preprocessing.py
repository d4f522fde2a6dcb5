"""Input scaling and ImageNet-1k label decoding, as keras.applications offers them.

The official ViT checkpoints take pixels scaled to [-1, 1]. A model built with
`include_preprocessing=True` (the default) does that scaling itself and takes pixels in
[0, 255]; `preprocess_input` is for models built with `include_preprocessing=False`. Pixels
are never negative, so negative values where pixels are expected mean the data was scaled
already: both places warn (`DoubleScalingWarning`) when they see that in data that holds
values (never inside a traced or compiled function, where it would cost time). The
ImageNet-1k class index (WordNet id and name per class, in the standard class order) ships
with the package, so decoding never downloads anything.
"""

import functools
import json
import warnings
from importlib import resources

import keras
import numpy as np

NUM_IMAGENET_CLASSES = 1000


class DoubleScalingWarning(UserWarning):
    """Data already scaled to [-1, 1] is about to be scaled again."""


def preprocess_input(x, data_format=None):
    """Pixels in [0, 255] to the [-1, 1] the ViT checkpoints were trained on (x / 127.5 - 1).

    Only for models built with `include_preprocessing=False`: a default model scales its
    inputs itself, so give it the pixels. Accepts a NumPy array or anything array-like (a
    tensor of any backend is converted with keras.ops, keeping its type); integer inputs
    become float32. Warns (`DoubleScalingWarning`) when the input has negative values,
    which pixels never have: it was most likely scaled already.

    `data_format` ("channels_last", "channels_first" or None) is the keras.applications
    argument: the scaling is the same for every pixel and channel, so both layouts are scaled
    alike; anything else is refused.
    """
    if data_format not in (None, "channels_last", "channels_first"):
        raise ValueError(
            f"data_format must be None, 'channels_last' or 'channels_first', got {data_format!r}."
        )
    if isinstance(x, (np.ndarray, list, tuple, int, float)):
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32)
    else:
        x = keras.ops.convert_to_tensor(x)
        if "float" not in str(x.dtype):
            x = keras.ops.cast(x, "float32")
    if has_negative_values(x):
        warnings.warn(
            "keras_vit.preprocess_input: the input has negative values, so it is not pixels in "
            "[0, 255]; it looks scaled to [-1, 1] already and is being scaled again. Call "
            "preprocess_input once, and only for a model built with include_preprocessing=False.",
            DoubleScalingWarning,
            stacklevel=2,
        )
    return x / 127.5 - 1.0


def has_negative_values(x):
    """Whether `x` holds values now and one of them is negative.

    False without looking for anything that holds no values yet: symbolic tensors, tensors
    being traced (tf.function, jax.jit, torch.compile), datasets, dicts. So the check adds
    nothing to a compiled function; on concrete data it is one min-reduction.
    """
    smallest = _concrete_min(x)
    return smallest is not None and smallest < 0


def warn_if_scaled_for_model(images, model_name, samples=64):
    """Warns when a model with include_preprocessing=True is given scaled images; True if it did.

    Looks at the first `samples` images only: enough to see scaled data, and a bounded cost
    for a large array given to predict. Meant for `ViT`'s methods: the warning points two
    frames above its caller, at the code that called the model.
    """
    if isinstance(images, np.ndarray) or keras.ops.is_tensor(images):
        if len(images.shape) == 4:
            images = images[:samples]
    if not has_negative_values(images):
        return False
    warnings.warn(
        f"keras_vit: model {model_name!r} scales its inputs from [0, 255] to [-1, 1] itself "
        "(include_preprocessing=True), but it was given negative values, which pixels never "
        "have: the images look scaled already (by keras_vit.preprocess_input?) and are being "
        "scaled twice. Give the model pixels in [0, 255], or build it with "
        "include_preprocessing=False.",
        DoubleScalingWarning,
        stacklevel=4,
    )
    return True


def _concrete_min(x):
    if isinstance(x, np.ndarray):
        return float(np.min(x)) if x.size and x.dtype.kind in "fiu" else None
    if not keras.ops.is_tensor(x):
        return None
    backend = keras.backend.backend()
    # Only the backend's own kind of tensor can be a traced one; asking it whether it is
    # tracing avoids adding a reduction to a graph being built.
    if backend == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly():
            return None
    elif backend == "jax":
        import jax

        if isinstance(x, jax.core.Tracer):
            return None
    elif backend == "torch":
        import torch

        if torch.compiler.is_compiling():
            return None
    elif backend == "openvino":
        # Keras' OpenVINO backend builds `predict`'s graph from tensors that hang on its input
        # parameter: those have no value, and OpenVINO refuses to compute them (RuntimeError).
        try:
            values = keras.ops.convert_to_numpy(x)
        except RuntimeError:
            return None
        return float(np.min(values)) if values.size else None
    else:
        return None
    if not all(isinstance(size, int) for size in x.shape) or 0 in x.shape:
        return None
    return float(keras.ops.convert_to_numpy(keras.ops.min(x)))


@functools.lru_cache(maxsize=1)
def imagenet_class_index():
    """[(wordnet id, class name)] of the 1000 ImageNet-1k classes, by class index."""
    text = resources.files("keras_vit").joinpath("data/imagenet_class_index.json").read_text(encoding="utf-8")
    index = json.loads(text)
    return [tuple(index[str(i)]) for i in range(NUM_IMAGENET_CLASSES)]


def decode_predictions(preds, top=5):
    """The `top` ImageNet-1k classes of each row of `preds` (B, 1000), best first.

    Returns one list per row of (wordnet id, class name, score) tuples, like
    keras.applications.imagenet_utils.decode_predictions.
    """
    # A tensor of any backend: a PyTorch one that requires grad (a model's output on Keras'
    # PyTorch backend) refuses np.asarray.
    preds = np.asarray(keras.ops.convert_to_numpy(preds))
    if preds.ndim != 2 or preds.shape[1] != NUM_IMAGENET_CLASSES:
        raise ValueError(
            f"decode_predictions expects a batch of ImageNet-1k scores of shape "
            f"(samples, {NUM_IMAGENET_CLASSES}), got {preds.shape}; use a model with "
            "a 1000-class head (e.g. weights='imagenet21k+imagenet2012')"
        )
    if top < 1:
        raise ValueError(f"top must be at least 1, got {top}")
    classes = imagenet_class_index()
    results = []
    for row in preds:
        best = np.argsort(row, kind="stable")[::-1][:top]
        results.append([(*classes[i], float(row[i])) for i in best])
    return results
