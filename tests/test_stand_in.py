"""python -m trainers.prepare --stand_in=N (trainers/data/stand_in.py): a stand-in of a TFDS dataset,
made offline by the dataset's own builder, that every --data_dir command reads as the real one."""

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from trainers import data, prepare
from trainers.data import stand_in


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    """A stand-in of oxford_iiit_pet, 2 training and 1 test image per class: its data_dir."""
    data_dir = str(tmp_path_factory.mktemp("stand_in") / "tfds")
    code = prepare.main(["prepare", "--dataset=oxford_iiit_pet", "--stand_in=2", f"--data_dir={data_dir}"])
    assert code == 0
    return data_dir


def test_the_stand_in_is_the_real_datasets_format(pets, capsys):
    builder = tfds.builder("oxford_iiit_pet", data_dir=pets)
    assert builder.is_prepared() and str(builder.info.version) == "4.0.0"
    assert {name: split.num_examples for name, split in builder.info.splits.items()} == {
        "train": 74,
        "test": 37,
    }
    assert builder.info.features["label"].num_classes == 37
    # The trainers' reader sees the dataset a real download gives.
    spec = data.get_spec("oxford_iiit_pet", data_dir=pets)
    assert spec.num_classes == 37 and spec.num_examples == {"train": 74, "test": 37}
    # No download folders left behind: only the dataset.
    assert os.listdir(pets) == ["oxford_iiit_pet"]
    # Run again, it keeps what is there.
    code = prepare.main(["prepare", "--dataset=oxford_iiit_pet", "--stand_in=5", f"--data_dir={pets}"])
    assert code == 0 and "oxford_iiit_pet was already prepared in" in capsys.readouterr().out


def test_every_class_and_species_is_there_and_the_classes_can_be_told_apart(pets):
    examples = {
        split: list(tfds.as_numpy(tfds.load("oxford_iiit_pet", split=split, data_dir=pets)))
        for split in ("train", "test")
    }
    names = tfds.builder("oxford_iiit_pet", data_dir=pets).info.features["label"].names
    for example in examples["train"] + examples["test"]:
        name = names[example["label"]]
        assert example["file_name"].decode().startswith(name + "_")
        assert example["species"] == (0 if name[0].isupper() else 1)  # cats: capitalised breeds
        assert example["image"].ndim == 3 and example["image"].shape[2] == 3
        assert example["segmentation_mask"].shape[:2] == example["image"].shape[:2]
    assert sorted({int(e["label"]) for e in examples["test"]}) == list(range(37))

    def mean_colour(example):
        return example["image"].reshape(-1, 3).mean(axis=0)

    # Learnable: the nearest training class by mean colour alone names most test images.
    centroids = np.zeros((37, 3))
    for example in examples["train"]:
        centroids[example["label"]] += mean_colour(example) / 2
    hits = [
        np.argmin(np.linalg.norm(centroids - mean_colour(e), axis=1)) == e["label"] for e in examples["test"]
    ]
    assert np.mean(hits) > 0.8, np.mean(hits)


def test_the_same_size_gives_the_same_images():
    first = stand_in.class_image(np.random.default_rng(stand_in.SEED), 3, 37, 20, 30)
    again = stand_in.class_image(np.random.default_rng(stand_in.SEED), 3, 37, 20, 30)
    other = stand_in.class_image(np.random.default_rng(stand_in.SEED), 4, 37, 20, 30)
    assert first.shape == (20, 30, 3) and first.dtype == np.uint8
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ["--dataset=cifar10", "--stand_in=2", "--data_dir=DIR"],
            "--stand_in makes oxford_iiit_pet, not 'cifar10'",
        ),
        (["--dataset=oxford_iiit_pet", "--stand_in=2"], "--stand_in needs --data_dir=DIR"),
        (
            ["--dataset=oxford_iiit_pet", "--stand_in=-1", "--data_dir=DIR"],
            "--stand_in=-1: give the training",
        ),
        (  # makedirs' "[Errno 20] Not a directory" came after the images were drawn
            ["--dataset=oxford_iiit_pet", "--stand_in=2", "--data_dir=FILE/tfds"],
            "--data_dir 'FILE/tfds' cannot be created: 'FILE' is a file, not a folder",
        ),
    ],
)
def test_a_stand_in_that_cannot_be_made_is_one_line(tmp_path, capsys, args, said):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    args = [a.replace("DIR", str(tmp_path / "tfds")).replace("FILE", str(notes)) for a in args]
    said = said.replace("FILE", str(notes))
    assert prepare.main(["prepare", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"prepare: error: {said}"), err
    assert not os.path.exists(tmp_path / "tfds")
