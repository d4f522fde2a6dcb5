"""Any TFDS image-classification dataset by name, streamed from a prepared data_dir.

The image is the `supervised_keys` image (else the feature `image`); the label the `supervised_keys`
label, else `label`, else `labels`. A label that is a Sequence of ClassLabel (voc's `labels`) makes
the dataset multi-label.
"""

import tensorflow as tf
import tensorflow_datasets as tfds

from trainers.data.spec import DatasetSpec, Records
from trainers.data.splits import SplitCounts, bad_split_message
from trainers.data.tfds_prepare import ensure_prepared, open_tfds_builder
from trainers.errors import DatasetError


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
            return ds.map(lambda ex: (ex[image_key], tf.cast(ex[label_key], tf.int32)))

        return Records(count=count, stream=stream)


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
