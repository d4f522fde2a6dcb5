"""What a resolved dataset is: a `DatasetSpec`, and the `Records` of each of its splits.

A dataset is multi-label (`spec.multi_label`) when an image can carry several classes: a TFDS label
that is a Sequence of ClassLabel (voc's `labels`), or a folder whose class folders share images. Its
labels are the class indices of each image, padded with -1 (`NO_LABEL`) to a common width; the
pipeline turns them into multi-hot vectors.
"""

import dataclasses
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from trainers.graph_functions import as_written

# Pads the class-index rows of a multi-label dataset; tf.one_hot maps it to a zero row.
NO_LABEL = -1


@dataclasses.dataclass
class Records:
    """A split's examples in their natural order: in memory (payloads + labels) or a TFDS stream."""

    count: int
    payloads: np.ndarray | None = None  # object array of encoded image bytes, or of file paths
    labels: np.ndarray | None = None  # int32 (n,), or (n, L) class indices padded with NO_LABEL
    payload_is_path: bool = False
    # () -> dataset of (encoded bytes, int32 label), the label a scalar or a (variable-length) index vector
    stream: Callable[[], tf.data.Dataset] | None = None

    def read_labels(self):
        """All labels in natural order (one pass over a TFDS split, images left encoded)."""
        if self.labels is not None:
            return self.labels
        labels = self.stream().map(as_written(lambda image, label: label))
        if labels.element_spec.shape.rank:
            return pad_label_lists(list(labels.as_numpy_iterator()))
        return np.fromiter(labels.as_numpy_iterator(), dtype=np.int32, count=self.count)


def pad_label_lists(label_lists):
    """[[3], [0, 5], []] -> int32 [[3, -1], [0, 5], [-1, -1]]: per-image class indices, one row each."""
    width = max([1] + [len(labels) for labels in label_lists])
    rows = np.full((len(label_lists), width), NO_LABEL, np.int32)
    for row, labels in zip(rows, label_lists):
        row[: len(labels)] = labels
    return rows


@dataclasses.dataclass
class DatasetSpec:
    """A resolved dataset: what the trainers need to size the model and the schedule."""

    name: str
    num_classes: int
    num_examples: dict  # split expression -> count (any "train[:90%]" on demand)
    class_names: list = dataclasses.field(default_factory=list)
    skipped: int = 0  # unreadable images left out (results.json: skipped_images)
    multi_label: bool = False  # several labels per image: multi-hot targets, --loss=sigmoid
    reader: object = dataclasses.field(default=None, repr=False, compare=False)

    def records(self, split: str) -> Records:
        return self.reader.records(split)


def multi_label_refusal(spec, what, fix):
    """The one-line error for something that needs exactly one label per image."""
    return f"{what} needs one label per image, but {spec.name} has images with several labels: {fix}"
