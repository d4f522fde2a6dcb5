"""Attention one head at a time, where Keras' JAX backend compiles for a CPU.

Keras' attention on JAX (`keras.ops.dot_product_attention`, XLA's implementation of
`jax.nn.dot_product_attention`) is two einsums with two batch axes, the examples and the heads
("BTNH,BSNH->BNTS", "BNTS,BSNH->BTNH"). XLA's CPU code ran those, and their gradients, at 37-66
GFLOP/s. Written per head, each product has the examples as its only batch axis: attention
of ViT-Ti/16's shape (16 x 197 tokens, 3 heads of 64) in float32 took 5.6 ms forward against 13.1,
13.9 ms forward and backward against 21.7, and a jitted `jax.value_and_grad` step of ViT-Ti/16 at
224 px, batch 16, 1.30 s against 1.47 (1.13x; 2 cores of an AMD EPYC with AVX-512, jax 0.10.2,
2026-12-04, both forms in one process, timed in turns; docs/guides/benchmarks.md, "Attention per
head on JAX's CPU").

The arithmetic is Keras': the logits of each head's product in float32 (its accumulation type),
scaled there, a bias (relative position embeddings) added, the softmax in float32, the
probabilities cast to the values' dtype before their product. `fused_attention.dot_product_attention`
takes this path where `applies`; on TensorFlow, PyTorch and JAX on a GPU or TPU it keeps its own.
"""

from keras_vit import jax_cpu


def applies():
    """Whether `attend` replaces Keras' attention here: on Keras' JAX backend compiling for a CPU."""
    return jax_cpu.compiles_for_cpu()


def attend(query, key, value, bias=None):
    """softmax(Q K^T / sqrt(d) + bias) V for (B, T, heads, d) query, key and value, one head at a
    time; `bias`, if any, is (B or 1, heads or 1, T, T). A (B, T, heads, d) context in the values'
    dtype. JAX backend only."""
    import jax
    import jax.numpy as jnp

    heads, depth = query.shape[2], query.shape[3]
    scale = 1.0 / float(depth) ** 0.5
    contexts = []
    for head in range(heads):
        logits = jnp.einsum(
            "bqd,bkd->bqk", query[:, :, head], key[:, :, head], preferred_element_type=jnp.float32
        )
        logits = logits * scale
        if bias is not None:
            logits = logits + bias[:, head if bias.shape[1] > 1 else 0].astype(jnp.float32)
        probs = jax.nn.softmax(logits, axis=-1).astype(value.dtype)
        contexts.append(jnp.einsum("bqk,bkd->bqd", probs, value[:, :, head]))
    return jnp.stack(contexts, axis=2)
