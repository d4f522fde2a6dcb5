"""keras_vit.xla_inference: float32 and bfloat16 inference traced on an x86 CPU without AVX-512
runs as one XLA-compiled call, with the model's outputs; everywhere else the call is TensorFlow's
graph."""

import functools
import gc
import weakref

import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import cpu_info, onednn_default, onednn_graph, xla_inference

# ViT-Ti's width (the smallest measured) on a 4 x 4 grid, one block: small enough to trace fast.
TI_WIDE = dict(
    image_size=32,
    patch_size=8,
    hidden_size=192,
    num_layers=1,
    num_heads=3,
    mlp_dim=384,
    num_classes=7,
    classifier_activation=None,
    include_preprocessing=False,
)


@pytest.fixture
def avx2_cpu(monkeypatch):
    """An x86 CPU without AVX-512 and without a GPU, whatever this machine is."""
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(onednn_default.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(onednn_graph, "has_gpu", lambda: False)
    monkeypatch.delenv(xla_inference.SWITCH, raising=False)


def _model(**overrides):
    model = keras_vit.ViT(**{**TI_WIDE, **overrides})
    # Non-zero head: the official initialisation's zero head would make every output equal.
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(0, 0.05, head.kernel.shape).astype("float32"))
    return model


def _images(batch=2):
    return tf.constant(np.random.default_rng(0).uniform(-1, 1, (batch, 32, 32, 3)).astype("float32"))


def _compiled_traces(model):
    return xla_inference.compiled(model).experimental_get_tracing_count()


def test_a_traced_float32_call_is_compiled_once_with_the_models_outputs(avx2_cpu):
    model = _model()
    images = _images()
    eager = model(images, training=False)
    assert _compiled_traces(model) == 0  # an eager call is the layers themselves
    traced = tf.function(lambda x: model(x, training=False))
    np.testing.assert_allclose(traced(images), eager, rtol=1e-5, atol=1e-5)
    assert _compiled_traces(model) == 1
    traced(images)
    assert _compiled_traces(model) == 1  # one compile per shape, not per call
    # The compiled call is XLA's: inside it the layers run as themselves (no recursion), and the
    # graph of the caller holds a call that XLA must compile.
    graph = traced.get_concrete_function(images).graph.as_graph_def()
    calls = [n for n in graph.node if n.op in ("StatefulPartitionedCall", "PartitionedCall")]
    assert calls and any(
        f.attr["_XlaMustCompile"].b for f in graph.library.function if "_XlaMustCompile" in f.attr
    )


@pytest.mark.parametrize("policy", ["bfloat16", "mixed_bfloat16"])
def test_a_traced_bfloat16_call_is_compiled_with_the_float32_models_outputs_to_bfloat16_rounding(
    avx2_cpu, policy
):
    """XLA computes each fusion in float32 and rounds its result to bfloat16: the outputs are the
    float32 model's as nearly as TensorFlow's own bfloat16 graph gives them (0.014 against 0.033
    off at most on this model, whose largest output is 1.3), and in the policy's dtype."""
    reference = _model()
    model = _model(dtype=policy)
    model.set_weights(reference.get_weights())
    images = _images()
    traced = tf.function(lambda x: model(x, training=False))(images)
    assert _compiled_traces(model) == 1
    assert traced.dtype == model(images, training=False).dtype
    expected = reference(images, training=False)
    np.testing.assert_allclose(tf.cast(traced, tf.float32), expected, atol=0.03)


def test_model_predict_of_a_fixed_batch_runs_compiled(avx2_cpu):
    model = _model()
    images = _images(batch=4)
    expected = model(images, training=False)
    np.testing.assert_allclose(model.predict(images, batch_size=4, verbose=0), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "why",
    ["avx512", "arm", "training", "float16", "narrow", "hybrid", "any_batch", "strategy", "switch", "xla"],
)
def test_everywhere_else_the_call_is_tensorflows_graph(avx2_cpu, monkeypatch, why):
    """The compiled call only where it measured faster and can run: not on a CPU with AVX-512
    (oneDNN was as fast there), not for training, float16, models narrower than ViT-Ti or with a
    ResNet stem (not measured), graphs for any batch size (exports must run without XLA), under a
    strategy (variables on several devices), with the switch off, or inside XLA already."""
    overrides, spec = {}, tf.TensorSpec((2, 32, 32, 3), tf.float32)
    training, jit_compile = False, False
    if why == "avx512":
        monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx2", "avx512f"}))
    elif why == "arm":
        monkeypatch.setattr(onednn_default.platform, "machine", lambda: "aarch64")
    elif why == "training":
        training = True
    elif why == "float16":
        overrides = dict(dtype="mixed_float16")
    elif why == "narrow":
        overrides = dict(hidden_size=96, mlp_dim=192)
    elif why == "hybrid":
        overrides = dict(patch_size=1, resnet_layers=(1, 1), resnet_width=0.5)
    elif why == "any_batch":
        spec = tf.TensorSpec((None, 32, 32, 3), tf.float32)
    elif why == "switch":
        monkeypatch.setenv(xla_inference.SWITCH, "0")
    elif why == "xla":
        jit_compile = True
    model = _model(**overrides)
    call = tf.function(lambda x: model(x, training=training), jit_compile=jit_compile)
    if why == "strategy":
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
        with strategy.scope():
            strategy.run(call.get_concrete_function, args=(spec,))
    else:
        call.get_concrete_function(spec)
    assert _compiled_traces(model) == 0


def test_compiled_calls_are_kept_per_model_and_let_go_with_it(avx2_cpu):
    """A model's compiled call is made once, and does not keep a deleted model alive (a leak
    per model built in a loop)."""
    first, second = _model(), _model()
    assert xla_inference.compiled(first) is xla_inference.compiled(first)
    assert xla_inference.compiled(first) is not xla_inference.compiled(second)
    # (AutoGraph would keep the frame's locals of a converted lambda: none here.)
    traced = tf.function(functools.partial(first, training=False), autograph=False)
    traced(_images())
    del traced
    assert first in xla_inference._COMPILED
    first_ref = weakref.ref(first)
    del first
    gc.collect()
    assert first_ref() is None
