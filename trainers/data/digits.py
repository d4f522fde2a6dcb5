"""The UCI handwritten digits that ship with scikit-learn: 1,797 real 8x8 images, no download.

`digits` is every class; `digits:0-4` or `digits:5,6,7,8,9` keep some and relabel them 0..k-1 in
increasing order. The train/test split is stratified and fixed (20% of each class is test).
"""

import functools
import gzip
import importlib.metadata
import os

import numpy as np
import tensorflow as tf

from trainers.data.spec import DatasetSpec
from trainers.data.splits import MemoryReader
from trainers.errors import DatasetError

DIGITS_TEST_FRACTION = 0.2
# The split, in the order the pipeline reads each part: scikit-learn's stratified
# `train_test_split(np.arange(1797), test_size=DIGITS_TEST_FRACTION, stratify=digits,
# random_state=LAYOUT_SEED)` (trainers/data/splits.py), made once and stored, so that a command
# does not import scikit-learn to draw it (about 1 s of CPU at every digits command's start; the
# commands start Keras without it, keras_vit/startup.py) and the split no longer depends on
# scikit-learn's version. tests/test_digits.py checks that the two still agree.
SPLIT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits_split.npz")
# scikit-learn's copy of the UCI file: 64 pixel values (0..16) and the digit per row.
_SCANS = "sklearn/datasets/data/digits.csv.gz"


def parse_digit_classes(selection, dataset):
    """ "" -> 0..9; "0-4" -> [0..4]; "5,6,7" -> [5, 6, 7]; mixtures like "0-2,7" work too."""
    if not selection:
        return list(range(10))
    classes = set()
    try:
        for part in selection.split(","):
            lo, _, hi = part.strip().partition("-")
            lo, hi = int(lo), int(hi) if hi else int(lo)
            if not 0 <= lo <= hi <= 9:
                raise ValueError(part)
            classes.update(range(lo, hi + 1))
    except ValueError:
        raise DatasetError(
            f"bad digit classes in {dataset!r}: use digits, digits:0-4 or digits:5,6,7,8,9 "
            f"(digits 0-9, ranges low-high)"
        ) from None
    if len(classes) < 2:
        raise DatasetError(f"{dataset!r} selects {len(classes)} class: a classifier needs at least 2 digits")
    return sorted(classes)


def scans():
    """(the 1,797 8x8 scans with values 0..16, their digits), read from scikit-learn's copy of the
    file by its path: importing `sklearn.datasets` would import scikit-learn."""
    try:
        path = importlib.metadata.distribution("scikit-learn").locate_file(_SCANS)
    except importlib.metadata.PackageNotFoundError:
        raise DatasetError(
            "the digits data set is the copy scikit-learn ships, and scikit-learn is not installed: "
            'pip install "keras-vision-transformer[train]"'
        ) from None
    with gzip.open(path, "rt") as rows:
        table = np.loadtxt(rows, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(int)


def stored_split():
    """(train indices, test indices) of the scans, each in its reading order (SPLIT_FILE)."""
    with np.load(SPLIT_FILE, allow_pickle=False) as split:
        return split["train"].astype(np.int64), split["test"].astype(np.int64)


@functools.lru_cache(maxsize=1)
def _encoded_digits():
    """(PNG bytes of every scan, its digit, the train indices, the test indices): the same on every
    call, so made once per process. A process that reads the digits several times (the demo's
    stages, a pre-training run and its few-shot probes) would otherwise encode the 1,797 scans
    again for each."""
    images, target = scans()
    # 8x8 pixels with values 0..16 -> uint8 0..255, RGB, stored PNG-encoded like any other image.
    pixels = np.round(images * (255.0 / 16.0)).astype(np.uint8)
    rgb = np.repeat(pixels[..., None], 3, axis=-1)
    encoded = np.array([tf.io.encode_png(p).numpy() for p in rgb], dtype=object)
    train, test = stored_split()
    for array in (encoded, target, train, test):
        array.flags.writeable = False  # shared by every spec made from them
    return encoded, target, train, test


def digits_spec(dataset, selection):
    """The DatasetSpec of `dataset` ("digits", "digits:0-4", ...); `selection` is the part after ":"."""
    classes = parse_digit_classes(selection, dataset)
    encoded, target, train, test = _encoded_digits()
    relabel = {c: i for i, c in enumerate(classes)}
    splits = {}
    for name, idx in (("train", train), ("test", test)):
        idx = np.array([i for i in idx if target[i] in relabel])
        splits[name] = (encoded[idx], np.array([relabel[target[i]] for i in idx], dtype=np.int32))
    reader = MemoryReader(dataset, splits, payload_is_path=False)
    return DatasetSpec(
        name=dataset,
        num_classes=len(classes),
        num_examples=reader.split_counts(),
        class_names=[str(c) for c in classes],
        reader=reader,
    )
