"""Input pipelines: sources, shapes and ranges, exact resume, replica/host invariance, eval padding,
few-shot subsets and every DatasetError (image folders: tests/test_folders.py)."""

import hashlib
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from fixtures import shared_fake_tfds

from configs.fields import TRAINING, fields
from trainers import data, distribute
from trainers.data import ops, pipeline, subsets, tfds_prepare


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory):
    """tests/fixtures.py's oxford_iiit_pet (2 train, 1 test image per class), shared by the session."""
    return shared_fake_tfds("oxford_iiit_pet", tmp_path_factory, per_class=2, test_per_class=1)


@pytest.fixture(scope="session")
def pets(tfds_dir):
    return data.get_spec("oxford_iiit_pet", data_dir=tfds_dir)


@pytest.fixture(scope="session")
def digits():
    return data.get_spec("digits")


def take(input_fn, n, context=None):
    return [tuple(t.numpy() for t in batch) for _, batch in zip(range(n), input_fn(context))]


def global_batches(input_fn, n, pipelines, replicas):
    """Global batches as the replicas of `pipelines` hosts see them: host-major, replicas in turn."""
    per_host = replicas // pipelines
    streams = [
        take(input_fn, n * per_host, tf.distribute.InputContext(pipelines, i, replicas))
        for i in range(pipelines)
    ]
    out = []
    for step in range(n):
        parts = [streams[h][step * per_host + r] for h in range(pipelines) for r in range(per_host)]
        out.append(tuple(np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))))
    return out


def eval_image(encoded, size):
    return ops.Chain(ops.eval_ops(size))(encoded).numpy()


def train_ops(image_size, crop_min_area=0.05, random_flip=True):
    config = fields(TRAINING)  # every training field at its default: no RandAugment
    config.image_size, config.crop_min_area, config.random_flip = image_size, crop_min_area, random_flip
    return data.train_ops(config)


def assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


# --------------------------------------------------------------------------------------------- sources


def test_split_slicing_uses_tfds_syntax(digits, pets):
    n = digits.num_examples["train"]
    assert digits.num_examples["train[:90%]"] + digits.num_examples["train[90%:]"] == n
    head, tail = digits.records("train[:90%]"), digits.records("train[90%:]")
    np.testing.assert_array_equal(np.concatenate([head.labels, tail.labels]), digits.records("train").labels)
    assert digits.num_examples["train[:10]+test[:5]"] == 15
    assert pets.num_examples["train"] == 74 and pets.num_examples["test"] == 37
    assert pets.num_examples["train[:90%]"] == 67 and pets.num_examples["train[90%:]"] == 7
    assert pets.num_classes == 37 and pets.class_names[0] == "Abyssinian"


@pytest.mark.parametrize("dataset", ["digits", "pets"])
def test_training_batches_shapes_dtypes_and_range(dataset, digits, pets):
    spec = {"digits": digits, "pets": pets}[dataset]
    fn = data.make_input_fn(spec, "train", image_size=24, global_batch_size=6, training=True, seed=1)
    for images, labels in take(fn, 3):
        assert images.shape == (6, 24, 24, 3) and images.dtype == np.float32
        assert labels.shape == (6,) and labels.dtype == np.int32
        assert images.min() >= -1.0 and images.max() <= 1.0 and images.max() - images.min() > 0.5
        assert labels.min() >= 0 and labels.max() < spec.num_classes


def test_training_stream_is_an_epoch_by_epoch_permutation(digits):
    spec = data.get_spec("digits:0-1")
    n = spec.num_examples["train"]
    fn = data.make_input_fn(spec, "train", image_size=8, global_batch_size=n, training=True, seed=3)
    (_, first), (_, second) = take(fn, 2)
    expected = np.sort(spec.records("train").labels)
    np.testing.assert_array_equal(np.sort(first), expected)  # each epoch sees every example once
    np.testing.assert_array_equal(np.sort(second), expected)
    assert not np.array_equal(first, second)  # in a new order


