"""trainers/data/mask_patches.py: masked patch prediction's draw as a batch op. Which numbers each
per-replica batch carries (its step, its replica, its micro-batches, evaluation's fixed draw), on
one host, on two and after a resume; the images untouched; one-line errors."""

import numpy as np
import pytest
import tensorflow as tf

from trainers import data
from trainers.data import mask_patches

SEED = 5
PATCH = 4  # 16 px images: 16 patches
DRAW = [("mask_patches", {"patch_size": PATCH})]


@pytest.fixture(scope="module")
def digits():
    return data.get_spec("digits:0-3")


def _context(pipelines=1, pipeline_id=0, replicas=2):
    return tf.distribute.InputContext(pipelines, pipeline_id, replicas)


def _batches(spec, count, context=None, training=True, batch_ops=DRAW, **kwargs):
    input_fn = data.make_input_fn(
        spec,
        "train" if training else "test",
        ops=data.eval_ops(16),
        global_batch_size=8,
        training=training,
        seed=SEED,
        batch_ops=batch_ops,
        **kwargs,
    )
    dataset = input_fn(context or _context())
    return [tuple(part.numpy() for part in batch) for batch in dataset.take(count)]


def _expected(step, replica, rows, micro_batches=1):
    """The draw as the module's docstring defines it: fold the step (int64 in training, int32 for
    evaluation's fixed draw) and then the replica (int32) into (seed, 0); one micro-batch's
    numbers (2, rows, 16), repeated for each micro-batch, as (b, 2, 16)."""
    key = tf.random.experimental.stateless_fold_in(tf.constant([SEED, 0], tf.int64), step)
    key = tf.random.experimental.stateless_fold_in(key, tf.constant(replica, tf.int32))
    noise = tf.random.stateless_uniform([2, rows, 16], key).numpy().transpose(1, 0, 2)
    return np.concatenate([noise] * micro_batches)


def test_each_batch_carries_the_draw_of_its_step_and_replica(digits):
    batches = _batches(digits, 4)
    # Two replicas on one pipeline: the pipeline's batches go to replica 0, 1, 0, 1 at steps 0, 0, 1, 1.
    for k, (_, noise) in enumerate(batches):
        step, replica = tf.constant(k // 2, tf.int64), k % 2
        np.testing.assert_array_equal(noise, _expected(step, replica, 4), err_msg=f"batch {k}")
    assert not np.array_equal(batches[0][1], batches[1][1])  # replicas differ
    assert not np.array_equal(batches[0][1], batches[2][1])  # steps differ
    # The images are the image ops' own: the op only draws.
    plain = _batches(digits, 4, batch_ops=[])
    for (images, _), (plain_images, labels) in zip(batches, plain):
        np.testing.assert_array_equal(images, plain_images)
        assert labels.shape == (4,)  # without the op: the class labels


def test_the_micro_batches_of_a_step_share_its_draw(digits):
    (_, noise), _ = _batches(digits, 2, micro_batches=2)
    np.testing.assert_array_equal(noise, _expected(tf.constant(0, tf.int64), 0, 2, micro_batches=2))
    np.testing.assert_array_equal(noise[:2], noise[2:])


def test_a_resumed_pipeline_and_a_second_host_draw_the_same(digits):
    fresh = _batches(digits, 4)
    resumed = _batches(digits, 2, start_step=1)
    for (_, a), (_, b) in zip(fresh[2:], resumed):
        np.testing.assert_array_equal(a, b)
    # Two hosts, one replica each: the second host's pipeline feeds replica 1.
    second_host = _batches(digits, 2, context=_context(pipelines=2, pipeline_id=1))
    np.testing.assert_array_equal(second_host[0][1], fresh[1][1])
    np.testing.assert_array_equal(second_host[1][1], fresh[3][1])


def test_evaluation_batches_carry_the_fixed_draw_and_no_mixup(digits):
    ops = [("mixup", {"p": 0.5}), *DRAW]
    batches = _batches(digits, 2, training=False, batch_ops=ops)
    plain = _batches(digits, 2, training=False, batch_ops=[])
    for replica, ((images, noise, weights), (plain_images, _, plain_weights)) in enumerate(
        zip(batches, plain)
    ):
        # The fixed draw: the same step (-1, as int32) for every batch, per replica.
        np.testing.assert_array_equal(noise, _expected(mask_patches.EVAL_DRAW, replica, 4))
        np.testing.assert_array_equal(images, plain_images)  # Mixup is training's alone
        np.testing.assert_array_equal(weights, plain_weights)


@pytest.mark.parametrize(
    "op, expected",
    [
        (("mask_patches", {"patch_size": 0}), "patch_size must be an integer >= 1 (the model's), got 0"),
        (("mask_patches", {"patch_size": True}), "patch_size must be an integer >= 1"),
        (("mask_patches", {"patch_size": 5}), "images of 16x16 px do not split into 5 px patches"),
    ],
)
def test_bad_arguments_are_one_line(digits, op, expected):
    with pytest.raises((data.DatasetError, ValueError)) as e:
        _batches(digits, 1, batch_ops=[op])
    assert expected in str(e.value) and "\n" not in str(e.value)
