"""The UCI handwritten digits that ship with scikit-learn: 1,797 real 8x8 images, no download.

`digits` is every class; `digits:0-4` or `digits:5,6,7,8,9` keep some and relabel them 0..k-1 in
increasing order. The train/test split is stratified and fixed (20% of each class is test).
"""

import functools

import numpy as np
import tensorflow as tf

from trainers.data.spec import DatasetSpec
from trainers.data.splits import LAYOUT_SEED, MemoryReader
from trainers.errors import DatasetError

DIGITS_TEST_FRACTION = 0.2


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


@functools.lru_cache(maxsize=1)
def _encoded_digits():
    """(PNG bytes of every scan, its digit, the train indices, the test indices): the same on every
    call, so made once per process. A process that reads the digits several times (the demo's
    stages, a pre-training run and its few-shot probes) would otherwise encode the 1,797 scans
    again for each."""
    # Imported here on purpose: scikit-learn adds about 0.2 s to every trainer's start (measured on
    # top of TensorFlow and TFDS), and only runs on the digits need it.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    # 8x8 pixels with values 0..16 -> uint8 0..255, RGB, stored PNG-encoded like any other image.
    pixels = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    rgb = np.repeat(pixels[..., None], 3, axis=-1)
    encoded = np.array([tf.io.encode_png(p).numpy() for p in rgb], dtype=object)
    train, test = train_test_split(
        np.arange(len(pixels)),
        test_size=DIGITS_TEST_FRACTION,
        stratify=digits.target,
        random_state=LAYOUT_SEED,
    )
    for array in (encoded, digits.target, train, test):
        array.flags.writeable = False  # shared by every spec made from them
    return encoded, digits.target, train, test


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
