"""Open a TFDS dataset by name, preparing it when it is not yet in the data_dir.

TFDS prepares a dataset by downloading it (or reading files the user downloaded by hand, for
imagenet2012) and writing it in its own format. Where that cannot happen (no network, no manual
files) the user gets one line saying how to prepare it, and the data_dir is left as it was: TFDS
only ever marks a version prepared by renaming a finished directory, and the folders this attempt
created are removed.
"""

import contextlib
import logging as std_logging
import os
import shutil
import socket
import tempfile
import threading

import tensorflow_datasets as tfds
from absl import logging

from trainers.errors import DatasetError, first_line

# Most TFDS sources, and TFDS's own mirror, live here: if its name does not resolve there is no network.
_PROBE_HOST = "storage.googleapis.com"
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


@contextlib.contextmanager
def _quiet_probe():
    """Holds back absl WARNINGs while TFDS looks for a prepared version.

    Looking into a data_dir that does not hold the dataset yet, TFDS warns "Variant folder ...
    has no dataset_info.json": the state our own one-line error (or the preparation) then deals
    with, so the warning would only print a confusing line above it.
    """
    logger = std_logging.getLogger("absl")
    level = logger.level
    logger.setLevel(std_logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def contained_temporary_folders(prefix="keras_vit-tfds-"):
    """Runs the block with Python's temporary folders inside a new one, removed after.

    Opening a dataset that is not prepared yet, TFDS copies its published metadata into a new
    temporary folder that it never removes (DatasetInfo.initialize_from_bucket): one empty
    `tmp...tfds` folder left in /tmp per command. The metadata is read into memory before the
    block ends.
    """
    previous = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        tempfile.tempdir = folder
        try:
            yield folder
        finally:
            tempfile.tempdir = previous


def is_prepared(builder):
    with _quiet_probe():
        return builder.is_prepared()


def open_tfds_builder(dataset, data_dir):
    """The tfds builder for `dataset` (maybe not prepared yet), or DatasetError for an unknown name."""
    try:
        with _quiet_probe(), contained_temporary_folders():
            builder = tfds.builder(dataset, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise DatasetError(
            f"unknown dataset {dataset!r}: give --dataset a TFDS image classification dataset "
            f"(e.g. oxford_iiit_pet, oxford_flowers102, cifar10, cifar100, imagenet2012), "
            f"folder:PATH or digits"
        ) from None
    except Exception as e:  # bad config or version in the name, unreadable data_dir, ...
        raise DatasetError(f"cannot open TFDS dataset {dataset!r}: {first_line(e)}") from None
    return builder


def ensure_prepared(builder, dataset, manual_dir, in_prepare=False):
    """Prepares `builder` if needed (download, or the manual files), or DatasetError saying how to.

    in_prepare: called by `python -m trainers.prepare`, so the advice does not say to run it.
    """
    if not is_prepared(builder):
        _prepare(builder, dataset, manual_dir, in_prepare)


def _root(builder):
    """The data_dir the user gave (or TFDS's default), above NAME/[CONFIG/]VERSION."""
    return builder.data_dir[: -len(builder.info.full_name)].rstrip("/") or "/"


def _how_to_prepare(builder, dataset, root, in_prepare=False):
    if builder.MANUAL_DOWNLOAD_INSTRUCTIONS:
        by_hand = (
            f"download its files by hand (see https://www.tensorflow.org/datasets/catalog/"
            f"{builder.name}; for imagenet2012: ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar), "
            f"put them in a folder "
            f"and pass --manual_dir=FOLDER (default {root}/downloads/manual)"
        )
        if in_prepare:
            return by_hand
        return (
            f"{by_hand}, or run "
            f"`python -m trainers.prepare --dataset={dataset} --manual_dir=FOLDER --data_dir={root}` "
            f"and pass --data_dir={root}"
        )
    if in_prepare:
        return (
            f"run this command on a machine with network (with --data_dir=DIR there), then copy "
            f"DIR/{builder.name} into {root}"
        )
    return (
        f"prepare it on a machine with network with `python -m trainers.prepare --dataset={dataset} "
        f"--data_dir=DIR` and pass --data_dir=DIR (or copy DIR/{builder.name} into {root})"
    )


def _network_available(timeout=5.0):
    """False when the download host's name does not resolve (offline), without waiting long."""
    if any(os.environ.get(v) for v in _PROXY_VARIABLES):
        return True  # behind a proxy, local name resolution says nothing
    result = []

    def probe():
        try:
            socket.getaddrinfo(_PROBE_HOST, 443)
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def _prepare(builder, dataset, manual_dir, in_prepare=False):
    root = _root(builder)
    how = _how_to_prepare(builder, dataset, root, in_prepare)
    where = f"{dataset} is not prepared in {root}"
    if not builder.MANUAL_DOWNLOAD_INSTRUCTIONS and not _network_available():
        # TFDS would retry the download for minutes before giving up.
        raise DatasetError(f"{where} and cannot be downloaded (no network): {how}")
    created = [p for p in _paths_an_attempt_creates(builder, root) if not os.path.exists(p)]
    logging.info("Preparing %s in %s (download and conversion)", dataset, root)
    try:
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
    except Exception as e:  # network, missing manual files, disk, ... all end the same way for the user
        _remove(created)
        reason = (
            "its manual download files are missing"
            if builder.MANUAL_DOWNLOAD_INSTRUCTIONS
            else f"download failed: {first_line(e)}"
        )
        raise DatasetError(f"{where} ({reason}): {how}") from None


def _paths_an_attempt_creates(builder, root):
    """Outermost first: the root itself, the dataset folder, and TFDS's download folders for it."""
    downloads = os.path.join(root, "downloads")
    return [
        root,
        os.path.join(root, builder.name),
        downloads,
        os.path.join(downloads, builder.name),
        os.path.join(downloads, "extracted"),
        os.path.join(downloads, "manual"),
    ]


def _remove(created):
    for path in created:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
