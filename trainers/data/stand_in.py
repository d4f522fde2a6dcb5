"""A stand-in of a real TFDS dataset, made offline: synthetic images in the files the real download
would bring, converted by the dataset's own TFDS builder into a prepared data_dir.

`python -m trainers.prepare --dataset=oxford_iiit_pet --stand_in=10 --data_dir=DIR` writes, in a
temporary folder, the two archives' contents in their real layout (images/*.jpg; annotations/
with trainval.txt, test.txt, trimaps/*.png and xmls/*.xml) and hands that folder to the builder in
place of the download. So DIR holds the dataset as TFDS writes it (its splits, features, class
names and version), and every `--data_dir=DIR` command reads it as it would the real one; only
the pictures are not pets. It shows that a command runs end to end without the network, not how
a ViT does on the real data.

Each class's images share a colour and a stripe pattern, with noise, at random sizes, so that a
small ViT can learn them in a few hundred steps. Nothing is drawn from the real data.
"""

import colorsys
import contextlib
import io
import math
import os
import tempfile

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image

from keras_vit import fileio
from keras_vit.errors import error_line
from trainers.errors import DatasetError, UsageError

# The seed of the synthetic images: the same N gives the same stand-in.
SEED = 0
# Pets are photos of 100 to 500 px a side; smaller here, to be quick to write and decode.
IMAGE_SIZES = (96, 224)


def test_per_class(train_per_class):
    """Test images per class of a stand-in with `train_per_class` training images: half, at least one."""
    return max(1, train_per_class // 2)


def class_image(rng, label, num_classes, height, width):
    """An RGB uint8 image of class `label`: its own hue and stripe angle and period, with noise."""
    hue = label / num_classes
    colour = np.array(colorsys.hsv_to_rgb(hue, 0.7, 0.9))
    angle = math.pi * ((label * 7) % num_classes) / num_classes
    period = 8.0 + 4.0 * (label % 3)
    rows, cols = np.mgrid[0:height, 0:width]
    phase = (cols * math.cos(angle) + rows * math.sin(angle)) * 2 * math.pi / period
    shade = 0.6 + 0.4 * (np.sin(phase + rng.uniform(0, 2 * math.pi)) > 0)
    image = colour[None, None, :] * shade[..., None] + rng.normal(0, 0.05, (height, width, 3))
    return (np.clip(image, 0, 1) * 255).astype(np.uint8)


def _write_oxford_iiit_pet(folder, names, rng, train_per_class, test_count):
    """The two archives' contents, as the real builder reads them; returns its download paths."""
    images = os.path.join(folder, "images", "images")
    annotations = os.path.join(folder, "annotations", "annotations")
    for path in (images, os.path.join(annotations, "trimaps"), os.path.join(annotations, "xmls")):
        os.makedirs(path)
    lists = {"trainval.txt": [], "test.txt": []}
    for label, name in enumerate(names):
        species = 1 if name[0].isupper() else 2  # the real data's cat breeds are capitalised
        for index in range(train_per_class + test_count):
            stem = f"{name}_{index + 1}"
            height, width = (int(rng.integers(*IMAGE_SIZES)) for _ in range(2))
            pixels = class_image(rng, label, len(names), height, width)
            Image.fromarray(pixels).save(os.path.join(images, stem + ".jpg"), format="JPEG", quality=90)
            # The trimap: 1 the animal, 2 the background, 3 the border, as in the real masks.
            trimap = np.full((height, width), 2, np.uint8)
            trimap[height // 4 : 3 * height // 4, width // 4 : 3 * width // 4] = 1
            Image.fromarray(trimap).save(os.path.join(annotations, "trimaps", stem + ".png"))
            split = "trainval.txt" if index < train_per_class else "test.txt"
            if split == "trainval.txt":  # the real test images have no head box either
                box = (width // 4, height // 4, 3 * width // 4, height // 2)
                with open(os.path.join(annotations, "xmls", stem + ".xml"), "w", encoding="utf-8") as f:
                    f.write(
                        f"<annotation><size><width>{width}</width><height>{height}</height></size>"
                        f"<object><bndbox><xmin>{box[0]}</xmin><ymin>{box[1]}</ymin><xmax>{box[2]}"
                        f"</xmax><ymax>{box[3]}</ymax></bndbox></object></annotation>"
                    )
            lists[split].append(f"{stem} {label + 1} {species} {index + 1}")
    for name, lines in lists.items():
        with open(os.path.join(annotations, name), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return {"images": os.path.join(folder, "images"), "annotations": os.path.join(folder, "annotations")}


# Dataset -> the writer of its download's contents.
WRITERS = {"oxford_iiit_pet": _write_oxford_iiit_pet}


@contextlib.contextmanager
def _downloads_from(paths):
    """TFDS's download step, for this process and this block only, returns `paths` instead."""
    manager = tfds.download.DownloadManager
    original = manager.download_and_extract
    manager.download_and_extract = lambda self, url_or_urls: paths
    try:
        yield
    finally:
        manager.download_and_extract = original


def check(dataset, train_per_class, data_dir):
    """UsageError unless a stand-in of `dataset` with these sizes can be made in `data_dir`."""
    if dataset not in WRITERS:
        raise UsageError(f"--stand_in makes {', '.join(sorted(WRITERS))}, not {dataset!r}")
    if train_per_class < 1:
        raise UsageError(f"--stand_in={train_per_class}: give the training images per class, 1 or more")
    if not data_dir:
        # In TFDS's default data_dir the stand-in would later pass for the real dataset.
        raise UsageError("--stand_in needs --data_dir=DIR, a folder for the stand-in alone")
    blocking = fileio.file_in_the_way(fileio.join(data_dir, dataset))  # data_dir itself, and above
    if blocking:
        raise UsageError(
            f"--data_dir {data_dir!r} cannot be created: {blocking!r} is a file, not a folder; "
            "choose another --data_dir."
        )


def prepare(builder, dataset, train_per_class):
    """Writes a stand-in of `dataset` with `train_per_class` training images per class (and
    test_per_class(...) test images) into the builder's data_dir, with the builder itself.
    TFDS writes into a temporary folder and renames it when done, so a failure leaves nothing."""
    names = builder.info.features["label"].names
    rng = np.random.default_rng(SEED)
    downloads = os.path.join(builder.data_dir[: -len(builder.info.full_name)], "downloads")
    created = [p for p in (downloads, os.path.join(downloads, "extracted")) if not os.path.exists(p)]
    with tempfile.TemporaryDirectory(prefix=f"{dataset}_stand_in_") as folder:
        paths = WRITERS[dataset](folder, names, rng, train_per_class, test_per_class(train_per_class))
        # TFDS's "Downloading and preparing ..." and its progress bars would speak of a download.
        said = io.StringIO()
        try:
            with _downloads_from(paths), contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
                builder.download_and_prepare(
                    download_config=tfds.download.DownloadConfig(
                        download_mode=tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS
                    )
                )
        except Exception as e:  # disk full, unwritable data_dir, ...: one line for the user
            raise DatasetError(f"cannot write the stand-in of {dataset}: {error_line(e)}") from None
        finally:
            for path in reversed(created):  # the download folders TFDS made and left empty
                if os.path.isdir(path) and not os.listdir(path):
                    os.rmdir(path)
