"""Where images come from: any TFDS image-classification dataset by name, an image folder, the digits.

`get_spec(name)` resolves a dataset once and returns a `DatasetSpec`; `spec.records(split)` gives a
split's examples in a fixed natural order, either held in memory (folders, digits, few-shot subsets)
or streamed from a prepared TFDS data_dir. Splits accept TFDS slicing everywhere ("train[:90%]").

A dataset is multi-label (`spec.multi_label`) when an image can carry several classes: a TFDS label
that is a Sequence of ClassLabel (voc's `labels`), or a folder whose class folders share images. Its
labels are the class indices of each image, padded with -1 (`NO_LABEL`) to a common width; the
pipeline turns them into multi-hot vectors.
"""
import dataclasses
import hashlib
import os
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from trainers import augment

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
DIGITS_TEST_FRACTION = 0.2
# Fixed, not the run's --seed: the train/test split and the natural order of a folder must not move
# between runs, or "train[90%:]" would mean different images each time.
_LAYOUT_SEED = 0
# Few-shot subsets of a TFDS split are held in memory up to this size (encoded bytes).
IN_MEMORY_LIMIT_BYTES = 256 << 20
# Pads the class-index rows of a multi-label dataset; tf.one_hot maps it to a zero row.
NO_LABEL = -1


class DatasetError(ValueError):
    """A dataset that cannot be used as asked; the message is one actionable line."""


@dataclasses.dataclass
class Records:
    """A split's examples in their natural order: in memory (payloads + labels) or a TFDS stream."""
    count: int
    payloads: np.ndarray | None = None      # object array of encoded image bytes, or of file paths
    labels: np.ndarray | None = None        # int32 (n,), or (n, L) class indices padded with NO_LABEL
    payload_is_path: bool = False
    # () -> dataset of (encoded bytes, int32 label), the label a scalar or a (variable-length) index vector
    stream: Callable[[], tf.data.Dataset] | None = None

    def read_labels(self):
        """All labels in natural order (one pass over a TFDS split, images left encoded)."""
        if self.labels is not None:
            return self.labels
        labels = self.stream().map(lambda image, label: label)
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


@dataclasses.dataclass
class DatasetSpec:
    """A resolved dataset: what the trainers need to size the model and the schedule."""
    name: str
    num_classes: int
    num_examples: dict
    class_names: list = dataclasses.field(default_factory=list)
    source: str = "tfds"                     # "tfds", "folder" or "digits"
    data_dir: str | None = None
    manual_dir: str | None = None
    skipped: int = 0                         # unreadable images found and left out
    skipped_files: list = dataclasses.field(default_factory=list)
    multi_label: bool = False                # several labels per image: multi-hot targets, --loss=sigmoid
    reader: object = dataclasses.field(default=None, repr=False, compare=False)

    def records(self, split: str) -> Records:
        return self.reader.records(split)


def get_spec(dataset: str, data_dir: str | None = None, manual_dir: str | None = None) -> DatasetSpec:
    """Resolves `dataset` ("cifar10", "folder:/path", "digits", "digits:0-4", ...) to a DatasetSpec."""
    if not isinstance(dataset, str) or not dataset.strip():
        raise DatasetError("--dataset is empty: give a TFDS name (e.g. oxford_iiit_pet), folder:PATH "
                           "or digits")
    dataset = dataset.strip()
    if dataset.startswith("folder:"):
        return _folder_spec(dataset, dataset[len("folder:"):])
    if dataset == "digits" or dataset.startswith("digits:"):
        return _digits_spec(dataset, dataset[len("digits:"):] if ":" in dataset else "")
    return _tfds_spec(dataset, data_dir, manual_dir)


# ---------------------------------------------------------------------------------------------- splits

def _absolute_slices(split, sizes, dataset):
    """TFDS split syntax ("train[:90%]+test[10:]") -> [(split name, start, stop)] over `sizes`."""
    import tensorflow_datasets as tfds
    infos = {name: _SplitSize(n) for name, n in sizes.items()}
    try:
        instructions = tfds.core.ReadInstruction.from_spec(split).to_absolute(infos)
    except (ValueError, KeyError, AssertionError, TypeError) as e:
        raise DatasetError(_bad_split_message(split, dataset, list(sizes), e)) from None
    return [(i.splitname, i.from_ or 0, sizes[i.splitname] if i.to is None else i.to) for i in instructions]


