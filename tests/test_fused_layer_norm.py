"""keras_vit.fused_layer_norm: the layer norms of a traced inference call on oneDNN's fused kernel,
with Keras' outputs and gradients, and only where that kernel is the faster and the graph stays
TensorFlow's own."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from fixtures import pretend_onednn_cpu

from keras_vit import fused_layer_norm, layers, onednn_default, onednn_graph

# ViT-B/16's tokens at batch 1: 151,296 elements, above MIN_ELEMENTS.
LARGE = (1, 197, 768)


@pytest.fixture
def onednn_cpu(monkeypatch):
    """A CPU whose TensorFlow runs oneDNN's kernels, whatever this machine is; the switch unset."""
    pretend_onednn_cpu(monkeypatch, fused_layer_norm.SWITCH)


def _norm(width, dtype="float32", **kwargs):
    norm = keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype, **kwargs)
    norm.build((None, width))
    rng = np.random.default_rng(1)
    # A scale and shift of their own per channel: swapping them, or a wrong epsilon, shows.
    for weight in norm.weights:
        weight.assign(rng.normal(1.0, 0.5, size=weight.shape).astype(weight.dtype))
    return norm


def _fused_ops(function, *args):
    graph = function.get_concrete_function(*args).graph
    return sum(op.type == "_MklLayerNorm" for op in graph.get_operations())


def _tokens(shape, dtype="float32", scale=3.0):
    rng = np.random.default_rng(0)
    return tf.cast(rng.normal(0.5, scale, size=shape).astype(np.float32), dtype)


@pytest.mark.parametrize("dtype, atol", [("float32", 2e-5), ("bfloat16", 0.04)])
def test_a_large_inference_norm_is_one_fused_op_with_keras_outputs(onednn_cpu, dtype, atol):
    # Catches the kernel given the shift for the scale, another epsilon, or another axis: the
    # outputs then differ by far more than float rounding (bfloat16: one unit in its last place
    # at the outputs' size of about 4).
    norm = _norm(768, dtype)
    tokens = _tokens(LARGE, dtype)
    fused = tf.function(lambda x: fused_layer_norm.layer_norm(norm, x, training=False))
    if dtype == "bfloat16" and not onednn_graph.onednn_has_bfloat16():
        # Without AVX-512 oneDNN's kernel cannot run bfloat16 (it failed to create a primitive).
        assert _fused_ops(fused, tokens) == 0
        return
    assert _fused_ops(fused, tokens) == 1
    expected = np.float32(norm(tokens))
    np.testing.assert_allclose(np.float32(fused(tokens)), expected, atol=atol, rtol=0)
    # Keras' norm in float32 is the reference the bfloat16 kernel is held to as well.
    wide = _norm(768)
    np.testing.assert_allclose(
        np.float32(tf.function(lambda x: fused_layer_norm.layer_norm(wide, x))(_tokens(LARGE))),
        np.float32(wide(_tokens(LARGE))),
        atol=2e-5,
        rtol=0,
    )


def test_the_gradient_of_an_inference_call_is_keras_own(onednn_cpu):
    # A saliency map takes the gradient of an inference call: the kernel has no gradient of its
    # own, so without one the tape would raise, and a wrong one would differ here.
    norm = _norm(768)
    tokens = _tokens(LARGE)
    weights = tf.constant(np.random.default_rng(2).normal(size=LARGE).astype(np.float32))

    def gradients(call):
        @tf.function
        def traced(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(call(x) * weights)
            return tape.gradient(loss, [x, norm.gamma, norm.beta])

        return traced

    fused = gradients(lambda x: fused_layer_norm.layer_norm(norm, x, training=False))
    assert _fused_ops(fused, tokens) == 1
    for got, expected in zip(fused(tokens), gradients(norm)(tokens)):
        np.testing.assert_allclose(np.float32(got), np.float32(expected), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "why, shape, kwargs",
    [
        ("too small for the kernel's fixed cost (ViT-Ti/16 at batch 1)", (1, 197, 192), {}),
        ("a batch known only when run: a graph for any batch, as exports trace", (None, 197, 768), {}),
        ("XLA, which cannot compile the op", LARGE, {"jit_compile": True}),
    ],
)
def test_keras_form_where_the_kernel_would_not_help_or_not_run(onednn_cpu, why, shape, kwargs):
    norm = _norm(shape[-1])
    traced = tf.function(lambda x: fused_layer_norm.layer_norm(norm, x), **kwargs)
    assert _fused_ops(traced, tf.TensorSpec(shape, tf.float32)) == 0, why


def test_keras_form_in_training_eager_without_onednn_or_the_op_on_gpus_or_turned_off(onednn_cpu, monkeypatch):
    norm = _norm(768)
    spec = tf.TensorSpec(LARGE, tf.float32)

    def fused_ops(training=False):
        return _fused_ops(tf.function(lambda x: fused_layer_norm.layer_norm(norm, x, training)), spec)

    assert fused_ops() == 1  # the conditions below each turn it off
    assert fused_ops(training=True) == 0  # training keeps Keras' form and its gradients
    assert not fused_layer_norm.applies(norm, _tokens(LARGE))  # eager: no graph to put it in
    with monkeypatch.context() as patch:
        patch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
        assert fused_ops() == 0
    with monkeypatch.context() as patch:
        patch.setattr(onednn_graph, "has_gpu", lambda: True)
        assert fused_ops() == 0
    with monkeypatch.context() as patch:
        patch.setattr(onednn_default.platform, "machine", lambda: "aarch64")
        assert fused_ops() == 0
    with monkeypatch.context() as patch:
        patch.setenv(fused_layer_norm.SWITCH, "0")
        assert fused_ops() == 0
    with monkeypatch.context() as patch:  # a TensorFlow without the op
        patch.setattr(fused_layer_norm, "op_registered", lambda: False)
        assert fused_ops() == 0
    assert fused_layer_norm.op_registered()  # this one has it, or the tests above could not pass


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`, which is deprecated")
@pytest.mark.parametrize("kwargs", [{"rms_scaling": True}, {"center": False}, {"scale": False}, {"axis": 1}])
def test_norms_the_kernel_does_not_compute_keep_keras_form(onednn_cpu, kwargs):
    norm = keras.layers.LayerNormalization(epsilon=1e-6, **kwargs)
    norm.build(LARGE)
    traced = tf.function(lambda x: fused_layer_norm.layer_norm(norm, x))
    assert _fused_ops(traced, tf.TensorSpec(LARGE, tf.float32)) == 0


def test_an_encoder_block_uses_it_for_both_norms_with_the_same_outputs(onednn_cpu, monkeypatch):
    # Catches a block that fuses one norm and not the other, or feeds a norm the wrong tokens.
    block = layers.EncoderBlock(12, 96, dtype="float32")
    block.build(LARGE)
    rng = np.random.default_rng(3)
    for weight in block.weights:  # random biases and norms: a dropped bias or norm shows
        weight.assign(rng.normal(scale=0.05, size=weight.shape).astype(weight.dtype))
    tokens = _tokens(LARGE, scale=1.0)
    fused = tf.function(lambda x: block(x, training=False))
    assert _fused_ops(fused, tokens) == 2
    monkeypatch.setenv(fused_layer_norm.SWITCH, "0")
    plain = tf.function(lambda x: block(x, training=False))
    assert _fused_ops(plain, tokens) == 0
    np.testing.assert_allclose(np.float32(fused(tokens)), np.float32(plain(tokens)), atol=1e-4, rtol=0)
    assert os.environ[fused_layer_norm.SWITCH] == "0"
