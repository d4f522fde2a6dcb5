"""trainers/numerics.py: the step's numerics, shared by the engines, are the expressions the tf
engine computed with TensorFlow's own functions (bit for bit), and the micro-batches split each
replica's rows. Their values on Keras' JAX backend against TensorFlow's: tests/test_jax_engine_cli.py."""

import numpy as np
import tensorflow as tf

from trainers import numerics


def _logits_and_targets():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 8, (64, 10)).astype("float32")
    logits[0, :3] = [0.0, -0.0, 300.0]  # zeros of both signs, and a logit whose exp overflows
    return tf.constant(logits), tf.constant((rng.uniform(size=(64, 10)) < 0.3).astype("float32"))


def test_the_sigmoid_loss_is_tensorflows_bit_for_bit():
    logits, targets = _logits_and_targets()
    expected = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=logits), axis=-1)
    got = numerics.per_example_loss("sigmoid", targets, logits)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    # Integer labels are one-hot targets.
    labels = tf.constant(np.arange(64) % 10, tf.int32)
    one_hot = tf.one_hot(labels, 10)
    np.testing.assert_array_equal(
        numerics.per_example_loss("sigmoid", labels, logits).numpy(),
        numerics.per_example_loss("sigmoid", one_hot, logits).numpy(),
    )


def gradients(seed):
    """60 gradient-like tensors of a few shapes and magnitudes from 1e-6 to 0.1 (tests/jax_engine_losses.py
    takes the same on JAX)."""
    rng = np.random.default_rng(seed)
    shapes = [(64,), (64, 64), (64, 256), (256,), (4, 4, 3, 64)] * 12
    return [(rng.standard_normal(s) * 10.0 ** rng.uniform(-6, -1)).astype("float32") for s in shapes]


def test_the_global_norm_is_tensorflows_bit_for_bit():
    """The tf engine's clipped steps are what they were with tf.linalg.global_norm: the same bits
    eager, in a tf.function and under XLA. (A running sum of the squared tensors, optax's order,
    differs from it in the last bit for 3 of these 15.)"""
    modes = {"eager": lambda f: f, "function": tf.function, "xla": lambda f: tf.function(f, jit_compile=True)}
    # Each wrapped once: the five seeds' tensors have the same shapes, so one trace serves them all.
    pairs = {mode: (wrap(numerics.global_norm), wrap(tf.linalg.global_norm)) for mode, wrap in modes.items()}
    for seed in range(5):
        grads = [tf.constant(g) for g in gradients(seed)]
        for mode, (ours, theirs) in pairs.items():
            assert ours(grads).numpy() == theirs(grads).numpy(), (seed, mode)


def test_the_clip_factor_is_tensorflows():
    grads = [tf.constant([3.0, 4.0]), tf.constant([[12.0]])]
    norm = tf.linalg.global_norm(grads)  # 13
    clipped, _ = tf.clip_by_global_norm(grads, 6.5, use_norm=norm)
    factor = numerics.clip_factor(norm, 6.5)
    for ours, theirs in zip([g * factor for g in grads], clipped):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert float(numerics.clip_factor(tf.constant(1.0), 6.5)) == 1.0  # idle below the clip


def test_micro_batches_take_a_slice_of_every_replicas_rows():
    rows = np.arange(12)  # 2 replicas of 6 rows, 3 micro-batches
    got = np.asarray(numerics.micro_batches(tf.constant(rows), 3, replicas=2))
    assert got.tolist() == [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]]
    # One replica: consecutive slices, also when the batch's size is known only when it runs.
    split = tf.function(lambda x: numerics.micro_batches(x, 2), input_signature=[tf.TensorSpec([None, 2])])
    images = np.arange(12, dtype="float32").reshape(6, 2)
    np.testing.assert_array_equal(split(images).numpy(), images.reshape(2, 3, 2))


def test_top1_hits_of_labels_and_of_multi_hot_targets():
    logits = tf.constant([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.0, 0.0, 1.0]])
    assert numerics.top1_hits(tf.constant([1, 1, 2]), logits).numpy().tolist() == [1, 0, 1]
    multi_hot = tf.constant([[0.0, 1, 1], [0, 1, 0], [1, 0, 1]])
    assert numerics.top1_hits(multi_hot, logits).numpy().tolist() == [1, 0, 1]