def test_augmentation_changes_between_epochs_and_eval_is_plain_resize(digits):
    spec = data.get_spec("digits:0-1")
    one = spec.records("train")
    one.payloads, one.labels, one.count = one.payloads[:1], one.labels[:1], 1
    fn = data.InputFn(spec, "train", one, ops=train_ops(16), global_batch_size=1, training=True)
    epochs = [b[0][0] for b in take(fn, 4)]
    assert any(not np.array_equal(epochs[0], e) for e in epochs[1:])
    plain = eval_image(one.payloads[0], 16)
    evaluated = take(
        data.InputFn(spec, "test", one, ops=data.eval_ops(16), global_batch_size=1, training=False), 1
    )[0][0][0]
    np.testing.assert_allclose(evaluated, plain)


def test_crop_min_area_and_flip_shape_the_training_augmentation(digits):
    spec = data.get_spec("digits:0-1")
    one = spec.records("train")
    one.payloads, one.labels, one.count = one.payloads[:1], one.labels[:1], 1
    plain = eval_image(one.payloads[0], 16)
    # A crop of the whole (square) image and no flip: training sees the evaluation image.
    fn = data.InputFn(
        spec,
        "train",
        one,
        ops=train_ops(16, crop_min_area=1.0, random_flip=False),
        global_batch_size=1,
        training=True,
    )
    for batch in take(fn, 3):
        np.testing.assert_allclose(batch[0][0], plain, atol=1e-6)
    # With flips on, some epochs see the mirrored image, and only it or the original.
    fn = data.InputFn(
        spec,
        "train",
        one,
        ops=train_ops(16, crop_min_area=1.0, random_flip=True),
        global_batch_size=1,
        training=True,
    )
    seen = [b[0][0] for b in take(fn, 8)]
    mirrored = plain[:, ::-1]
    assert all(np.allclose(x, plain, atol=1e-6) or np.allclose(x, mirrored, atol=1e-6) for x in seen)
    assert any(np.allclose(x, mirrored, atol=1e-6) for x in seen)
    # The keyword arguments build the same ops.
    fn = data.make_input_fn(
        spec,
        "train[:1]",
        image_size=16,
        global_batch_size=1,
        training=True,
        crop_min_area=1.0,
        random_flip=False,
    )
    np.testing.assert_allclose(take(fn, 1)[0][0][0], plain, atol=1e-6)
    with pytest.raises(data.DatasetError, match=r"inception_crop\(min_area=0.0\): min_area must be in"):
        data.make_input_fn(spec, "train", image_size=8, global_batch_size=1, training=True, crop_min_area=0)


# The first batches of the digits pipeline, pinned: the same (seed, epoch, index) must give the same
# images bit for bit, whatever shape the code of the ops and the stream takes.
PINNED_FIRST_BATCHES = [
    # (make_input_fn keywords, sha256 of the images (first 16 hex digits), labels,
    #  images[0, 5, 7, 0] and images[3, 11, 2, 1])
    (
        dict(image_size=24, global_batch_size=8, training=True, seed=7),
        "b7498ed83e245bc7",
        [5, 3, 1, 2, 0, 0, 8, 9],
        (-0.6705882549285889, -0.9779784679412842),
    ),
    (
        dict(image_size=24, global_batch_size=8, training=True, seed=7, crop_min_area=0.5, random_flip=False),
        "2126509badf0a2da",
        [5, 3, 1, 2, 0, 0, 8, 9],
        (0.5455882549285889, -1.0),
    ),
    (
        dict(image_size=16, global_batch_size=8, training=True, seed=3, start_step=500),
        "a6b05b4f2c9c75e9",
        [6, 8, 6, 2, 3, 8, 6, 5],
        (0.6522977352142334, 0.36348044872283936),
    ),
    (
        dict(split="test", image_size=24, global_batch_size=8, training=False),
        "b7a200416741adce",
        [7, 6, 3, 7, 7, 3, 2, 8],
        (0.5816993713378906, -1.0),
    ),
]


@pytest.mark.parametrize("keywords, digest, labels, pixels", PINNED_FIRST_BATCHES)
def test_first_digits_batch_is_pinned(digits, keywords, digest, labels, pixels):
    keywords = dict(keywords)
    fn = data.make_input_fn(digits, keywords.pop("split", "train"), **keywords)
    images, got_labels = take(fn, 1)[0][:2]
    assert got_labels.tolist() == labels
    assert (float(images[0, 5, 7, 0]), float(images[3, 11, 2, 1])) == pixels
    assert hashlib.sha256(images.tobytes()).hexdigest()[:16] == digest


