"""Classifies image files: the top classes of each, with their probabilities.

    python -m keras_vit.predict cat.jpg dog.png --model=ViT-B_16 --weights=imagenet21k+imagenet2012
    python -m keras_vit.predict photos/*.jpg --workdir=runs/pets --json
    python -m keras_vit.predict digit.png --model=digits.keras       # a model saved with model.save
    python -m keras_vit.predict digit.png --weights=digits.npz       # its shapes say the architecture

The model comes any of the ways keras_vit.model_source lists. Images of any size and any format
Pillow reads are resized to the model's size as the official evaluation does (keras_vit.images).
Class names: --labels=FILE, else the model's own (a run's, a Hub checkpoint's, a .keras file's),
else the shipped ImageNet-1k / ImageNet-21k names for 1000- and 21,843-class heads. Bad input
exits with status 2 and a one-line message.

In Python: `classify(model, ["cat.jpg"], class_names)`, or
`model.predict(keras_vit.load_image("cat.jpg", model))` for the probabilities.
"""

import argparse
import json
import sys
import weakref

# Before Keras, whose import starts TensorFlow (and its log lines) on the default backend.
from keras_vit import _clash  # noqa: F401  (refuses a package mixed with another's files)

# isort: split
import keras
import numpy as np

from keras_vit import commands, model_source
from keras_vit import images as images_lib
from keras_vit import labels as labels_lib
from keras_vit.errors import first_line

USAGE_ERROR = commands.USAGE_ERROR
_CHUNK = 16  # images decoded and run at a time: bounded memory for long lists
# On TensorFlow, the largest batch `probabilities` runs eagerly the first time. First call, eager
# against `predict` (2-core AMD EPYC, float32, one process each, two rounds, 2026-12-01 05:22 UTC):
# ViT-Ti/16 at batch 1, 2, 4, 8: 0.36-0.43 s against 2.42-2.52 s, 0.41-0.43 against 3.42-3.49,
# 0.47-0.54 against 0.98-1.05, 0.67-0.79 against 1.00; ViT-B/16 at batch 1, 2, 4: 0.73-0.81
# against 1.11-1.22, 0.92-0.93 against 1.24-2.60, 1.38-1.51 against 1.57-1.95, but at batch 8
# level (2.56-2.64 against 2.61-2.64), and 2.98 against 2.14 on the Xeon with AMX (2026-11-30):
# past a few images the graph's faster products repay its tracing.
EAGER_MAX_BATCH = 4
# Per model, the batch sizes `probabilities` has run eagerly once on TensorFlow.
_EAGER_SIZES = weakref.WeakKeyDictionary()


def top_k(probabilities, class_names, k=5):
    """Per row: [(class index, name, probability)], best first (ties: lower index first)."""
    results = []
    for row in np.asarray(probabilities):
        best = np.argsort(-row, kind="stable")[:k]
        results.append([(int(i), class_names[i], float(row[i])) for i in best])
    return results


def classify(model, images, class_names=None, top=5):
    """The `top` classes of each image (a path or an (h, w, 3) pixel array), best first.

    `model`: a keras_vit model taking pixels in [0, 255] (include_preprocessing=True); one that
    returns logits (classifier_activation=None) is given the softmax of them, as a ViT classifier
    is trained. `class_names`: a list, a labels file, or None for the shipped ImageNet names
    (else "class i"). Returns one list per image of (class index, name, probability) tuples.
    """
    logits = _returns_logits(model)
    names = labels_lib.class_names(model.num_classes, class_names or getattr(model, "class_names", None))
    results = []
    for start in range(0, len(images), _CHUNK):
        chunk = images[start : start + _CHUNK]
        batch = np.stack(
            [images_lib.resize(images_lib.read_image(x) if _is_path(x) else x, model) for x in chunk]
        )
        outputs = probabilities(model, batch)
        if logits:
            outputs = _softmax(outputs.astype(np.float32))
        results.extend(top_k(outputs, names, top))
    return results


def _returns_logits(model):
    """Whether the head returns logits (True), probabilities (False), or neither (a ValueError)."""
    activation = getattr(model, "classifier_activation", "softmax")
    function = keras.activations.get(activation)  # a name or a function; None is linear
    if function is keras.activations.linear:
        return True
    if function in (keras.activations.softmax, keras.activations.sigmoid):
        return False
    raise ValueError(
        f"the model's head ends in {activation!r}, neither probabilities nor logits; classify with "
        "classifier_activation 'softmax', 'sigmoid' or None"
    )


def _softmax(logits):
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def probabilities(model, batch):
    """The model's outputs for one batch, as a NumPy array. On TensorFlow, `predict` traces a
    graph for each batch size, which for a small batch run once costs more than the batch itself
    (ViT-Ti/16 at batch 1: 2.5 s against 0.35 s for an eager call, whose later calls take 0.25 s
    against 0.08 s for `predict`'s). So the first batch of a size up to EAGER_MAX_BATCH runs
    eagerly, and the next of that size for the same model through `predict`: a loop over single
    images traces once, from its second call. (In `classify` such a batch is its last chunk, the
    others being of _CHUNK images.) JAX and OpenVINO compile op by op when eager, and PyTorch's
    `predict` is eager already: they always predict."""
    if keras.backend.backend() == "tensorflow" and len(batch) <= EAGER_MAX_BATCH:
        sizes = _EAGER_SIZES.setdefault(model, set())
        if len(batch) not in sizes:
            sizes.add(len(batch))
            return keras.ops.convert_to_numpy(model(batch, training=False))
    return model.predict(batch, verbose=0)


def _is_path(x):
    return isinstance(x, (str, bytes)) or hasattr(x, "__fspath__")


def _format(path, predictions):
    lines = [f"{path}:"]
    lines += [f"  {probability:7.2%}  {name}  (class {index})" for index, name, probability in predictions]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_vit.predict",
        description="Print the top classes of each image, with their probabilities.",
    )
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, GIF, BMP, WebP, TIFF, ...)")
    model_source.add_arguments(parser)
    parser.add_argument("--top", type=int, default=5, help="how many classes to print per image")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    args = parser.parse_args(argv)
    try:
        if args.top < 1:
            raise ValueError(f"--top must be at least 1, got {args.top}")
        model_source.check_arguments(args)
        for path in args.images:  # every file is checked before a model is built
            images_lib.read_image(path)
        source = model_source.load(args)
        if not source.model.include_top:
            raise ValueError(
                "the model has no classification head (include_top=False or num_classes=0); "
                "predict needs one (python -m keras_vit.visualize draws any model)"
            )
        results = classify(source.model, args.images, source.class_names, args.top)
    except (ValueError, ImportError, OSError) as err:  # ImportError: a gs:// path without TensorFlow
        print(f"error: {first_line(err, limit=2000)}", file=sys.stderr)
        return USAGE_ERROR
    if args.json:
        document = [
            {
                "image": path,
                "predictions": [
                    {"index": index, "name": name, "probability": probability}
                    for index, name, probability in predictions
                ],
            }
            for path, predictions in zip(args.images, results)
        ]
        print(json.dumps(document, indent=2))
    else:
        print("\n".join(_format(path, predictions) for path, predictions in zip(args.images, results)))
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
