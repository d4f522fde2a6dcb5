"""Few-shot subsets: exactly k examples of every class of a split, drawn once with the run's seed."""

import numpy as np
import tensorflow as tf
from absl import logging

from trainers.data.spec import Records
from trainers.errors import DatasetError
from trainers.graph_functions import as_written

# Few-shot subsets of a TFDS split are held in memory up to this size (encoded bytes).
IN_MEMORY_LIMIT_BYTES = 256 << 20


def examples_per_class_subset(records, k, seed, num_classes, dataset, split):
    """A fixed, seeded subset with exactly k examples of every class, in natural order, held in memory."""
    labels = records.read_labels()
    counts = np.bincount(labels, minlength=num_classes)
    short = [c for c in range(num_classes) if counts[c] < k]
    if short:
        raise DatasetError(
            f"{dataset} {split} has fewer than {k} examples of class {short[0]} "
            f"({counts[short[0]]}): lower --examples_per_class or use a larger split"
        )
    rng = np.random.default_rng(seed)
    chosen = np.sort(
        np.concatenate(
            [rng.choice(np.flatnonzero(labels == c), k, replace=False) for c in range(num_classes)]
        )
    )
    if records.payloads is not None:
        return Records(
            count=len(chosen),
            payloads=records.payloads[chosen],
            labels=labels[chosen],
            payload_is_path=records.payload_is_path,
        )
    wanted = tf.constant(np.isin(np.arange(records.count), chosen))
    stream = records.stream

    @as_written
    def is_wanted(index, example):
        return wanted[index]

    @as_written
    def example_of(index, example):
        return example

    def subset():
        return stream().enumerate().filter(is_wanted).map(example_of)

    payloads, size = [], 0
    for image, _ in subset().as_numpy_iterator():
        payloads.append(image)
        size += len(image)
        if size > IN_MEMORY_LIMIT_BYTES:
            # Too big to hold (and to embed in the input graph): read the subset from the split each pass.
            logging.info(
                "%s %s: %d examples per class stay on disk (over %d MB)",
                dataset,
                split,
                k,
                IN_MEMORY_LIMIT_BYTES >> 20,
            )
            return Records(count=len(chosen), labels=labels[chosen], stream=subset)
    return Records(count=len(chosen), payloads=np.array(payloads, dtype=object), labels=labels[chosen])
