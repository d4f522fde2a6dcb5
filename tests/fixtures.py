"""What the tests share: the tiny ViT and hybrid, their shape as keyword arguments and as trainer
flags, and fake TFDS data_dirs made once per test run (single-label ones by
../shared/tools/fake_tfds.py, a multi-label one by tests/multi_label_tfds.py).

What a test run makes once (`session_artefact`: the data_dirs, session_data.py's `cifar_reference`,
finetuned_runs.py's `digits_workdir`) is made once whatever the number of pytest-xdist workers:
the first worker that asks makes it under a file lock, the others wait for it and read it.

A test that needs "a small model" builds it here, and says with keyword overrides what it needs
that the default lacks (two blocks, a 16 px input, a class count). A trainer run uses one of two
shapes, as flags: TINY_FLAGS (32 px data: cifar10, pets, folders) or TINY_DIGITS_FLAGS (the bundled
digits); one that needs another says why in one line beside it. A test whose shape is what it
checks keeps its own: the official shapes (synthetic_checkpoints.py), the memory estimates, the
Hugging Face references, and any model whose outputs are pinned (hashes, stored logits).

tests/conftest.py exposes `fake_tfds_dir` and `multi_label_tfds_dir`, so a test module only
names them:

    @pytest.mark.parametrize("fake_tfds_dir", ["oxford_iiit_pet"], indirect=True)
    def test_pets(fake_tfds_dir): ...

    def test_voc_like(multi_label_tfds_dir):
        spec = data.get_spec(MULTI_LABEL_TFDS, data_dir=multi_label_tfds_dir)
"""

import contextlib
import fcntl
import importlib.util
import io
import os
import shutil
import sys

import pytest

import keras_vit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ../shared sits beside the repository.
FAKE_TFDS = os.path.join(os.path.dirname(ROOT), "shared", "tools", "fake_tfds.py")


def flags(shape):
    """Trainer flags (`--name=value`) of a model's keyword arguments."""
    return [f"--{name}={value}" for name, value in shape.items()]


# A ViT small enough to train in seconds on 2 CPU cores: 16 patches of 8x8, width 32, 1 block.
# TINY_SHAPE is its architecture alone, for the tests that build it at sizes of their own.
TINY_SHAPE = dict(patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64)
TINY = dict(image_size=32, **TINY_SHAPE)
# The same model in a trainer's config (new weights), and as the flags that set those fields.
TINY_CONFIG = dict(model="ViT-Ti_16", weights="none", **TINY)
TINY_FLAGS = flags(TINY_CONFIG)
# The trainer tests' second shape: TINY's encoder on the bundled digits' 16 px images, in 4 px
# patches (16 tokens, as TINY's 32 px in 8 px patches), for the runs on --dataset=digits.
TINY_DIGITS = dict(TINY, image_size=16, patch_size=4)
TINY_DIGITS_FLAGS = flags(dict(TINY_CONFIG, **TINY_DIGITS))
# Every size different (width 24 in 3 heads of 8, 2 blocks, 5 classes, 4 px patches), for the
# tests that compare the model with the NumPy reference, across backends and in its shapes: a
# swapped axis or block changes a value or a shape there. Those tests name its numbers (3 heads
# for the reference, 24-wide features, 17 tokens at 16 px), so each gives its own image size.
DISTINCT = dict(patch_size=4, hidden_size=24, num_layers=2, num_heads=3, mlp_dim=48, num_classes=5)
# The hybrid's stem at its smallest: a root and two one-unit stages of half width (32 channels
# at the root, one per GroupNorm group), 8x by the stem, so a 32 px input gives 4 x 4 tokens.
HYBRID_STEM = dict(patch_size=1, resnet_layers=(1, 1), resnet_width=0.5)
TINY_HYBRID = dict(TINY, **HYBRID_STEM)

# Images per class of the shared fake data: (train, test). cifar10's is what the trainer tests'
# 30-step reference run learns from (tests/trainer_cli.py CIFAR_RUN); oxford_iiit_pet's is the
# 74 / 37 split whose counts tests/test_data.py checks.
FAKE_TFDS_SIZES = {"cifar10": (20, 10), "cifar100": (2, 1), "oxford_iiit_pet": (2, 1)}

# The multi-label fake dataset (tests/multi_label_tfds.py): its TFDS name, its classes, and the
# class indices of its images, one image per list in each split (7 train, 7 test). The multi-label
# tests need an image with no label (an all-zero target) and lists of different lengths (padded
# to different widths when batched).
MULTI_LABEL_TFDS = "multi_label_squares"
MULTI_LABEL_CLASSES = ["red", "green", "blue"]
MULTI_LABEL_TFDS_LABELS = [[0], [0, 2], [], [1, 2, 0], [2], [1], [2, 1]]


def tiny_vit(**overrides):
    """keras_vit.ViT of the TINY shape, with `overrides` replacing or adding arguments."""
    return keras_vit.ViT(**{**TINY, **overrides})


