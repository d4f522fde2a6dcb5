"""Class names for a model's outputs: shipped ImageNet names, a run's names, or a labels file.

ImageNet-1k (1000 classes) and Google's ImageNet-21k (21,843 classes, the head of the official
`imagenet21k` and `augreg-imagenet21k` checkpoints) ship with the package, so naming those
outputs needs no download. The 21k names are the WordNet lemmas of each class's WordNet id,
taken from timm (Apache License 2.0); `keras_vit/data/imagenet21k_class_index.json` says where
each part comes from.
"""

import functools
import json
from importlib import resources

from keras_vit import fileio, preprocessing

IMAGENET21K_CLASSES = 21843


class LabelsError(ValueError):
    """A labels file that cannot be used; the message is one line naming it."""


@functools.lru_cache(maxsize=1)
def imagenet21k_class_index():
    """[(wordnet id, lemmas)] of the 21,843 ImageNet-21k classes, by head index."""
    text = resources.files("keras_vit").joinpath("data/imagenet21k_class_index.json").read_text("utf-8")
    return [tuple(entry) for entry in json.loads(text)["classes"]]


def imagenet_names(num_classes):
    """The shipped names of an ImageNet head of `num_classes` outputs, else None."""
    if num_classes == preprocessing.NUM_IMAGENET_CLASSES:
        return [name for _, name in preprocessing.imagenet_class_index()]
    if num_classes == IMAGENET21K_CLASSES:
        return [name for _, name in imagenet21k_class_index()]
    return None


def read_labels(path):
    """Class names from a file: a JSON list of strings, or one name per line (plain text)."""
    try:
        with fileio.open(path) as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise LabelsError(f"{path}: cannot read the labels file ({err}); pass a text file") from None
    if str(path).endswith(".json"):
        try:
            names = json.loads(text)
        except json.JSONDecodeError as err:
            raise LabelsError(f"{path}: not valid JSON ({err}); write a JSON list of class names") from None
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise LabelsError(f"{path}: expected a JSON list of class names (strings)")
        return names
    names = text.splitlines()
    while names and not names[-1].strip():
        names.pop()  # a trailing newline or blank lines at the end are not classes
    return [name.strip() for name in names]


def class_names(num_classes, labels=None):
    """One name per output: `labels` (a list or a labels file), else the shipped ImageNet
    names for 1000 or 21,843 classes, else "class 0", "class 1", ..."""
    if isinstance(labels, (str, bytes)) or hasattr(labels, "__fspath__"):
        source, labels = labels, read_labels(labels)
    else:
        source = "labels"
    if labels is not None:
        labels = list(labels)
        if len(labels) != num_classes:
            raise LabelsError(
                f"{source}: {len(labels)} class names for a model with {num_classes} outputs; "
                "give one name per class, in the order of the model's outputs"
            )
        return labels
    return imagenet_names(num_classes) or [f"class {i}" for i in range(num_classes)]
