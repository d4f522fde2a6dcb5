"""The limit: this machine's measured matmul throughput per framework and dtype (FLOP/s).

A square matmul of size n is the best case for the FLOPs a ViT spends (almost all of them are
matmuls), so a model's achieved FLOP/s over this is how far it is from what the machine gives.
"""

import time

from benchmarks import harness


def _best_rate(step, n, repeats, min_seconds):
    step()  # compile, warm the caches
    best = min(harness.time_step(step, min_seconds) for _ in range(repeats))
    return 2 * n**3 / best


def tf_matmul(dtype, n, repeats=3, min_seconds=0.2):
    """TensorFlow's best: with XLA and without (in bfloat16 its own oneDNN kernels beat XLA's on CPU)."""
    import tensorflow as tf

    a = tf.random.uniform([n, n], dtype=tf.float32, seed=1)
    a = tf.cast(a, dtype)
    rates = []
    for jit_compile in (True, False):
        matmul = tf.function(lambda x: tf.matmul(x, x), jit_compile=jit_compile)
        rates.append(_best_rate(lambda m=matmul: m(a).numpy(), n, repeats, min_seconds))
    return max(rates)


def torch(dtype, n, repeats=3, min_seconds=0.2, device="cpu"):
    import torch as pt

    a = pt.rand(n, n, dtype=getattr(pt, dtype), device=device)
    return _best_rate(lambda: pt.matmul(a, a).sum().item(), n, repeats, min_seconds)


def jax_matmul(dtype, n, repeats=3, min_seconds=0.2):
    """XLA through JAX on its default device (a GPU where there is one)."""
    import jax

    from keras_vit import startup

    # JAX probes its platforms at the first array: a CUDA plugin without a GPU logs an error line.
    with startup.native_stderr_hidden():
        jax.devices()
    a = jax.random.uniform(jax.random.key(1), (n, n)).astype(dtype)
    matmul = jax.jit(lambda x: x @ x)
    return _best_rate(lambda: matmul(a).block_until_ready(), n, repeats, min_seconds)


def measure(frameworks, n=4096, repeats=3, min_seconds=0.2, torch_device="cpu"):
    """{"tf float32": FLOP/s, ...} for each framework ("tf", "torch", "jax") and float32 / bfloat16."""
    start, rates = time.perf_counter(), {}
    for framework in frameworks:
        for dtype in ("float32", "bfloat16"):
            if framework == "torch":
                rate = torch(dtype, n, repeats, min_seconds, device=torch_device)
            else:
                rate = (tf_matmul if framework == "tf" else jax_matmul)(dtype, n, repeats, min_seconds)
            rates[f"{framework} {dtype}"] = rate
    rates["seconds"] = time.perf_counter() - start
    return rates


def best(before, after):
    """Each rate's better measurement: on a shared machine the load differs between the two
    (taken before and after the contestants), and the limit is what the machine can give."""
    return {k: max(v, after.get(k, 0)) if k != "seconds" else v + after.get(k, 0) for k, v in before.items()}


def fraction(rates, framework, dtype, flops_per_s):
    peak = rates.get(f"{framework} {dtype}")
    return flops_per_s / peak if peak else None
