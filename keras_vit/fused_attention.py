"""Dot-product attention on the backend's fused kernel, also for ViT's odd number of tokens.

On the JAX backend with an NVIDIA GPU, `keras.ops.dot_product_attention` sends attention to
cuDNN's flash kernel. In training, JAX (0.10 and 0.11) refuses that kernel for an odd sequence
length: the empty array it passes for "no bias" counts as a bias in its own check, and a bias
needs even lengths. A ViT has an odd length wherever it has a class token (197 at 224 px), so
Keras falls back to XLA's unfused attention, which writes the (B, heads, T, T) logits to memory
and back, and logs a traceback per layer. Here such a sequence is padded by one token that the
kernel leaves out (sequence lengths: padding, not a bias) and the padding is sliced off again:
the same function, on the flash kernel (measured on an H100: `python -m benchmarks.accelerator`).
On the JAX backend with a CPU attention runs one head at a time (keras_vit/per_head_attention.py).
Every other case, every other backend and device, goes to `keras.ops.dot_product_attention`.
"""

import keras
from keras import ops

from keras_vit import per_head_attention

# The floating-point types cuDNN's flash kernel takes.
_FLASH_DTYPES = ("bfloat16", "float16")


def dot_product_attention(query, key, value, bias=None):
    """softmax(Q K^T / sqrt(d) + bias) V over (B, T, heads, d) tensors; (B, T, heads, d) out."""
    if bias is None and needs_padding_for_flash(query, key):
        try:
            return padded_attention(query, key, value, implementation="cudnn")
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # cuDNN refused this shape or device: Keras picks again below
    if per_head_attention.applies():
        return per_head_attention.attend(query, key, value, bias=bias)
    return ops.dot_product_attention(query, key, value, bias=bias)


def needs_padding_for_flash(query, key):
    """Whether `dot_product_attention` pads this self-attention by a token to reach cuDNN's flash
    kernel: an odd sequence length in bfloat16 or float16 on the JAX backend with a GPU."""
    if keras.backend.backend() != "jax":
        return False
    length = query.shape[1]
    if not isinstance(length, int) or length % 2 == 0 or key.shape[1] != length:
        return False
    if keras.backend.standardize_dtype(query.dtype) not in _FLASH_DTYPES:
        return False
    return _on_gpu()


def _on_gpu():
    import jax

    return jax.devices()[0].platform == "gpu"


def padded_attention(query, key, value, implementation):
    """JAX's attention over the sequence padded by one token, which the lengths leave out.

    `implementation` is jax.nn.dot_product_attention's ("cudnn", or "xla" where a test checks
    the padding on a CPU)."""
    import jax
    import jax.numpy as jnp

    length = query.shape[1]
    widths = ((0, 0), (0, 1), (0, 0), (0, 0))
    padded = [jnp.pad(x, widths) for x in (query, key, value)]
    lengths = jnp.full((query.shape[0],), length, dtype=jnp.int32)
    context = jax.nn.dot_product_attention(
        *padded,
        query_seq_lengths=lengths,
        key_value_seq_lengths=lengths,
        implementation=implementation,
    )
    return context[:, :length]