@dataclasses.dataclass
class _SplitSize:
    num_examples: int

    @property
    def shard_lengths(self):
        return [self.num_examples]


def _bad_split_message(split, dataset, names, error):
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (f"bad split {split!r} for {dataset} ({reason}): use one of {', '.join(sorted(names))}, "
            f"optionally sliced like train[:90%] or train[90%:]")


class _MemoryReader:
    """Splits held in memory as (payloads, labels) arrays in their natural order."""

    def __init__(self, dataset, splits, payload_is_path):
        self._dataset = dataset
        self._splits = splits              # name -> (payloads object array, labels int32 array)
        self._payload_is_path = payload_is_path

    def sizes(self):
        return {name: len(labels) for name, (_, labels) in self._splits.items()}

    def count(self, split):
        return sum(stop - start for _, start, stop in _absolute_slices(split, self.sizes(), self._dataset))

    def records(self, split):
        parts = [(self._splits[name][0][start:stop], self._splits[name][1][start:stop])
                 for name, start, stop in _absolute_slices(split, self.sizes(), self._dataset)]
        payloads = np.concatenate([p for p, _ in parts]) if parts else np.array([], dtype=object)
        labels = _concatenate_labels([label for _, label in parts])
        return Records(count=len(labels), payloads=payloads, labels=labels,
                       payload_is_path=self._payload_is_path)


def _concatenate_labels(parts):
    """Joins the labels of split slices; multi-label rows are padded to the widest slice first."""
    if parts[0].ndim == 1:
        return np.concatenate(parts).astype(np.int32)
    width = max(part.shape[1] for part in parts)
    return np.concatenate([np.pad(part, ((0, 0), (0, width - part.shape[1])), constant_values=NO_LABEL)
                           for part in parts]).astype(np.int32)


# ------------------------------------------------------------------------------------------------ TFDS

class _TfdsReader:
    def __init__(self, builder, image_key, label_key, dataset):
        self._builder = builder
        self._image_key = image_key
        self._label_key = label_key
        self._dataset = dataset

    def count(self, split):
        try:
            return int(self._builder.info.splits[split].num_examples)
        except (ValueError, KeyError, AssertionError, TypeError) as e:
            names = list(self._builder.info.splits.keys())
            raise DatasetError(_bad_split_message(split, self._dataset, names, e)) from None

    def records(self, split):
        import tensorflow_datasets as tfds
        count = self.count(split)
        builder, image_key, label_key = self._builder, self._image_key, self._label_key
        # Every image feature stays encoded: the pipeline decodes only the examples it keeps (after
        # skipping on resume and taking this host's share), and only the one it needs.
        decoders = {key: tfds.decode.SkipDecoding() for key, feature in builder.info.features.items()
                    if isinstance(feature, tfds.features.Image)}

        def stream():
            ds = builder.as_dataset(split=split, shuffle_files=False, decoders=decoders)
            return ds.map(lambda ex: (ex[image_key], tf.cast(ex[label_key], tf.int32)))

        return Records(count=count, stream=stream)


def _tfds_spec(dataset, data_dir, manual_dir):
    import tensorflow_datasets as tfds

    from trainers.tfds_prepare import ensure_prepared, open_tfds_builder
    builder = open_tfds_builder(dataset, data_dir)
    features = builder.info.features
    image_key, label_keys = "image", ("label", "labels")
    keys = builder.info.supervised_keys
    if isinstance(keys, tuple) and len(keys) == 2 and all(isinstance(k, str) for k in keys):
        image_key, label_keys = keys[0], (keys[1],)
    label_key, label, multi_label = _class_label(features, label_keys)
    if not (image_key in features.keys() and isinstance(features[image_key], tfds.features.Image)
            and label is not None):
        raise DatasetError(f"{dataset} is not an image classification dataset (it needs an image feature "
                           f"and a class label): use e.g. oxford_iiit_pet, cifar10, folder:PATH or digits")
    ensure_prepared(builder, dataset, manual_dir)
    reader = _TfdsReader(builder, image_key, label_key, dataset)
    counts = {name: int(info.num_examples) for name, info in builder.info.splits.items()}
    root = builder.data_dir[: -len(builder.info.full_name)].rstrip("/")
    return DatasetSpec(name=dataset, num_classes=int(label.num_classes),
                       num_examples=SplitCounts(reader.count, counts), class_names=list(label.names),
                       source="tfds", data_dir=root, manual_dir=manual_dir, multi_label=multi_label,
                       reader=reader)


