"""Image folders as a dataset (trainers/data/folders.py): `--dataset=folder:DIR` with train/<class>/
and test/<class>/ sub-folders, its unreadable images skipped and counted, its errors."""

import io
import os

import numpy as np
import pytest
from PIL import Image

from trainers import data


def take(input_fn, n):
    """The first `n` batches of an input function's dataset (one pipeline), as NumPy."""
    return [tuple(t.numpy() for t in batch) for _, batch in zip(range(n), input_fn(None))]


def _png(array):
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def _jpeg(array):
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for split, per_class in (("train", 4), ("test", 2)):
        for c, name in enumerate(["zebra", "ant", "mole"]):
            d = root / split / name
            d.mkdir(parents=True)
            for i in range(per_class):
                pixels = np.clip(rng.normal(60 * c + 40, 20, (20 + i, 30, 3)), 0, 255).astype(np.uint8)
                if i % 2:
                    (d / f"{i}.png").write_bytes(_png(pixels[..., 0] if i == 1 else pixels))  # one grayscale
                else:
                    (d / f"{i}.JPG").write_bytes(_jpeg(pixels))
    good = _jpeg(np.zeros((40, 40, 3), np.uint8) + 128)
    (root / "train" / "ant" / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (root / "train" / "mole" / "notes.png").write_bytes(b"not an image")
    (root / "train" / "mole" / "README.txt").write_text("ignored: not an image extension")
    return str(root)


def test_folder_skips_and_counts_unreadable_images(folder, capfd):
    spec = data.get_spec(f"folder:{folder}")
    # One line of ours, in the trainers' form; not absl's "WARNING:absl:" nor libjpeg's own words.
    assert capfd.readouterr().err.splitlines() == [
        f"warning: skipped 2 unreadable image(s) in {folder}, e.g. {folder}/train/ant/truncated.jpg; "
        "they are left out of the run (results.json: skipped_images)"
    ]
    assert spec.class_names == ["ant", "mole", "zebra"] and spec.num_classes == 3
    assert spec.skipped == 2
    kept = {os.path.basename(path) for path in spec.records("train").payloads}
    assert not kept & {"notes.png", "truncated.jpg"}
    assert spec.num_examples["train"] == 12 and spec.num_examples["test"] == 6
    assert spec.num_examples["train[:50%]"] == 6
    assert np.array_equal(np.bincount(spec.records("train").labels), [4, 4, 4])
    # Every class folder has a 0.JPG, 1.png, ...: other images of the same name, not one multi-label image.
    assert not spec.multi_label
    train = data.make_input_fn(spec, "train", image_size=16, global_batch_size=5, training=True)
    assert all(b[0].shape == (5, 16, 16, 3) for b in take(train, 6))  # several epochs, no crash
    test = data.make_input_fn(spec, "test", image_size=16, global_batch_size=4, training=False)
    assert sum(b[2].sum() for b in take(test, 100)) == 6


def test_folder_errors(folder, tmp_path):
    with pytest.raises(data.DatasetError, match="does not exist"):
        data.get_spec(f"folder:{tmp_path}/nowhere")
    (tmp_path / "notes.txt").write_text("mine\n")  # a file given for the folder: said so
    with pytest.raises(data.DatasetError, match="notes.txt' is a file, not a folder: --dataset=folder:PATH"):
        data.get_spec(f"folder:{tmp_path}/notes.txt")
    with pytest.raises(data.DatasetError, match="no train/<class>/ sub-folders"):
        data.get_spec(f"folder:{tmp_path}")
    (tmp_path / "train" / "cat").mkdir(parents=True)
    (tmp_path / "test" / "dog").mkdir(parents=True)
    with pytest.raises(data.DatasetError, match="class folders that train/ lacks"):
        data.get_spec(f"folder:{tmp_path}")
    with pytest.raises(data.DatasetError, match="bad split 'validation'"):
        data.get_spec(f"folder:{folder}").num_examples["validation"]
