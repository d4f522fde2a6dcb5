"""Input scaling and ImageNet-1k label decoding, as keras.applications offers them.

The official ViT checkpoints take pixels scaled to [-1, 1]. The ImageNet-1k class index
(WordNet id and name per class, in the standard class order) ships with the package, so
decoding never downloads anything.
"""
import functools
import json
from importlib import resources

import numpy as np

NUM_IMAGENET_CLASSES = 1000


def preprocess_input(x):
    """Pixels in [0, 255] to the [-1, 1] the ViT checkpoints were trained on (x / 127.5 - 1).

    Accepts a NumPy array or anything array-like (a tensor of any backend is converted with
    keras.ops, keeping its type); integer inputs become float32.
    """
    if isinstance(x, (np.ndarray, list, tuple, int, float)):
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32)
        return x / 127.5 - 1.0
    from keras import ops

    x = ops.convert_to_tensor(x)
    if "float" not in str(x.dtype):
        x = ops.cast(x, "float32")
    return x / 127.5 - 1.0


@functools.lru_cache(maxsize=1)
def imagenet_class_index():
    """[(wordnet id, class name)] of the 1000 ImageNet-1k classes, by class index."""
    text = resources.files("keras_vit").joinpath("data/imagenet_class_index.json").read_text(
        encoding="utf-8")
    index = json.loads(text)
    return [tuple(index[str(i)]) for i in range(NUM_IMAGENET_CLASSES)]


def decode_predictions(preds, top=5):
    """The `top` ImageNet-1k classes of each row of `preds` (B, 1000), best first.

    Returns one list per row of (wordnet id, class name, score) tuples, like
    keras.applications.imagenet_utils.decode_predictions.
    """
    preds = np.asarray(preds)
    if preds.ndim != 2 or preds.shape[1] != NUM_IMAGENET_CLASSES:
        raise ValueError(f"decode_predictions expects a batch of ImageNet-1k scores of shape "
                         f"(samples, {NUM_IMAGENET_CLASSES}), got {preds.shape}; use a model with "
                         "a 1000-class head (e.g. weights='imagenet21k+imagenet2012')")
    if top < 1:
        raise ValueError(f"top must be at least 1, got {top}")
    classes = imagenet_class_index()
    results = []
    for row in preds:
        best = np.argsort(row, kind="stable")[::-1][:top]
        results.append([(*classes[i], float(row[i])) for i in best])
    return results