# ------------------------------------------------------------------------------------ resume, sharding


@pytest.mark.parametrize("dataset", ["digits", "pets"])
def test_exact_resume_matches_uninterrupted_stream(dataset, digits, pets):
    spec, split = {"digits": (data.get_spec("digits:0-2"), "train"), "pets": (pets, "train[:90%]")}[dataset]
    batch, steps = 16, 12  # crosses epoch boundaries on both (67 and ~430 examples)
    if dataset == "digits":
        batch = 64

    def input_fn(seed=9, start_step=0):
        return data.make_input_fn(
            spec,
            split,
            image_size=16,
            global_batch_size=batch,
            training=True,
            seed=seed,
            start_step=start_step,
        )

    fresh = take(input_fn(), steps)
    for start in (1, 5):
        resumed = input_fn(start_step=start)
        assert_same_batches(take(resumed, steps - start), fresh[start:])
    other_seed = take(input_fn(seed=10), 1)
    assert not np.array_equal(other_seed[0][0], fresh[0][0])


@pytest.mark.slow  # 6 to 12 s each on the 2-core Xeon
@pytest.mark.parametrize("dataset", ["digits", "pets"])
def test_global_batches_do_not_depend_on_pipelines_or_replicas(dataset, digits, pets):
    spec = {"digits": digits, "pets": pets}[dataset]
    fn = data.make_input_fn(
        spec, "train", image_size=16, global_batch_size=8, training=True, seed=2, start_step=3
    )
    reference = take(fn, 4)
    for pipelines, replicas in ((1, 2), (2, 2), (2, 4), (4, 4)):
        assert_same_batches(global_batches(fn, 4, pipelines, replicas), reference)


def test_global_stream_ignores_tensorflow_global_seed(pets):
    fn = data.make_input_fn(pets, "train", image_size=16, global_batch_size=8, training=True, seed=4)
    tf.random.set_seed(1)
    a = take(fn, 2)
    tf.random.set_seed(2)
    assert_same_batches(take(fn, 2), a)


def test_mirrored_replicas_together_see_the_global_batch(digits):
    strategy = distribute.create_strategy("cpu", cpu_devices=2)
    fn = data.make_input_fn(digits, "train", image_size=16, global_batch_size=8, training=True, seed=5)
    reference = take(fn, 3)
    iterator = iter(data.distribute(strategy, fn))
    for step in range(3):
        images, labels = next(iterator)
        local = [t.numpy() for t in strategy.experimental_local_results(images)]
        assert [x.shape for x in local] == [(4, 16, 16, 3)] * 2
        np.testing.assert_array_equal(np.concatenate(local), reference[step][0])
        local = [t.numpy() for t in strategy.experimental_local_results(labels)]
        np.testing.assert_array_equal(np.concatenate(local), reference[step][1])


# ----------------------------------------------------------------------------------------------- eval


