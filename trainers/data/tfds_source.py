"""Any TFDS image-classification dataset by name, streamed from a prepared data_dir.

The image is the `supervised_keys` image (else the feature `image`); the label the `supervised_keys`
label, else `label`, else `labels`. A label that is a Sequence of ClassLabel (voc's `labels`) makes
the dataset multi-label.

A damaged data_dir (a shard truncated by a copy cut short or a failing disk, a shard missing, a
record whose checksum fails) is a one-line DatasetError naming the file, never a traceback from
inside the training loop: opening the dataset compares each split's files with the byte count TFDS
recorded when it prepared them (a stat per shard), and `damaged_files` finds the file after a
record fails to read mid-run (trainers/faults.py).
"""

import struct

import tensorflow as tf
import tensorflow_datasets as tfds

from trainers.data.spec import DatasetSpec, Records
from trainers.data.splits import SplitCounts, bad_split_message
from trainers.data.tfds_prepare import ensure_prepared, open_tfds_builder
from trainers.errors import DatasetError
from trainers.graph_functions import as_written


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
            raise DatasetError(bad_split_message(split, self._dataset, names, e)) from None

    def records(self, split):
        count = self.count(split)
        builder, image_key, label_key = self._builder, self._image_key, self._label_key
        # Every image feature stays encoded: the pipeline decodes only the examples it keeps (after
        # skipping on resume and taking this host's share), and only the one it needs.
        decoders = {
            key: tfds.decode.SkipDecoding()
            for key, feature in builder.info.features.items()
            if isinstance(feature, tfds.features.Image)
        }

        def stream():
            ds = builder.as_dataset(split=split, shuffle_files=False, decoders=decoders)
            return ds.map(as_written(lambda ex: (ex[image_key], tf.cast(ex[label_key], tf.int32))))

        return Records(count=count, stream=stream)

    def damaged_files(self, checksums=True):
        """[(path, what is wrong)] for the shards of every split that are missing, truncated or
        (with `checksums`, reading every record) corrupt; [] when all read."""
        damaged = []
        for split in self._builder.info.splits.values():
            damaged += _damaged_shards(split)
        if damaged or not checksums:
            return damaged
        for split in self._builder.info.splits.values():
            for path in split.filepaths:
                try:
                    for _ in tf.data.TFRecordDataset(str(path)):
                        pass
                except tf.errors.OpError as e:
                    damaged.append((str(path), _tf_message(e)))
        return damaged

    def check_files(self):
        """Raises DatasetError naming the damaged shard when a split's files do not add up to the
        bytes TFDS recorded (every TFRecord is its bytes plus a 16-byte frame)."""
        for split in self._builder.info.splits.values():
            expected = int(split.num_bytes or 0) + 16 * int(split.num_examples or 0)
            try:
                found = sum(tf.io.gfile.stat(str(p)).length for p in split.filepaths)
            except tf.errors.OpError:
                found = None  # a missing shard: named below
            if not split.num_bytes or found == expected:
                continue
            damaged = _damaged_shards(split)
            if damaged:
                raise DatasetError(damaged_message(self._dataset, damaged))


def damaged_message(dataset, damaged):
    files = "; ".join(f"{path}: {why}" for path, why in damaged[:3])
    more = f" (and {len(damaged) - 3} more)" if len(damaged) > 3 else ""
    return (
        f"{dataset} has a damaged data file: {files}{more}. Prepare the dataset again with "
        f"`python -m trainers.prepare --dataset={dataset} --data_dir=DIR` (after removing its "
        "folder), or copy that file back from a good copy."
    )


def _damaged_shards(split):
    """[(path, what is wrong)] for the shards of a TFDS split that are missing or whose TFRecord
    frames do not end exactly at the end of the file after the recorded number of examples."""
    lengths = list(split.shard_lengths or [])
    damaged = []
    for i, path in enumerate(split.filepaths):
        path = str(path)
        expected = lengths[i] if i < len(lengths) else None
        try:
            why = _frame_error(path, expected)
        except tf.errors.NotFoundError:
            why = "missing"
        except tf.errors.OpError as e:
            why = _tf_message(e)
        if why:
            damaged.append((path, why))
    return damaged


def _tf_message(error):
    """TensorFlow's message without the function-node prefix and the op suffix."""
    return " ".join(error.message.split()).split("}} ")[-1].split(" [Op:")[0]


def _frame_error(path, expected):
    """Walks the TFRecord frames of `path` (an 8-byte length, a 4-byte checksum, the record, a
    4-byte checksum), reading 8 bytes per record; what is wrong with them, or None."""
    size = tf.io.gfile.stat(path).length
    count, position = 0, 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while position < size:
            if size - position < 16:
                return f"truncated: {size} bytes, cut inside record {count + 1}"
            f.seek(position)
            (length,) = struct.unpack("<Q", f.read(8))
            position += 16 + length
            if position > size:
                return f"truncated: {size} bytes, cut inside record {count + 1}"
            count += 1
    if expected is not None and count != expected:
        return f"{count} records where TFDS wrote {expected}"
    return None


def tfds_spec(dataset, data_dir, manual_dir):
    """The DatasetSpec of the TFDS dataset `dataset`, prepared in `data_dir` first if it is not yet."""
    builder = open_tfds_builder(dataset, data_dir)
    features = builder.info.features
    image_key, label_keys = "image", ("label", "labels")
    keys = builder.info.supervised_keys
    if isinstance(keys, tuple) and len(keys) == 2 and all(isinstance(k, str) for k in keys):
        image_key, label_keys = keys[0], (keys[1],)
    label_key, label, multi_label = _class_label(features, label_keys)
    if not (
        image_key in features.keys()
        and isinstance(features[image_key], tfds.features.Image)
        and label is not None
    ):
        raise DatasetError(
            f"{dataset} is not an image classification dataset (it needs an image feature "
            f"and a class label): use e.g. oxford_iiit_pet, cifar10, folder:PATH or digits"
        )
    ensure_prepared(builder, dataset, manual_dir)
    reader = _TfdsReader(builder, image_key, label_key, dataset)
    reader.check_files()
    counts = {name: int(info.num_examples) for name, info in builder.info.splits.items()}
    return DatasetSpec(
        name=dataset,
        num_classes=int(label.num_classes),
        num_examples=SplitCounts(reader.count, counts),
        class_names=list(label.names),
        multi_label=multi_label,
        reader=reader,
    )


def _class_label(features, keys):
    """(key, ClassLabel, multi_label) of the first key that is a ClassLabel or a Sequence of one (voc's
    `labels`: every class present in the image); (None, None, False) when there is none."""
    for key in keys:
        feature = features[key] if key in features.keys() else None
        if isinstance(feature, tfds.features.ClassLabel):
            return key, feature, False
        if isinstance(feature, tfds.features.Sequence) and isinstance(
            feature.feature, tfds.features.ClassLabel
        ):
            return key, feature.feature, True
    return None, None, False
