"""Splits: TFDS's slicing syntax ("train[:90%]+test[10:]") for every source, and splits held in memory.

Folders and digits keep their splits in memory as (payloads, labels) arrays in a fixed natural order;
a split expression selects slices of them exactly as TFDS would slice a prepared split.
"""

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from trainers.data.spec import NO_LABEL, Records
from trainers.errors import DatasetError, first_line

# Fixed, not the run's --seed: the train/test split and the natural order of a folder must not move
# between runs, or "train[90%:]" would mean different images each time.
LAYOUT_SEED = 0


class SplitCounts(dict):
    """split expression -> number of examples; any valid expression ("train[:90%]") is computed on demand."""

    def __init__(self, counter, known):
        super().__init__(known)
        self._counter = counter

    def __missing__(self, split):
        self[split] = self._counter(split)
        return self[split]

    def get(self, split, default=None):
        try:
            return self[split]
        except DatasetError:
            return default


def bad_split_message(split, dataset, names, error):
    return (
        f"bad split {split!r} for {dataset} ({first_line(error)}): "
        f"use one of {', '.join(sorted(names))}, optionally sliced like train[:90%] or train[90%:]"
    )


@dataclasses.dataclass
class _SplitSize:
    """The part of a TFDS SplitInfo that ReadInstruction.to_absolute reads."""

    num_examples: int

    @property
    def shard_lengths(self):
        return [self.num_examples]


def absolute_slices(split, sizes, dataset):
    """TFDS split syntax ("train[:90%]+test[10:]") -> [(split name, start, stop)] over `sizes`."""
    infos = {name: _SplitSize(n) for name, n in sizes.items()}
    try:
        instructions = tfds.core.ReadInstruction.from_spec(split).to_absolute(infos)
    except (ValueError, KeyError, AssertionError, TypeError) as e:
        raise DatasetError(bad_split_message(split, dataset, list(sizes), e)) from None
    return [(i.splitname, i.from_ or 0, sizes[i.splitname] if i.to is None else i.to) for i in instructions]


class MemoryReader:
    """Splits held in memory as (payloads, labels) arrays in their natural order."""

    def __init__(self, dataset, splits, payload_is_path):
        self._dataset = dataset
        self._splits = splits  # name -> (payloads object array, labels int32 array)
        self._payload_is_path = payload_is_path

    def sizes(self):
        return {name: len(labels) for name, (_, labels) in self._splits.items()}

    def count(self, split):
        return sum(stop - start for _, start, stop in absolute_slices(split, self.sizes(), self._dataset))

    def split_counts(self):
        return SplitCounts(self.count, self.sizes())

    def records(self, split):
        parts = [
            (self._splits[name][0][start:stop], self._splits[name][1][start:stop])
            for name, start, stop in absolute_slices(split, self.sizes(), self._dataset)
        ]
        payloads = np.concatenate([p for p, _ in parts]) if parts else np.array([], dtype=object)
        labels = _concatenate_labels([label for _, label in parts])
        return Records(
            count=len(labels), payloads=payloads, labels=labels, payload_is_path=self._payload_is_path
        )


def _concatenate_labels(parts):
    """Joins the labels of split slices; multi-label rows are padded to the widest slice first."""
    if parts[0].ndim == 1:
        return np.concatenate(parts).astype(np.int32)
    width = max(part.shape[1] for part in parts)
    return np.concatenate(
        [np.pad(part, ((0, 0), (0, width - part.shape[1])), constant_values=NO_LABEL) for part in parts]
    ).astype(np.int32)
