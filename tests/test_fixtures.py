"""tests/fixtures.py: the trainer flags set the tiny shape's fields, a fake TFDS data_dir is
prepared once per session, and the multi-label one reads back with the label lists it was made of."""

import os
import tempfile

import pytest
from fixtures import (
    MULTI_LABEL_CLASSES,
    MULTI_LABEL_TFDS,
    MULTI_LABEL_TFDS_LABELS,
    TINY,
    TINY_CONFIG,
    TINY_FLAGS,
    make_fake_tfds,
    shared_fake_tfds,
    shared_run_folder,
    tiny_hybrid,
    tiny_vit,
)

from trainers import finetune
from trainers import flags as trainer_flags


def test_the_flags_set_the_config_fields_of_the_shape():
    config = trainer_flags.parse_flags(["finetune", "--dataset=digits", *TINY_FLAGS], finetune.get_config)
    assert {name: config[name] for name in TINY_CONFIG} == TINY_CONFIG


def test_the_tiny_models_have_the_shape():
    model = tiny_vit(num_layers=2)
    assert (model.hidden_size, model.num_layers, model.grid_size) == (TINY["hidden_size"], 2, (4, 4))
    hybrid = tiny_hybrid()
    assert hybrid.grid_size == (4, 4) and "conv_root" in [layer.name for layer in hybrid.layers]


def test_children_write_their_temporary_files_in_pytest_s_base_folder(tmp_path_factory):
    # A child a test kills (SIGKILL) leaves its temporary files behind: tens of TensorFlow's
    # autograph files a killed trainer run. Catches TMPDIR left at /tmp for the children. (The
    # test run's folder, which every worker's base folder is in.)
    base = str(shared_run_folder(tmp_path_factory))
    assert os.environ["TMPDIR"].startswith(base + os.sep) and os.path.isdir(os.environ["TMPDIR"])


@pytest.mark.parametrize("fake_tfds_dir", ["cifar10"], indirect=True)
def test_a_fake_tfds_dir_is_made_once_per_session(fake_tfds_dir, cifar10_data_dir, tmp_path_factory):
    assert fake_tfds_dir == cifar10_data_dir == shared_fake_tfds("cifar10", tmp_path_factory)
    assert "cifar10" in os.listdir(fake_tfds_dir)


def test_making_a_fake_tfds_dir_leaves_no_source_files_in_the_temporary_folder(tmp_path, monkeypatch):
    # ../shared/tools/fake_tfds.py leaves its generated source files in a new temporary folder;
    # every test run left two or three there before they went into a folder that is removed.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "system_temp"))
    os.mkdir(tempfile.tempdir)
    make_fake_tfds(tmp_path / "tfds", "cifar10", per_class=1, test_per_class=1)
    assert "cifar10" in os.listdir(tmp_path / "tfds")
    # (TFDS's builder leaves an empty folder of its own there, `tmp...tfds`.)
    assert [name for name in os.listdir(tempfile.tempdir) if name.startswith("fake_")] == []


def test_the_multi_label_tfds_dir_reads_back_its_empty_and_uneven_label_lists(multi_label_tfds_dir):
    import tensorflow_datasets as tfds

    builder = tfds.builder(MULTI_LABEL_TFDS, data_dir=multi_label_tfds_dir)
    assert builder.info.features["labels"].feature.names == MULTI_LABEL_CLASSES
    # 7 images a split: the multi-label test takes a training epoch as one batch of 7.
    splits = builder.info.splits
    assert sorted(splits) == ["test", "train"]
    assert splits["train"].num_examples == splits["test"].num_examples == 7
    for split, offset in (("train", 0), ("test", 1)):
        # An image's value says which list it was made with (30 per list, +1 in test).
        read = {
            int(example["image"][0, 0, 0]): example["labels"].tolist()
            for example in tfds.as_numpy(builder.as_dataset(split=split))
        }
        assert read == {30 * i + offset: labels for i, labels in enumerate(MULTI_LABEL_TFDS_LABELS)}
        # What the multi-label tests need of it: an image without labels, lists of several lengths.
        assert [] in read.values() and len({len(labels) for labels in read.values()}) == 4
