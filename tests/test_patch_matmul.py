"""keras_vit.patch_matmul: a bfloat16 training call embeds the patches with one matrix product, with
the convolution's values and gradients, and only there."""

import numpy as np
import pytest
import tensorflow as tf
from fixtures import pretend_onednn_cpu

from keras_vit import layers, patch_matmul

# Patch 4 of a 12 x 10 image with 3 channels: 3 x 2 patches, the image's last 2 columns left out.
PATCH, HEIGHT, WIDTH, CHANNELS, DIM = 4, 12, 10, 3, 5


@pytest.fixture
def cpu_kernels(monkeypatch):
    """A CPU whose TensorFlow runs its own x86 kernels, whatever this machine is; the switch unset."""
    pretend_onednn_cpu(monkeypatch, patch_matmul.SWITCH)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(2, HEIGHT, WIDTH, CHANNELS))
    kernel = rng.normal(size=(PATCH, PATCH, CHANNELS, DIM)) * 0.3
    bias = rng.normal(size=(DIM,))
    upstream = rng.normal(size=(2, HEIGHT // PATCH, WIDTH // PATCH, DIM))
    return images, kernel, bias, upstream


def _reference(images, kernel, bias, upstream):
    """Each output the sum over its own patch, in float64; the weight gradients by hand."""
    grid_h, grid_w = HEIGHT // PATCH, WIDTH // PATCH
    out = np.zeros((2, grid_h, grid_w, DIM))
    kernel_gradient = np.zeros_like(kernel)
    for b in range(2):
        for i in range(grid_h):
            for j in range(grid_w):
                patch = images[b, i * PATCH : (i + 1) * PATCH, j * PATCH : (j + 1) * PATCH]
                out[b, i, j] = np.einsum("hwc,hwcd->d", patch, kernel) + bias
                kernel_gradient += np.einsum("hwc,d->hwcd", patch, upstream[b, i, j])
    return out, kernel_gradient, upstream.sum(axis=(0, 1, 2))


def _embed_with_gradients(dtype, training):
    images, kernel, bias, upstream = _inputs()
    kernel_var, bias_var = tf.Variable(kernel, dtype=tf.float32), tf.Variable(bias, dtype=tf.float32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            y = patch_matmul.embed(
                tf.cast(images, dtype), tf.cast(kernel_var, dtype), tf.cast(bias_var, dtype), training
            )
            loss = tf.reduce_sum(tf.cast(y, tf.float64) * upstream)
        return y, tape.gradient(loss, [kernel_var, bias_var])

    y, (kernel_gradient, bias_gradient) = step()
    ops = {op.type for op in step.get_concrete_function().graph.get_operations()}
    return y, kernel_gradient, bias_gradient, ops


def test_a_bfloat16_training_call_is_one_product_with_the_convolutions_values(cpu_kernels):
    want, want_kernel_gradient, want_bias_gradient = _reference(*_inputs())
    y, kernel_gradient, bias_gradient, ops = _embed_with_gradients(tf.bfloat16, training=True)
    assert "MatMul" in ops and not any(op.startswith("Conv2D") for op in ops)
    assert y.dtype == tf.bfloat16 and y.shape == want.shape
    # bfloat16 inputs and outputs: a few units in the last of 8 significant bits.
    scale = np.abs(want).max()
    np.testing.assert_allclose(tf.cast(y, tf.float64).numpy(), want, atol=0.03 * scale)
    # A transposed grid or a kernel read in another order would be off by the size of the values.
    np.testing.assert_allclose(
        kernel_gradient.numpy(), want_kernel_gradient, atol=0.03 * np.abs(want_kernel_gradient).max()
    )
    np.testing.assert_allclose(bias_gradient.numpy(), want_bias_gradient, rtol=0.02, atol=0.05)


def test_float32_and_inference_keep_the_convolution(cpu_kernels):
    want, want_kernel_gradient, _ = _reference(*_inputs())
    *_, ops = _embed_with_gradients(tf.bfloat16, training=False)
    assert "Conv2D" in ops and "MatMul" not in ops
    y, kernel_gradient, _, ops = _embed_with_gradients(tf.float32, training=True)
    assert "Conv2D" in ops and "MatMul" not in ops
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(kernel_gradient.numpy(), want_kernel_gradient, rtol=1e-5, atol=1e-5)


def test_the_switch_keeps_the_convolution(cpu_kernels, monkeypatch):
    monkeypatch.setenv(patch_matmul.SWITCH, "0")
    *_, ops = _embed_with_gradients(tf.bfloat16, training=True)
    assert "Conv2D" in ops and "MatMul" not in ops


def test_the_patch_embedding_layer_takes_it_in_a_bfloat16_training_call(cpu_kernels):
    # The same layer, the same weights: training and inference embed alike, to bfloat16's rounding.
    embedding = layers.PatchEmbedding(PATCH, DIM, dtype="mixed_bfloat16", bias_initializer="random_normal")
    images = tf.constant(_inputs()[0], tf.float32)
    inference = tf.function(lambda x: embedding(x, training=False))(images)
    training = tf.function(lambda x: embedding(x, training=True))(images)
    assert training.shape == inference.shape == (2, (HEIGHT // PATCH) * (WIDTH // PATCH), DIM)
    scale = np.abs(tf.cast(inference, tf.float32).numpy()).max()
    np.testing.assert_allclose(
        tf.cast(training, tf.float32).numpy(), tf.cast(inference, tf.float32).numpy(), atol=0.02 * scale
    )
