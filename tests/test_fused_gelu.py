"""keras_vit.fused_gelu: the MLP's GELU of a traced training step as one XLA-compiled kernel each
way, with Keras' values and the exact derivative, and only in such a step."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from fixtures import pretend_onednn_cpu

from keras_vit import fused_gelu, layers, onednn_graph

# bfloat16 keeps 8 significant bits: rounding once is off by at most half a unit in the last place.
HALF_ULP_BFLOAT16 = 2.0**-8
# Where the input is very negative, float32 itself cancels (1 + tanh(u), 1 - tanh(u)^2 near 0):
# absolute errors up to about 1e-5 in the gradient, far below bfloat16's rounding elsewhere.
FLOAT32_FLOOR = 3e-5


def _beyond_one_rounding(got, want):
    """Where bfloat16 `got` is further from float64 `want` than one rounding puts it."""
    error = np.abs(np.float64(tf.cast(got, tf.float32).numpy()) - want)
    return error > HALF_ULP_BFLOAT16 * np.abs(want) * 1.001 + FLOAT32_FLOOR


@pytest.fixture
def cpu_kernels(monkeypatch):
    """A CPU whose TensorFlow runs its own x86 kernels, whatever this machine is; the switch unset."""
    pretend_onednn_cpu(monkeypatch, fused_gelu.SWITCH)


def _activations(shape, dtype, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    return tf.cast(rng.normal(0.0, scale, size=shape).astype(np.float32), dtype)


def _compiled_calls(function, *args):
    """The calls in `function`'s graph that XLA must compile."""
    graph = function.get_concrete_function(*args).graph
    return sum(
        "Call" in op.type and op.node_def.attr["_XlaMustCompile"].b
        for op in graph.get_operations()
        if "_XlaMustCompile" in op.node_def.attr
    )


