"""keras_vit.per_head_attention: attention one head at a time on JAX's CPU, with the values and
gradients of attention."""

import jax
import jax.numpy as jnp
import keras
import numpy as np

from keras_vit import jax_cpu, per_head_attention


def _inputs(seed=0, batch=2, length=7, heads=3, depth=4):
    """(query, key, value, bias) in float64: 7 tokens, 3 heads of 4, so that tokens, heads and
    depth mixed up change the shapes or the values; logits up to about 10."""
    rng = np.random.default_rng(seed)
    query, key = (rng.normal(scale=1.5, size=(batch, length, heads, depth)) for _ in range(2))
    value = rng.normal(size=(batch, length, heads, depth))
    bias = rng.normal(size=(batch, heads, length, length))
    return query, key, value, bias


def _reference(query, key, value, bias):
    """Attention in float64 NumPy, over all heads at once (Keras' form)."""
    logits = np.einsum("bqhd,bkhd->bhqk", query, key) / np.sqrt(query.shape[-1]) + bias
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", probs, value)


def test_the_context_is_attention_s_for_every_head_with_its_bias():
    # Another scale, a softmax over the wrong axis, heads swapped or one head's bias given to
    # another, or the heads stacked on the wrong axis each miss by far.
    query, key, value, bias = _inputs()
    context = jax.jit(per_head_attention.attend)(
        *(jnp.asarray(x, jnp.float32) for x in (query, key, value, bias))
    )
    assert context.shape == (2, 7, 3, 4)
    np.testing.assert_allclose(context, _reference(query, key, value, bias), rtol=2e-5, atol=2e-5)
    # A bias shared by the heads (B, 1, T, T) broadcasts to each of them.
    shared = bias[:, :1]
    context = per_head_attention.attend(*(jnp.asarray(x, jnp.float32) for x in (query, key, value, shared)))
    np.testing.assert_allclose(context, _reference(query, key, value, shared), rtol=2e-5, atol=2e-5)


def test_without_a_bias_its_values_and_gradients_are_keras_attention_s():
    # The plain ViT's case, forward and backward: the gradients of a step through it are those
    # of Keras' attention (on this process's backend) to float32 rounding.
    query, key, value, _ = _inputs(seed=1)
    upstream = np.random.default_rng(2).normal(size=query.shape)
    inputs = [np.float32(x) for x in (query, key, value)]

    def loss(query, key, value):
        return jnp.sum(per_head_attention.attend(query, key, value) * upstream)

    ours = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*inputs)
    np.testing.assert_allclose(
        per_head_attention.attend(*inputs), keras.ops.dot_product_attention(*inputs), rtol=2e-5, atol=2e-5
    )

    def reference_loss(query, key, value):
        logits = jnp.einsum("bqhd,bkhd->bhqk", query, key) / 2.0  # sqrt(4)
        return jnp.sum(jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, -1), value) * upstream)

    for got, want in zip(ours, jax.grad(reference_loss, argnums=(0, 1, 2))(*inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_bfloat16_products_keep_the_logits_and_softmax_in_float32():
    # The logits of bfloat16 queries and keys accumulate and stay in float32, as Keras' attention
    # does: a softmax in bfloat16 would show as a bfloat16 exponential in the lowered program.
    query, key, value, bias = _inputs(seed=3)
    inputs = [jnp.asarray(x, jnp.bfloat16) for x in (query, key, value, bias)]
    hlo = jax.jit(per_head_attention.attend).lower(*inputs).as_text()
    assert "exponential" in hlo and all(
        "f32" in line for line in hlo.splitlines() if "exponential" in line and "=" in line
    )
    context = per_head_attention.attend(*inputs)
    assert context.dtype == jnp.bfloat16
    rounded = [np.float64(np.float32(x)) for x in inputs]
    np.testing.assert_allclose(np.float32(context), _reference(*rounded), rtol=3e-2, atol=3e-2)


def test_it_applies_where_jax_compiles_for_a_cpu(monkeypatch):
    for answer in (True, False):
        monkeypatch.setattr(jax_cpu, "compiles_for_cpu", lambda answer=answer: answer)
        assert per_head_attention.applies() is answer
