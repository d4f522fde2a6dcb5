"""Your own images: `folder:PATH` with PATH/train/<class>/*.jpg (and other split folders alike).

Class names are the sub-folders of train/, sorted. Every image is decoded once when the dataset is
opened, with the decoder the pipeline uses, and the files that cannot be decoded are left out and
counted. The same image in several class folders of a split is one multi-label example.
"""

import hashlib
import os
import sys

import numpy as np
import tensorflow as tf

from keras_vit import startup
from trainers.data.ops import decode_image
from trainers.data.spec import DatasetSpec, pad_label_lists
from trainers.data.splits import LAYOUT_SEED, MemoryReader
from trainers.errors import DatasetError
from trainers.graph_functions import as_written

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
_LAYOUT = "PATH/train/<class>/*.jpg|png (and PATH/test/<class>/... for evaluation)"


def folder_path(path):
    """The absolute path of `path` (as --dataset=folder:PATH gives it), or DatasetError if it is
    not a directory."""
    path = os.path.abspath(os.path.expanduser(path)) if path else ""
    if not path or not os.path.isdir(path):
        problem = "is a file, not a folder" if path and os.path.exists(path) else "does not exist"
        shown = repr(path or "(empty)")
        raise DatasetError(f"image folder {shown} {problem}: --dataset=folder:PATH expects {_LAYOUT}")
    return path


def folder_spec(dataset, path):
    """The DatasetSpec of the image folder `path` (the part of `dataset` after "folder:")."""
    path = folder_path(path)
    train_dir = os.path.join(path, "train")
    if not os.path.isdir(train_dir) or not _class_folders(train_dir):
        raise DatasetError(
            f"{path} has no train/<class>/ sub-folders: --dataset=folder:PATH expects {_LAYOUT}"
        )
    class_names = _class_folders(train_dir)
    index = {name: i for i, name in enumerate(class_names)}
    examples, skipped = {}, []
    for split in _class_folders(path):
        classes = _class_folders(os.path.join(path, split))
        if not classes:
            continue
        unknown = [c for c in classes if c not in index]
        if unknown:
            raise DatasetError(
                f"{path}/{split}/ has class folders that train/ lacks "
                f"({', '.join(unknown[:5])}): every split must use the classes of train/"
            )
        files = [
            (os.path.join(path, split, c, f), index[c])
            for c in classes
            for f in _list_images(os.path.join(path, split, c))
        ]
        ok = _readable([f for f, _ in files])
        skipped += [f for (f, _), good in zip(files, ok) if not good]
        examples[split] = _merge_copies([item for item, good in zip(files, ok) if good])
    multi_label = any(len(labels) > 1 for split in examples.values() for _, labels in split)
    splits = {}
    for split, items in examples.items():
        # A fixed shuffle makes slices such as train[90%:] a sample of every class, not the last classes.
        items = [items[i] for i in np.random.default_rng(LAYOUT_SEED).permutation(len(items))]
        classes = [labels for _, labels in items]
        splits[split] = (
            np.array([path for path, _ in items], dtype=object),
            pad_label_lists(classes) if multi_label else np.array(classes, np.int32).reshape(-1),
        )
    if not len(splits.get("train", ((), ()))[1]):
        raise DatasetError(
            f"{train_dir} has no readable images ({', '.join(IMAGE_EXTENSIONS)}): "
            f"--dataset=folder:PATH expects {_LAYOUT}"
        )
    if skipped:
        print(
            f"warning: skipped {len(skipped)} unreadable image(s) in {path}, e.g. {skipped[0]}; they are "
            "left out of the run (results.json: skipped_images)",
            file=sys.stderr,
            flush=True,
        )
    reader = MemoryReader(dataset, splits, payload_is_path=True)
    return DatasetSpec(
        name=dataset,
        num_classes=len(class_names),
        num_examples=reader.split_counts(),
        class_names=class_names,
        skipped=len(skipped),
        multi_label=multi_label,
        reader=reader,
    )


def _list_images(folder):
    return sorted(
        f
        for f in os.listdir(folder)
        if f.lower().endswith(IMAGE_EXTENSIONS)
        and not f.startswith(".")
        and os.path.isfile(os.path.join(folder, f))
    )


def _class_folders(split_dir):
    return sorted(
        d
        for d in os.listdir(split_dir)
        if not d.startswith(".") and os.path.isdir(os.path.join(split_dir, d))
    )


def _readable(paths):
    """Boolean mask: which files TensorFlow can decode (the same decoder the pipeline uses)."""
    if not paths:
        return np.zeros(0, bool)
    files = tf.constant(paths)

    @as_written
    def decoded_height(i):
        return i, tf.shape(decode_image(tf.io.read_file(tf.gather(files, i))))[0]

    ds = tf.data.Dataset.range(len(paths)).map(decoded_height, num_parallel_calls=tf.data.AUTOTUNE)
    ok = np.zeros(len(paths), bool)
    # libjpeg writes its own complaint about a broken file ("Input file read error") to the
    # process's stderr; the warning above names what was skipped.
    with startup.native_stderr_hidden():
        for i, _ in ds.ignore_errors().as_numpy_iterator():
            ok[i] = True
    return ok


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
