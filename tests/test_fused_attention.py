"""keras_vit.fused_attention: the padded path computes the same attention as the plain one; every
case it is not for goes to keras.ops.dot_product_attention unchanged.

cuDNN's kernel needs an NVIDIA GPU, so here the padded path runs on XLA (the same padding,
lengths and slicing; benchmarks/accelerator.py checks the cuDNN path on a GPU).
"""

import os

import numpy as np
from keras import ops

from keras_vit import fused_attention

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _qkv(length, dtype="float32"):
    rng = np.random.default_rng(0)
    return [rng.normal(size=(2, length, 3, 8)).astype(dtype) for _ in range(3)]


def _numpy_attention(query, key, value):
    logits = np.einsum("bqhd,bthd->bhqt", query, key) / np.sqrt(query.shape[-1])
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhqt,bthd->bqhd", weights, value)


def test_on_tensorflow_it_is_keras_attention():
    query, key, value = _qkv(5)
    assert not fused_attention.needs_padding_for_flash(ops.convert_to_tensor(query), key)
    np.testing.assert_allclose(
        fused_attention.dot_product_attention(query, key, value),
        _numpy_attention(query, key, value),
        atol=1e-5,
    )


def test_where_jax_compiles_for_a_cpu_it_is_attention_per_head(monkeypatch):
    # The one place that picks an attention: on JAX's CPU it must take the per-head form (the
    # jax engine's step there ran 1.13x faster), with the caller's bias, and give attention.
    from keras_vit import per_head_attention

    calls = []
    attend = per_head_attention.attend
    monkeypatch.setattr(per_head_attention, "applies", lambda: True)
    monkeypatch.setattr(per_head_attention, "attend", lambda *a, **k: calls.append(k) or attend(*a, **k))
    query, key, value = _qkv(5)
    context = fused_attention.dot_product_attention(query, key, value)
    assert calls == [{"bias": None}]
    np.testing.assert_allclose(context, _numpy_attention(query, key, value), atol=1e-5)


def test_padded_attention_equals_plain_attention_forward_and_backward(jax_without_tensorflow):
    """On JAX (XLA): the padded path's attention and its gradients equal the plain one's (a
    padded token that got weight or passed a gradient back would differ); bfloat16 at an odd
    length asks for padding only on a GPU, and where cuDNN is missing falls back to Keras'
    attention with the same numbers. (A part of the child of tests/jax_without_tensorflow.py,
    shared with other files.)"""
    jax_without_tensorflow.part("fused_attention")
