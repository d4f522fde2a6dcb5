"""The registered image ops: the lists train_ops and eval_ops build, their seeds, a new op, and
the one-line DatasetError of every bad list."""

import numpy as np
import pytest
import tensorflow as tf

from configs.fields import TRAINING, fields
from trainers import data
from trainers.data import ops

SEED = tf.constant([3, 4], tf.int64)


@pytest.fixture(scope="module")
def digits():
    return data.get_spec("digits:0-1")


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry, so that the ops a test registers are gone after it."""
    monkeypatch.setattr(ops, "_REGISTRY", dict(ops._REGISTRY))


def _png(height=12, width=10):
    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return tf.io.encode_png(pixels)


def _one_line_error(make):
    with pytest.raises(data.DatasetError) as e:
        make()
    text = str(e.value)
    assert "\n" not in text and text
    return text


def test_the_registered_ops():
    assert ops.registered() == [
        "decode",
        "flip_lr",
        "inception_crop",
        "mask_patches",
        "mixup",
        "randaug",
        "random_grayscale",
        "resize",
        "value_range",
    ]


def _config(**values):
    """A training config, every field at its declared default (the paper's augmentation, no
    RandAugment) but `values`."""
    config = fields(TRAINING)
    for name, value in values.items():
        config[name] = value
    return config


def test_train_ops_follow_the_config():
    config = fields(TRAINING)  # the run's fields at their declared defaults: the paper's augmentation
    config.image_size = 32
    assert ops.train_ops(config) == [
        ("decode", {}),
        ("inception_crop", {"min_area": 0.05}),
        ("resize", {"size": 32}),
        ("flip_lr", {}),
        ("value_range", {"low": -1.0, "high": 1.0}),
    ]
    config.crop_min_area, config.random_flip = 0.5, False
    assert ops.train_ops(config) == [
        ("decode", {}),
        ("inception_crop", {"min_area": 0.5}),
        ("resize", {"size": 32}),
        ("value_range", {"low": -1.0, "high": 1.0}),
    ]
    assert ops.eval_ops(32) == [
        ("decode", {}),
        ("resize", {"size": 32}),
        ("value_range", {"low": -1.0, "high": 1.0}),
    ]


def test_the_kth_random_op_is_seeded_with_fold_in_k():
    got = ops.Chain(ops.train_ops(_config(image_size=16, crop_min_area=0.3)))(_png(), SEED)
    image = ops.decode_image(_png())
    image = ops.inception_crop(0.3)(image, tf.random.experimental.stateless_fold_in(SEED, 1, alg="philox"))
    image = tf.image.resize(tf.cast(image, tf.float32), [16, 16], method="bilinear")
    image = tf.image.stateless_random_flip_left_right(
        image, tf.random.experimental.stateless_fold_in(SEED, 2, alg="philox")
    )
    np.testing.assert_array_equal(got, tf.clip_by_value(image / 127.5 - 1.0, -1.0, 1.0))


def test_value_range_minus_one_to_one_is_x_over_127_5_minus_1_exactly():
    pixels = tf.range(256, dtype=tf.float32)
    np.testing.assert_array_equal(ops.value_range()(pixels), pixels / 127.5 - 1.0)
    np.testing.assert_allclose(ops.value_range(0.0, 1.0)(pixels), pixels / 255.0, rtol=1e-6)


def test_inception_crop_area_and_aspect_ratio():
    image = tf.zeros([100, 120, 3], tf.uint8)
    crop = ops.inception_crop()
    for i in range(40):
        h, w, _ = crop(image, tf.constant([7, i], tf.int64)).shape
        assert 0.05 * 100 * 120 * 0.9 <= h * w <= 100 * 120
        if (h, w) != (100, 120):  # the fallback is the whole image
            assert 0.7 <= w / h <= 1.4


def test_a_registered_op_joins_a_pipeline_and_leaves_the_other_seeds_alone(registry, digits):
    @ops.register("invert")
    def invert():
        return lambda image: 255 - image

    assert "invert" in ops.registered()
    plain = data.make_input_fn(digits, "test", image_size=8, global_batch_size=4, training=False)
    inverted = data.make_input_fn(
        digits,
        "test",
        global_batch_size=4,
        training=False,
        ops=[("decode", {}), ("invert", {}), ("resize", {"size": 8}), ("value_range", {})],
    )
    (a, labels, _), (b, same_labels, _) = next(iter(plain(None))), next(iter(inverted(None)))
    np.testing.assert_allclose(b, -a, atol=1e-6)
    np.testing.assert_array_equal(labels, same_labels)
    # A deterministic op does not move the seed of the random ops after it.
    crop = ("inception_crop", {"min_area": 0.2})
    with_invert = ops.Chain([("decode", {}), ("invert", {}), crop])(_png(30, 30), SEED)
    without = ops.Chain([("decode", {}), crop])(_png(30, 30), SEED)
    np.testing.assert_array_equal(with_invert, 255 - without)
    with pytest.raises(ValueError, match="registered twice"):
        ops.register("invert")(invert)


def test_an_unknown_op_is_a_one_line_error_naming_the_registered_ones(digits):
    message = _one_line_error(
        lambda: data.make_input_fn(
            digits, "train", global_batch_size=4, training=True, ops=[("decode", {}), ("colour_jitter", {})]
        )
    )
    assert message == (
        "unknown image op 'colour_jitter': the registered ops are "
        "decode, flip_lr, inception_crop, mask_patches, mixup, randaug, random_grayscale, resize, value_range"
    )


@pytest.mark.parametrize(
    "op, expected",
    [
        (("resize", {"size": 0}), "image op resize(size=0): size must be an integer >= 1, got 0"),
        (("resize", {"height": 8}), "image op resize(height=8): "),
        (
            ("inception_crop", {"min_area": 1.5}),
            "image op inception_crop(min_area=1.5): min_area must be in (0, 1]",
        ),
        (
            ("value_range", {"low": 1, "high": -1}),
            "image op value_range(low=1, high=-1): low must be below high",
        ),
        ("decode", "an image op is a pair (op name, kwargs dict), got 'decode'"),
    ],
)
def test_bad_ops_are_one_line_errors_naming_the_op(op, expected):
    assert _one_line_error(lambda: ops.Chain([op])).startswith(expected)


def test_evaluation_takes_neither_random_ops_nor_images_of_several_sizes(digits):
    message = _one_line_error(
        lambda: data.make_input_fn(
            digits,
            "test",
            global_batch_size=4,
            training=False,
            ops=data.train_ops(_config(image_size=8)),
        )
    )
    assert "random inception_crop, flip_lr" in message
    unsized = data.make_input_fn(digits, "test", global_batch_size=4, training=False, ops=[("decode", {})])
    assert "end them with a resize" in _one_line_error(lambda: unsized(None))


def test_ops_and_the_augmentation_keywords_do_not_mix(digits):
    with pytest.raises(TypeError, match="set them in the ops"):
        data.make_input_fn(
            digits, "train", global_batch_size=4, training=True, random_flip=False, ops=data.eval_ops(8)
        )