def tiny_hybrid(**overrides):
    """keras_vit.ViT with the TINY_HYBRID ResNet stem, with `overrides` applied."""
    return keras_vit.ViT(**{**TINY_HYBRID, **overrides})


def pretend_onednn_cpu(monkeypatch, *switches):
    """This process as an x86 CPU whose TensorFlow runs oneDNN's kernels with no GPU, whatever this
    machine is, and the KERAS_VIT_* `switches` unset: where keras_vit's CPU graph paths apply. A
    CPU with AVX-512: float32 inference keeps TensorFlow's graph (keras_vit/xla_inference.py)."""
    from keras_vit import onednn_default, onednn_graph, xla_inference

    monkeypatch.setattr(onednn_graph, "has_gpu", lambda: False)
    monkeypatch.setattr(xla_inference, "cpu_prefers_xla", lambda: False)
    monkeypatch.setattr(onednn_default.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    for switch in switches:
        monkeypatch.delenv(switch, raising=False)


def make_fake_tfds(data_dir, dataset, per_class, test_per_class):
    """Prepares the fake `dataset` in `data_dir` with ../shared/tools/fake_tfds.py, which runs the
    real TFDS builder on generated source files (in this process: a child would import
    TensorFlow again)."""
    # Imported here: most test processes never need TFDS.
    import tensorflow_datasets as tfds

    from trainers.data import tfds_prepare

    spec = importlib.util.spec_from_file_location("fake_tfds", FAKE_TFDS)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    argv = sys.argv
    # The tool stands in for the network by replacing TFDS's download: put back afterwards, so
    # that a test of a missing download still sees the real one.
    download = tfds.download.DownloadManager.download_and_extract
    sys.argv = [FAKE_TFDS, "--dataset", dataset, "--data_dir", str(data_dir)]
    sys.argv += ["--per_class", str(per_class), "--test_per_class", str(test_per_class)]
    try:
        # The tool writes the source files it hands the builder into a new system temporary
        # folder and leaves it there, and TFDS's builder leaves an empty one of its own: a few
        # hundred folders a day of test runs. Here both go into one that is removed once the
        # data_dir is prepared.
        with tfds_prepare.contained_temporary_folders(f"fake_{dataset}_sources-"):
            with contextlib.redirect_stdout(io.StringIO()):
                tool.main()
    finally:
        tfds.download.DownloadManager.download_and_extract = download
        sys.argv = argv


def shared_run_folder(tmp_path_factory):
    """The folder of this test run that every process of it shares: each pytest-xdist worker's
    base temporary folder is one of its subfolders."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def session_artefact(tmp_path_factory, name, make):
    """The folder `name` of this test run, filled by `make(folder)` by the first process that asks
    (the others wait on its lock), then read by all. A failed `make` leaves it to the next asker."""
    root = shared_run_folder(tmp_path_factory) / "session_artefacts"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(str(folder))
            done.touch()
    return str(folder)


def shared_fake_tfds(dataset, tmp_path_factory, per_class=None, test_per_class=None):
    """The test run's data_dir of the fake `dataset`, of FAKE_TFDS_SIZES's size unless given, made
    on first use. Tests read it; one that changes data copies it first."""
    default = FAKE_TFDS_SIZES.get(dataset, (None, None))
    key = (dataset, per_class or default[0], test_per_class or default[1])
    if not os.path.exists(FAKE_TFDS):
        pytest.skip(f"{FAKE_TFDS} (builds the stand-in TFDS data) is not here")
    return session_artefact(
        tmp_path_factory, "{}_tfds_{}_{}".format(*key), lambda folder: make_fake_tfds(folder, *key)
    )


@pytest.fixture(scope="session")
def fake_tfds_dir(request, tmp_path_factory):
    """A TFDS data_dir of the fake dataset that indirect parametrisation names, shared by the whole
    test run (copy it before changing anything in it): "cifar10", or ("oxford_iiit_pet", 4, 2) for
    4 train and 2 test images per class instead of FAKE_TFDS_SIZES's."""
    dataset, *sizes = (request.param,) if isinstance(request.param, str) else request.param
    return shared_fake_tfds(dataset, tmp_path_factory, *sizes)


@pytest.fixture(scope="session")
def multi_label_tfds_dir(tmp_path_factory):
    """A TFDS data_dir of MULTI_LABEL_TFDS, prepared once per test run by its real TFDS builder and
    shared by the whole run (copy it before changing anything in it)."""
    # Imported here: it imports tensorflow_datasets, which most sessions never need.
    from multi_label_tfds import MultiLabelSquares

    from trainers.data import tfds_prepare

    def make(data_dir):
        # TFDS's builder leaves an empty temporary folder behind: it goes into one that is removed.
        with tfds_prepare.contained_temporary_folders("multi_label_tfds-"):
            MultiLabelSquares(data_dir=data_dir).download_and_prepare()

    return session_artefact(tmp_path_factory, "multi_label_tfds", make)
