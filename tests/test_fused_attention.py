"""keras_vit.fused_attention: the padded path computes the same attention as the plain one; every
case it is not for goes to keras.ops.dot_product_attention unchanged.

cuDNN's kernel needs an NVIDIA GPU, so here the padded path runs on XLA (the same padding,
lengths and slicing; benchmarks/accelerator.py checks the cuDNN path on a GPU).
"""

import os
import subprocess
import sys

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


JAX_SCRIPT = """
import jax, jax.numpy as jnp, numpy as np
from keras_vit import fused_attention

rng = np.random.default_rng(0)
q, k, v = (jnp.asarray(rng.normal(size=(2, 5, 3, 8)), "float32") for _ in range(3))
# Under jax.jit, as inside a model's compiled step: eagerly, every op (and, for the gradients,
# every op of the backward pass) would be compiled on its own, a few seconds on 2 cores.
plain = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="xla"))
padded = jax.jit(lambda q, k, v: fused_attention.padded_attention(q, k, v, implementation="xla"))
out = padded(q, k, v)
assert out.shape == (2, 5, 3, 8), out.shape
np.testing.assert_allclose(out, plain(q, k, v), atol=1e-6)
# Gradients too: the padded token must get no weight and pass nothing back.
weights = jnp.asarray(rng.normal(size=out.shape), "float32")
grad = lambda f: jax.jit(jax.grad(lambda *a: jnp.sum(f(*a) * weights), argnums=(0, 1, 2)))(q, k, v)
for a, b in zip(grad(padded), grad(plain)):
    np.testing.assert_allclose(a, b, atol=1e-6)

# Odd length in bfloat16 asks for the padded path only on a GPU; with the device check forced,
# a CPU's missing cuDNN sends it back to Keras' attention, with the same numbers.
qb, kb, vb = (x.astype("bfloat16") for x in (q, k, v))
assert not fused_attention.needs_padding_for_flash(qb, kb)
fused_attention._on_gpu = lambda: True
assert fused_attention.needs_padding_for_flash(qb, kb)
assert not fused_attention.needs_padding_for_flash(q, k)  # float32: no flash kernel
assert not fused_attention.needs_padding_for_flash(qb[:, :4], kb[:, :4])  # even: Keras' path works
np.testing.assert_allclose(
    fused_attention.dot_product_attention(qb, kb, vb).astype("float32"),
    plain(qb, kb, vb).astype("float32"),
    atol=1e-2,
)
print("ok")
"""


def test_padded_attention_equals_plain_attention_forward_and_backward():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", JAX_SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