@pytest.mark.parametrize("dataset", ["digits", "pets"])
def test_eval_is_one_padded_pass_with_weights(dataset, digits, pets):
    spec = {"digits": digits, "pets": pets}[dataset]
    n = spec.num_examples["test"]
    fn = data.make_input_fn(spec, "test", image_size=16, global_batch_size=32, training=False)
    batches = take(fn, 10**6)
    assert len(batches) == fn.num_batches == -(-n // 32)
    for images, labels, weights in batches:
        assert images.shape == (32, 16, 16, 3) and images.dtype == np.float32
        assert labels.dtype == np.int32 and weights.dtype == np.float32
    weights = np.concatenate([b[2] for b in batches])
    np.testing.assert_array_equal(weights, (np.arange(len(weights)) < n).astype(np.float32))
    labels = np.concatenate([b[1] for b in batches])[:n]
    expected = spec.records("test").read_labels()
    np.testing.assert_array_equal(labels, expected)
    # two hosts x two replicas: same global batches, and the same number of steps on every replica
    assert_same_batches(global_batches(fn, len(batches), 2, 4), batches)
    for i in range(2):
        assert len(take(fn, 10**6, tf.distribute.InputContext(2, i, 4))) == 2 * len(batches)


# ---------------------------------------------------------------------------------------------- few-shot


def test_examples_per_class_is_a_fixed_seeded_subset(digits):
    fn = data.make_input_fn(
        digits, "train", image_size=8, global_batch_size=10, training=False, examples_per_class=10, seed=1
    )
    assert fn.num_examples == 100
    labels = np.concatenate([b[1] for b in take(fn, 100)])
    np.testing.assert_array_equal(np.bincount(labels), [10] * 10)
    same = data.make_input_fn(
        digits, "train", image_size=8, global_batch_size=10, training=True, examples_per_class=10, seed=1
    )
    other = data.make_input_fn(
        digits, "train", image_size=8, global_batch_size=10, training=True, examples_per_class=10, seed=2
    )
    np.testing.assert_array_equal(same.records.payloads, fn.records.payloads)
    assert not np.array_equal(other.records.payloads, fn.records.payloads)
    stream = np.concatenate([b[1] for b in take(same, 10)])  # one epoch of training = the 100 examples
    np.testing.assert_array_equal(np.bincount(stream), [10] * 10)


def test_examples_per_class_on_tfds(pets):
    fn = data.make_input_fn(
        pets, "train", image_size=8, global_batch_size=37, training=True, examples_per_class=1, seed=0
    )
    assert fn.num_examples == 37 and fn.records.payloads is not None
    np.testing.assert_array_equal(np.sort(take(fn, 1)[0][1]), np.arange(37))
    with pytest.raises(data.DatasetError, match="fewer than 3 examples of class"):
        data.make_input_fn(
            pets, "train", image_size=8, global_batch_size=8, training=True, examples_per_class=3
        )


# ----------------------------------------------------------------------------------------------- errors


def one_line(error):
    text = str(error.value)
    assert "\n" not in text and text
    return text


def test_unknown_dataset():
    with pytest.raises(data.DatasetError) as e:
        data.get_spec("no_such_dataset_anywhere")
    assert "unknown dataset 'no_such_dataset_anywhere'" in one_line(e) and "folder:PATH" in one_line(e)


@pytest.mark.parametrize("split", ["validation", "train[:90", "train[5%:2%]x"])
def test_bad_split(pets, digits, split):
    for spec in (pets, digits):
        with pytest.raises(data.DatasetError, match="bad split") as e:
            data.make_input_fn(spec, split, image_size=8, global_batch_size=8, training=True)
        assert "train[:90%]" in one_line(e)


@pytest.mark.parametrize("selection", ["digits:0-12", "digits:x", "digits:7", "digits:4-2"])
def test_bad_digit_selection(selection):
    with pytest.raises(data.DatasetError) as e:
        data.get_spec(selection)
    assert selection in one_line(e)


def test_bad_numbers(digits):
    with pytest.raises(data.DatasetError, match="global_batch_size must be an integer >= 1"):
        data.make_input_fn(digits, "train", image_size=8, global_batch_size=0, training=True)
    with pytest.raises(data.DatasetError, match="start_step must be"):
        data.make_input_fn(digits, "train", image_size=8, global_batch_size=8, training=True, start_step=-1)
    fn = data.make_input_fn(digits, "train", image_size=8, global_batch_size=6, training=True)
    with pytest.raises(data.DatasetError, match="does not split evenly over 4 replicas"):
        fn(tf.distribute.InputContext(1, 0, 4))
    with pytest.raises(data.DatasetError, match="has no examples"):
        data.make_input_fn(digits, "train[:0]", image_size=8, global_batch_size=8, training=True)


def _tree(root):
    return sorted(
        os.path.relpath(os.path.join(d, f), root) for d, dirs, files in os.walk(root) for f in dirs + files
    )


def test_not_prepared_and_offline_says_how_to_prepare(tmp_path, monkeypatch):
    monkeypatch.setattr(tfds_prepare, "_network_available", lambda timeout=5.0: False)
    (tmp_path / "keep.txt").write_text("the user's")
    before = _tree(tmp_path)
    with pytest.raises(data.DatasetError) as e:
        data.get_spec("cifar100", data_dir=str(tmp_path))
    message = one_line(e)
    assert "cifar100 is not prepared in" in message and "no network" in message
    assert (
        "python -m trainers.prepare --dataset=cifar100 --data_dir=DIR" in message
        and "--data_dir=DIR" in message
    )
    assert _tree(tmp_path) == before


def test_opening_a_dataset_not_yet_prepared_leaves_no_temporary_folder(tmp_path, monkeypatch):
    """Catches TFDS's copy of a dataset's published metadata left behind in the temporary
    folder (an empty tmp...tfds folder in /tmp per command), and the temporary folder of
    Python's tempfile not given back afterwards."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    builder = tfds_prepare.open_tfds_builder("cifar10", str(tmp_path / "data"))
    assert not tfds_prepare.is_prepared(builder)
    assert builder.info.features["label"].num_classes == 10  # read before the folder went
    assert os.listdir(temporary) == [] and tempfile.tempdir == str(temporary)


def test_failed_download_leaves_no_trace(tmp_path, monkeypatch):
    def offline(self, *args, **kwargs):
        raise ConnectionError("Failed to resolve 'www.cs.toronto.edu'")

    monkeypatch.setattr(tfds_prepare, "_network_available", lambda timeout=5.0: True)
    monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract", offline)
    monkeypatch.setattr(tfds.download.DownloadManager, "download", offline)
    root = tmp_path / "fresh"
    with pytest.raises(data.DatasetError) as e:
        data.get_spec("cifar10", data_dir=str(root))
    assert "download failed: Failed to resolve" in one_line(
        e
    ) and "python -m trainers.prepare --dataset=cifar10" in one_line(e)
    assert not root.exists()
    assert not tfds_prepare.is_prepared(tfds_prepare.open_tfds_builder("cifar10", str(tmp_path)))


def test_imagenet_without_manual_files_names_the_manual_dir(tmp_path):
    manual = tmp_path / "manual"
    with pytest.raises(data.DatasetError) as e:
        data.get_spec("imagenet2012", data_dir=str(tmp_path / "tfds"), manual_dir=str(manual))
    message = one_line(e)
    assert "imagenet2012 is not prepared" in message and "--manual_dir=FOLDER" in message
    assert (
        "ILSVRC2012_img_train.tar" in message
        and "python -m trainers.prepare --dataset=imagenet2012" in message
    )
    assert not (tmp_path / "tfds").exists()


def test_not_an_image_classification_dataset(tmp_path):
    with pytest.raises(data.DatasetError, match="not an image classification dataset"):
        data.get_spec("imdb_reviews", data_dir=str(tmp_path))


def test_examples_per_class_too_big_for_memory_streams_the_same_examples(pets, monkeypatch):
    def subset():
        fn = data.make_input_fn(
            pets, "train", image_size=16, global_batch_size=37, training=False, examples_per_class=1, seed=3
        )
        return fn, take(fn, 1)

    in_memory_fn, in_memory = subset()
    monkeypatch.setattr(subsets, "IN_MEMORY_LIMIT_BYTES", 0)
    streamed_fn, streamed = subset()
    assert in_memory_fn.records.payloads is not None and streamed_fn.records.payloads is None
    assert_same_batches(streamed, in_memory)


def test_streamed_split_in_several_shuffle_windows(pets, monkeypatch):
    monkeypatch.setattr(pipeline, "SHUFFLE_BUFFER", 16)  # 74 records: windows of 16, 16, 16, 16 and 10

    def input_fn(start_step=0):
        return data.make_input_fn(
            pets, "train", image_size=8, global_batch_size=37, training=True, seed=1, start_step=start_step
        )

    fresh = take(input_fn(), 6)
    epoch = np.concatenate([fresh[0][1], fresh[1][1]])
    np.testing.assert_array_equal(np.sort(epoch), np.sort(pets.records("train").read_labels()))
    assert not np.array_equal(epoch, pets.records("train").read_labels())
    assert_same_batches(take(input_fn(start_step=3), 3), fresh[3:])