def _class_label(features, keys):
    """(key, ClassLabel, multi_label) of the first key that is a ClassLabel or a Sequence of one (voc's
    `labels`: every class present in the image); (None, None, False) when there is none."""
    import tensorflow_datasets as tfds
    for key in keys:
        feature = features[key] if key in features.keys() else None
        if isinstance(feature, tfds.features.ClassLabel):
            return key, feature, False
        if isinstance(feature, tfds.features.Sequence) and isinstance(feature.feature,
                                                                      tfds.features.ClassLabel):
            return key, feature.feature, True
    return None, None, False


# ---------------------------------------------------------------------------------------------- folder

def _list_images(folder):
    return sorted(f for f in os.listdir(folder)
                  if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith(".")
                  and os.path.isfile(os.path.join(folder, f)))


def _class_folders(split_dir):
    return sorted(d for d in os.listdir(split_dir)
                  if not d.startswith(".") and os.path.isdir(os.path.join(split_dir, d)))


def _readable(paths):
    """Boolean mask: which files TensorFlow can decode (the same decoder the pipeline uses)."""
    if not paths:
        return np.zeros(0, bool)
    files = tf.constant(paths)
    ds = tf.data.Dataset.range(len(paths)).map(
        lambda i: (i, tf.shape(augment.decode(tf.io.read_file(tf.gather(files, i))))[0]),
        num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
    ok = np.zeros(len(paths), bool)
    for i, _ in ds.as_numpy_iterator():
        ok[i] = True
    return ok


def _folder_spec(dataset, path):
    layout = "PATH/train/<class>/*.jpg|png (and PATH/test/<class>/... for evaluation)"
    path = os.path.abspath(os.path.expanduser(path)) if path else ""
    if not path or not os.path.isdir(path):
        raise DatasetError(f"image folder {path or '(empty)'!r} does not exist: "
                           f"--dataset=folder:PATH expects {layout}")
    train_dir = os.path.join(path, "train")
    if not os.path.isdir(train_dir) or not _class_folders(train_dir):
        raise DatasetError(f"{path} has no train/<class>/ sub-folders: "
                           f"--dataset=folder:PATH expects {layout}")
    class_names = _class_folders(train_dir)
    index = {name: i for i, name in enumerate(class_names)}
    examples, skipped = {}, []
    for split in _class_folders(path):
        classes = _class_folders(os.path.join(path, split))
        if not classes:
            continue
        unknown = [c for c in classes if c not in index]
        if unknown:
            raise DatasetError(f"{path}/{split}/ has class folders that train/ lacks "
                               f"({', '.join(unknown[:5])}): every split must use the classes of train/")
        files = [(os.path.join(path, split, c, f), index[c]) for c in classes
                 for f in _list_images(os.path.join(path, split, c))]
        ok = _readable([f for f, _ in files])
        skipped += [f for (f, _), good in zip(files, ok) if not good]
        examples[split] = _merge_copies([item for item, good in zip(files, ok) if good])
    multi_label = any(len(labels) > 1 for split in examples.values() for _, labels in split)
    splits = {}
    for split, items in examples.items():
        # A fixed shuffle makes slices such as train[90%:] a sample of every class, not the last classes.
        items = [items[i] for i in np.random.default_rng(_LAYOUT_SEED).permutation(len(items))]
        classes = [labels for _, labels in items]
        splits[split] = (np.array([path for path, _ in items], dtype=object),
                         pad_label_lists(classes) if multi_label else np.array(classes, np.int32).reshape(-1))
    if not len(splits.get("train", ((), ()))[1]):
        raise DatasetError(f"{train_dir} has no readable images ({', '.join(IMAGE_EXTENSIONS)}): "
                           f"--dataset=folder:PATH expects {layout}")
    if skipped:
        logging.warning("Skipped %d unreadable image(s) in %s, e.g. %s", len(skipped), path, skipped[0])
    reader = _MemoryReader(dataset, splits, payload_is_path=True)
    return DatasetSpec(name=dataset, num_classes=len(class_names),
                       num_examples=SplitCounts(reader.count, reader.sizes()), class_names=class_names,
                       source="folder", data_dir=path, skipped=len(skipped), skipped_files=skipped,
                       multi_label=multi_label, reader=reader)


def _merge_copies(files):
    """[(path, class)] -> [(path, [classes])]: one example per image, with every class folder it is in.

    The same image in several class folders of a split (the same file name and the same bytes: a copy,
    a hard link or a symbolic link) is one example carrying all those classes. Files that only share a
    name (folders numbered 0001.jpg, ... per class) stay separate examples; only those of equal size
    are read and compared. The order is that of the first copy of each image.
    """
    same_name_and_size = {}
    for i, (path, _) in enumerate(files):
        same_name_and_size.setdefault((os.path.basename(path), os.path.getsize(path)), []).append(i)
    first_copy = list(range(len(files)))
    for group in same_name_and_size.values():
        if len(group) > 1:
            seen = {}
            for i in group:
                first_copy[i] = seen.setdefault(_file_digest(files[i][0]), i)
    examples = {}
    for i, (path, label) in enumerate(files):
        examples.setdefault(first_copy[i], (path, []))[1].append(label)
    return [(path, sorted(labels)) for path, labels in examples.values()]


def _file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.digest()


# ---------------------------------------------------------------------------------------------- digits

def parse_digit_classes(selection, dataset):
    """"" -> 0..9; "0-4" -> [0..4]; "5,6,7" -> [5, 6, 7]; mixtures like "0-2,7" work too."""
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
        raise DatasetError(f"bad digit classes in {dataset!r}: use digits, digits:0-4 or digits:5,6,7,8,9 "
                           f"(digits 0-9, ranges low-high)") from None
    if len(classes) < 2:
        raise DatasetError(f"{dataset!r} selects {len(classes)} class: a classifier needs at least 2 digits")
    return sorted(classes)


def _digits_spec(dataset, selection):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    classes = parse_digit_classes(selection, dataset)
    digits = load_digits()
    # 8x8 pixels with values 0..16 -> uint8 0..255, RGB, stored PNG-encoded like any other image.
    pixels = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    rgb = np.repeat(pixels[..., None], 3, axis=-1)
    encoded = np.array([tf.io.encode_png(p).numpy() for p in rgb], dtype=object)
    train, test = train_test_split(np.arange(len(pixels)), test_size=DIGITS_TEST_FRACTION,
                                   stratify=digits.target, random_state=_LAYOUT_SEED)
    relabel = {c: i for i, c in enumerate(classes)}
    splits = {}
    for name, idx in (("train", train), ("test", test)):
        idx = np.array([i for i in idx if digits.target[i] in relabel])
        splits[name] = (encoded[idx], np.array([relabel[digits.target[i]] for i in idx], dtype=np.int32))
    reader = _MemoryReader(dataset, splits, payload_is_path=False)
    return DatasetSpec(name=dataset, num_classes=len(classes),
                       num_examples=SplitCounts(reader.count, reader.sizes()),
                       class_names=[str(c) for c in classes], source="digits", reader=reader)


# ---------------------------------------------------------------------------------------- few-shot

def examples_per_class_subset(records, k, seed, num_classes, dataset, split):
    """A fixed, seeded subset with exactly k examples of every class, in natural order, held in memory."""
    labels = records.read_labels()
    counts = np.bincount(labels, minlength=num_classes)
    short = [c for c in range(num_classes) if counts[c] < k]
    if short:
        raise DatasetError(f"{dataset} {split} has fewer than {k} examples of class {short[0]} "
                           f"({counts[short[0]]}): lower --examples_per_class or use a larger split")
    rng = np.random.default_rng(seed)
    chosen = np.sort(np.concatenate([rng.choice(np.flatnonzero(labels == c), k, replace=False)
                                     for c in range(num_classes)]))
    if records.payloads is not None:
        return Records(count=len(chosen), payloads=records.payloads[chosen], labels=labels[chosen],
                       payload_is_path=records.payload_is_path)
    wanted = tf.constant(np.isin(np.arange(records.count), chosen))
    stream = records.stream

    def subset():
        return stream().enumerate().filter(lambda i, example: wanted[i]).map(lambda i, example: example)

    payloads, size = [], 0
    for image, _ in subset().as_numpy_iterator():
        payloads.append(image)
        size += len(image)
        if size > IN_MEMORY_LIMIT_BYTES:
            # Too big to hold (and to embed in the input graph): read the subset from the split each pass.
            logging.info("%s %s: %d examples per class stay on disk (over %d MB)", dataset, split, k,
                         IN_MEMORY_LIMIT_BYTES >> 20)
            return Records(count=len(chosen), labels=labels[chosen], stream=subset)
    return Records(count=len(chosen), payloads=np.array(payloads, dtype=object), labels=labels[chosen])
