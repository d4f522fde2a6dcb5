"""RandAugment ops: every draw a stateless function of the example seed, eagerly and inside tf.data."""

import numpy as np
import tensorflow as tf

from trainers.data import randaugment

SEED = tf.constant([3, 11], tf.int64)


def _image(seed=0, size=16):
    return tf.constant(np.random.default_rng(seed).uniform(0, 255, (size, size, 3)), tf.float32)


def test_every_randaugment_op_gives_the_same_image_eagerly_and_inside_tf_data():
    image = _image()
    fns = [randaugment.clipped(op, 9.0) for op in randaugment.OPS]
    fns.append(lambda x, s: randaugment.randaugment(x, s, 2, 20))
    eager = [fn(image, SEED).numpy() for fn in fns]
    # One pipeline computes all of them (one trace, plain TensorFlow ops: AutoGraph is not needed).
    all_ops = tf.autograph.experimental.do_not_convert(lambda x: tuple(fn(x, SEED) for fn in fns))
    in_data = next(iter(tf.data.Dataset.from_tensors(image).map(all_ops)))
    for name, got, expected in zip([op.__name__ for op in randaugment.OPS] + ["randaugment"], in_data, eager):
        np.testing.assert_array_equal(got.numpy(), expected, err_msg=name)
        assert expected.shape == (16, 16, 3) and 0 <= expected.min() and expected.max() <= 255
        assert not np.array_equal(expected, image.numpy()), f"{name} left the image as it was"


def test_randaugment_draws_depend_on_the_example_seed_only():
    image = _image()
    first = randaugment.randaugment(image, SEED, 2, 15).numpy()
    np.testing.assert_array_equal(first, randaugment.randaugment(image, SEED, 2, 15).numpy())
    others = [randaugment.randaugment(image, tf.constant([3, s], tf.int64), 2, 15).numpy() for s in range(4)]
    assert sum(not np.array_equal(first, o) for o in others) >= 3


def test_ops_at_a_magnitude_do_what_the_reference_scales_say():
    image = tf.round(_image())
    x = image.numpy()

    def run(op, magnitude):
        return randaugment.clipped(op, magnitude)(image, SEED).numpy()

    np.testing.assert_array_equal(run(randaugment.invert, 0), 255 - x)
    # Solarize below int(256 * 5 / 10) = 128; posterize at M = 0 keeps the top bit (shift clamped to 7).
    np.testing.assert_array_equal(run(randaugment.solarize, 5), np.where(x < 128, x, 255 - x))
    np.testing.assert_array_equal(run(randaugment.posterize, 0), np.where(x >= 128, 128.0, 0.0))
    # Enhancement factor 0.1 + 1.8 * M / 10: brightness at M = 0 scales by 0.1.
    np.testing.assert_allclose(run(randaugment.brightness, 0), 0.1 * x, rtol=1e-6)
