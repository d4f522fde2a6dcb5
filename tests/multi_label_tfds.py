"""The TFDS builder behind tests/fixtures.py's `multi_label_tfds_dir`: a tiny dataset shaped like
voc, an image and a Sequence(ClassLabel) `labels`, whose label lists fake_tfds.py (single-label
datasets only) cannot make.

It is a module of its own because TFDS registers a builder's name when its class is defined, which
may happen once per process, and because only the sessions that use it should import
tensorflow_datasets."""

import numpy as np
import tensorflow_datasets as tfds
from fixtures import MULTI_LABEL_CLASSES, MULTI_LABEL_TFDS_LABELS


class MultiLabelSquares(tfds.core.GeneratorBasedBuilder):
    """fixtures.MULTI_LABEL_TFDS: one flat 6 x 5 image per list of MULTI_LABEL_TFDS_LABELS in each
    split, of value 30 * its index (+1 in test), so a read-back image says which list it carries."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        labels = tfds.features.Sequence(tfds.features.ClassLabel(names=MULTI_LABEL_CLASSES))
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {"image": tfds.features.Image(shape=(None, None, 3)), "labels": labels}
            ),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0), "test": self._generate_examples(1)}

    def _generate_examples(self, offset):
        for i, labels in enumerate(MULTI_LABEL_TFDS_LABELS):
            yield i, {"image": np.full((6, 5, 3), 30 * i + offset, np.uint8), "labels": labels}
