"""keras_vit.compiled_layer_norm: the layer norms of a traced bfloat16 training call as one XLA-compiled
kernel each way, with the layer norm's values and exact gradients, and only in such a call."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from fixtures import pretend_onednn_cpu

from keras_vit import compiled_layer_norm, fused_layer_norm

EPSILON = 1e-6
# bfloat16 keeps 8 significant bits: one rounding is off by at most half a unit in the last place.
HALF_ULP_BFLOAT16 = 2.0**-8


@pytest.fixture
def cpu_kernels(monkeypatch):
    """A CPU whose TensorFlow runs its own x86 kernels, whatever this machine is; the switch unset."""
    pretend_onednn_cpu(monkeypatch, compiled_layer_norm.SWITCH)


def _norm(dtype="mixed_bfloat16", width=24):
    layer = keras.layers.LayerNormalization(epsilon=EPSILON, dtype=dtype)
    layer.build((None, None, width))
    rng = np.random.default_rng(3)
    # A scale and offset of their own, so that a gradient that mixes them up is seen.
    layer.gamma.assign(rng.normal(1.0, 0.5, size=width))
    layer.beta.assign(rng.normal(0.0, 0.5, size=width))
    return layer


def _tokens(dtype, width=24):
    rng = np.random.default_rng(4)
    # Rows of their own mean and spread, as the residual stream's are.
    x = rng.normal(size=(2, 7, width)) * rng.uniform(0.5, 4.0, size=(2, 7, 1)) + rng.normal(size=(2, 7, 1))
    return tf.cast(x, dtype)


def _value_and_gradients(layer, x, upstream, training=True):
    @tf.function
    def step(x, upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fused_layer_norm.layer_norm(layer, x, training)
        return y, tape.gradient(y, [x, layer.gamma, layer.beta], output_gradients=upstream)

    return step(x, upstream), step


def _reference(layer, x, upstream):
    """The layer norm of the same bfloat16 inputs and its automatic derivatives, in float64."""
    wide, gamma, beta = (tf.cast(v, tf.float64) for v in (x, layer.gamma, layer.beta))
    with tf.GradientTape() as tape:
        tape.watch([wide, gamma, beta])
        mean = tf.reduce_mean(wide, -1, keepdims=True)
        variance = tf.reduce_mean(tf.square(wide - mean), -1, keepdims=True)
        y = (wide - mean) / tf.sqrt(variance + EPSILON) * gamma + beta
    return y, tape.gradient(y, [wide, gamma, beta], output_gradients=tf.cast(upstream, tf.float64))


def _compiled_calls(step, *args):
    graph = step.get_concrete_function(*args).graph
    return sum(
        op.node_def.attr["_XlaMustCompile"].b
        for op in graph.get_operations()
        if "_XlaMustCompile" in op.node_def.attr
    )


def test_a_bfloat16_training_call_has_the_norms_values_and_gradients(cpu_kernels):
    layer = _norm()
    x, upstream = _tokens(tf.bfloat16), _tokens(tf.bfloat16) * 0.5
    (y, (d_x, d_gamma, d_beta)), step = _value_and_gradients(layer, x, upstream)
    assert _compiled_calls(step, x, upstream) == 2  # the forward kernel and the backward one
    want_y, (want_x, want_gamma, want_beta) = _reference(layer, x, upstream)
    assert y.dtype == d_x.dtype == tf.bfloat16 and d_gamma.dtype == d_beta.dtype == tf.float32
    # The outputs and the tokens' gradient: computed in float32, rounded once to bfloat16.
    for got, want in ((y, want_y), (d_x, want_x)):
        want = want.numpy()
        error = np.abs(tf.cast(got, tf.float64).numpy() - want)
        assert np.all(error <= HALF_ULP_BFLOAT16 * np.abs(want) * 1.001 + 1e-5 * np.abs(want).max())
    # The scale's and offset's gradients: float32 sums over the 14 rows.
    np.testing.assert_allclose(d_gamma.numpy(), want_gamma.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_beta.numpy(), want_beta.numpy(), rtol=1e-5, atol=1e-5)


def test_float32_and_inference_keep_keras_form(cpu_kernels):
    upstream = _tokens(tf.float32)
    for layer, x, training in (
        (_norm("float32"), _tokens(tf.float32), True),
        (_norm(), _tokens(tf.bfloat16), False),
    ):
        assert not compiled_layer_norm.applies(layer, x, training)
    layer, x = _norm("float32"), _tokens(tf.float32)
    _, step = _value_and_gradients(layer, x, upstream)
    assert _compiled_calls(step, x, upstream) == 0


def test_the_switch_keeps_keras_form(cpu_kernels, monkeypatch):
    monkeypatch.setenv(compiled_layer_norm.SWITCH, "0")
    layer, x = _norm(), _tokens(tf.bfloat16)
    _, step = _value_and_gradients(layer, x, x)
    assert _compiled_calls(step, x, x) == 0


def test_a_norm_over_another_axis_keeps_keras_form(cpu_kernels):
    layer = keras.layers.LayerNormalization(axis=1, dtype="mixed_bfloat16")
    layer.build((None, 7, 24))
    assert not compiled_layer_norm.applies(layer, _tokens(tf.bfloat16), training=True)