def _value_and_gradient(approximate, training=True):
    @tf.function
    def step(x, upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fused_gelu.gelu(x, approximate=approximate, training=training)
        return y, tape.gradient(y, x, output_gradients=upstream)

    return step


def _reference(x, upstream, approximate):
    """TensorFlow's own GELU and its automatic derivative, in float64."""
    wide = tf.cast(x, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(wide)
        y = tf.nn.gelu(wide, approximate=approximate)
    return y.numpy(), tape.gradient(y, wide, output_gradients=tf.cast(upstream, tf.float64)).numpy()


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
def test_the_kernels_compute_the_gelu_and_its_derivative_to_float32_precision(approximate):
    # The kernels themselves on float32 input (a model's float32 activations keep Keras' GELU):
    # catches the other form of the GELU (tanh and erf differ by up to 5e-4 here), a derivative
    # missing a term (the cubic's 3 * 0.044715 x^2, or the density's x phi(x): errors of 0.01
    # and more), or the gradient of another tensor, which bfloat16's rounding could blur.
    x = _activations((2, 197, 96), "float32")
    upstream = _activations((2, 197, 96), "float32", seed=1, scale=1.0)

    @tf.function
    def step(x, upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fused_gelu._fused(x, approximate)
        return y, tape.gradient(y, x, output_gradients=upstream)

    assert _compiled_calls(step, x, upstream) == 2  # the forward kernel and the backward one
    y, dx = step(x, upstream)
    y_ref, dx_ref = _reference(x, upstream, approximate)
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(dx.numpy(), dx_ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
def test_bfloat16_values_and_gradients_are_computed_in_float32_and_rounded_once(cpu_kernels, approximate):
    # Within half a bfloat16 unit of the float64 values: a chain of bfloat16 operations, each
    # rounding (Keras' GELU, and its automatic derivative), misses this bound.
    x = _activations((2, 197, 96), "bfloat16")
    upstream = _activations((2, 197, 96), "bfloat16", seed=1, scale=1.0)
    y, dx = _value_and_gradient(approximate)(x, upstream)
    assert y.dtype == dx.dtype == tf.bfloat16
    y_ref, dx_ref = _reference(x, upstream, approximate)
    for got, want in ((y, y_ref), (dx, dx_ref)):
        assert not np.any(_beyond_one_rounding(got, want))


def test_keras_bfloat16_chain_is_further_from_the_gelu_than_one_rounding(cpu_kernels):
    """The bound above can fail: Keras' own bfloat16 GELU and gradient break it."""
    x = _activations((2, 197, 96), "bfloat16")
    upstream = _activations((2, 197, 96), "bfloat16", seed=1, scale=1.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = keras.activations.gelu(x, approximate=True)
    dx = tape.gradient(y, x, output_gradients=upstream)
    y_ref, dx_ref = _reference(x, upstream, approximate=True)
    beyond = [np.any(_beyond_one_rounding(got, want)) for got, want in ((y, y_ref), (dx, dx_ref))]
    assert beyond == [True, True]


def test_the_kernels_run_only_in_a_traced_bfloat16_training_call(cpu_kernels, monkeypatch):
    x = _activations((2, 8, 16), "bfloat16")
    upstream = tf.ones_like(x)
    assert _compiled_calls(_value_and_gradient(True), x, upstream) == 2
    # float32 and float16 keep Keras' GELU (and a float32 run its bits).
    for dtype in (tf.float32, tf.float16):
        assert _compiled_calls(_value_and_gradient(True), tf.cast(x, dtype), tf.cast(upstream, dtype)) == 0
    # Inference keeps Keras' GELU (oneDNN fuses it with the matmul and bias there).
    assert _compiled_calls(_value_and_gradient(True, training=False), x, upstream) == 0
    # Eager: no graph to put them in.
    assert not fused_gelu.applies(x, training=True)
    # A step XLA compiles whole fuses Keras' GELU itself.
    whole = tf.function(lambda x: fused_gelu.gelu(x, training=True), jit_compile=True)
    assert _compiled_calls(whole, x) == 0
    keras_whole = tf.function(lambda x: keras.activations.gelu(x, approximate=True), jit_compile=True)
    np.testing.assert_array_equal(np.float32(whole(x)), np.float32(keras_whole(x)))
    # The switch, read at each trace; and a GPU, which runs the graph instead.
    monkeypatch.setenv(fused_gelu.SWITCH, "0")
    assert _compiled_calls(_value_and_gradient(True), x, upstream) == 0
    monkeypatch.delenv(fused_gelu.SWITCH)
    # The demo's kernels pinned for the same bits on every CPU (XLA's code follows the CPU).
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert _compiled_calls(_value_and_gradient(True), x, upstream) == 0
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    monkeypatch.setattr(onednn_graph, "has_gpu", lambda: True)
    assert _compiled_calls(_value_and_gradient(True), x, upstream) == 0


def _mlp_block(dtype):
    block = layers.MlpBlock(64, dtype=dtype)
    block.build((None, 10, 16))
    rng = np.random.default_rng(2)
    for weight in block.weights:  # biases of their own: a bias that never reaches the GELU shows
        weight.assign(rng.normal(0.0, 0.5, size=weight.shape).astype("float32"))
    return block


def test_mlp_block_trains_through_the_kernels_with_keras_outputs_and_gradients(cpu_kernels, monkeypatch):
    # Catches the kernels applied to the wrong tensor (before the bias, after the dropout) or a
    # gradient that does not reach the first Dense's kernel and bias.
    atol = 0.06  # a few bfloat16 roundings at the outputs' size
    block = _mlp_block("mixed_bfloat16")
    tokens = _activations((3, 10, 16), "float32", scale=1.0)

    def traced():
        @tf.function
        def step(tokens):
            with tf.GradientTape() as tape:
                out = block(tokens, training=True)
                loss = tf.reduce_sum(tf.cast(out, tf.float32) ** 2)
            return out, tape.gradient(loss, block.trainable_variables)

        return step

    fused = traced()
    assert _compiled_calls(fused, tokens) == 2
    out, grads = fused(tokens)
    monkeypatch.setenv(fused_gelu.SWITCH, "0")
    keras_form = traced()
    assert _compiled_calls(keras_form, tokens) == 0
    expected_out, expected_grads = keras_form(tokens)
    np.testing.assert_allclose(np.float32(out), np.float32(expected_out), atol=atol, rtol=0.02)
    np.testing.assert_allclose(
        np.float32(out), np.float32(block(tokens, training=False)), atol=atol, rtol=0.02
    )
    for got, want in zip(grads, expected_grads):
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(np.float32(got), np.float32(want), atol=atol * scale, rtol=0.02)
