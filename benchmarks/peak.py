"""The limit: this machine's measured matmul throughput per framework and dtype (FLOP/s).

A square matmul of size n is the best case for the FLOPs a ViT spends (almost all of them are
matmuls), so a model's achieved FLOP/s over this is how far it is from what the machine gives.

Where a framework has no fast kernel for a dtype, one product of the full size can take minutes:
PyTorch's bfloat16 product on a CPU without bfloat16 instructions (the AVX2 EPYC, 2026-12-02) ran
at 0.8-1.2 GFLOP/s, 170 s for one 4096² product, and a benchmark measures each peak eight times.
So each dtype is measured at the requested size or, where a product of it would take longer than
MAX_PRODUCT_SECONDS, at the largest size below it that would not (a `sizes` entry says which).
"""

import functools
import time

from benchmarks import harness

MAX_PRODUCT_SECONDS = 10.0
SMALLEST_SIZE = 256
# A dtype whose product ran at under this fraction of the same framework's float32 one has no fast
# kernel on this machine (PyTorch's bfloat16 on the AVX2 EPYC: about 1 GFLOP/s against 123-148 in
# float32, 2026-12-02): its contestants would take hours to time and none could be a fastest mode,
# so the benchmarks leave them out with a note (without_fast_kernels).
NO_FAST_KERNEL_FRACTION = 0.1
FRAMEWORK_NAMES = {"tf": "TensorFlow", "torch": "PyTorch", "jax": "JAX"}


def _best_rate(step, n, repeats, min_seconds):
    step()  # compile, warm the caches
    best = min(harness.time_step(step, min_seconds) for _ in range(repeats))
    return 2 * n**3 / best


def _size_to_measure(product, n, max_seconds=MAX_PRODUCT_SECONDS):
    """n, or the largest of SMALLEST_SIZE, twice that, ... whose product `product(size)()` would
    take at most max_seconds, judged from one product of the size before (its work grows as the
    cube of the size: half the size is an eighth)."""
    size = min(n, SMALLEST_SIZE)
    while size < n:
        step = product(size)
        step()  # compile, warm the caches
        start = time.perf_counter()
        step()
        took = time.perf_counter() - start
        bigger = min(2 * size, n)
        if took * (bigger / size) ** 3 > max_seconds:
            break
        size = bigger
    return size


@functools.cache
def _tf_matmul(jit_compile):
    """One function for every size and dtype (TensorFlow warns of a function made per call)."""
    import tensorflow as tf

    return tf.function(lambda x: tf.matmul(x, x), jit_compile=jit_compile, reduce_retracing=True)


def _tf_product(dtype, n, jit_compile):
    import tensorflow as tf

    a = tf.cast(tf.random.uniform([n, n], dtype=tf.float32, seed=1), dtype)
    matmul = _tf_matmul(jit_compile)
    return lambda: matmul(a).numpy()


def _torch_product(dtype, n, device):
    import torch as pt

    a = pt.rand(n, n, dtype=getattr(pt, dtype), device=device)
    return lambda: pt.matmul(a, a).sum().item()


def _jax_product(dtype, n):
    import jax

    from keras_vit import startup

    # JAX probes its platforms at the first array: a CUDA plugin without a GPU logs an error line.
    with startup.native_stderr_hidden():
        jax.devices()
    a = jax.random.uniform(jax.random.key(1), (n, n)).astype(dtype)
    matmul = jax.jit(lambda x: x @ x)
    return lambda: matmul(a).block_until_ready()


def tf_matmul(dtype, n, repeats=3, min_seconds=0.2):
    """TensorFlow's best: with XLA and without (in bfloat16 its own oneDNN kernels beat XLA's on CPU)."""
    return max(_best_rate(_tf_product(dtype, n, jit), n, repeats, min_seconds) for jit in (True, False))


def torch(dtype, n, repeats=3, min_seconds=0.2, device="cpu"):
    return _best_rate(_torch_product(dtype, n, device), n, repeats, min_seconds)


def jax_matmul(dtype, n, repeats=3, min_seconds=0.2):
    """XLA through JAX on its default device (a GPU where there is one)."""
    return _best_rate(_jax_product(dtype, n), n, repeats, min_seconds)


def measure(frameworks, n=4096, repeats=3, min_seconds=0.2, torch_device="cpu"):
    """{"tf float32": FLOP/s, ...} for each framework ("tf", "torch", "jax") and float32 / bfloat16,
    with "seconds" (the time it took) and "sizes" ({key: size} of those measured below n)."""
    start, rates, sizes = time.perf_counter(), {}, {}
    for framework in frameworks:
        for dtype in ("float32", "bfloat16"):
            product = functools.partial(_product, framework, dtype, torch_device=torch_device)
            size = _size_to_measure(product, n)
            if framework == "torch":
                rate = torch(dtype, size, repeats, min_seconds, device=torch_device)
            else:
                rate = (tf_matmul if framework == "tf" else jax_matmul)(dtype, size, repeats, min_seconds)
            rates[f"{framework} {dtype}"] = rate
            if size < n:
                sizes[f"{framework} {dtype}"] = size
    rates["seconds"], rates["sizes"] = time.perf_counter() - start, sizes
    return rates


def _product(framework, dtype, n, *, torch_device):
    if framework == "torch":
        return _torch_product(dtype, n, torch_device)
    if framework == "tf":
        return _tf_product(dtype, n, jit_compile=False)
    return _jax_product(dtype, n)


def best(before, after):
    """Each rate's better measurement: on a shared machine the load differs between the two
    (taken before and after the contestants), and the limit is what the machine can give. A
    size below the requested one is kept where either measurement needed it."""
    merged = {k: max(v, after.get(k, 0)) for k, v in harness.peak_rates(before).items()}
    merged["seconds"] = before.get("seconds", 0) + after.get("seconds", 0)
    merged["sizes"] = {**before.get("sizes", {}), **after.get("sizes", {})}
    return merged


def fraction(rates, framework, dtype, flops_per_s):
    peak = rates.get(f"{framework} {dtype}")
    return flops_per_s / peak if peak else None


def without_fast_kernels(rates):
    """{(framework, dtype): a note} for each dtype other than float32 whose measured product ran
    at under NO_FAST_KERNEL_FRACTION of its framework's float32 one."""
    found = {}
    for key, rate in harness.peak_rates(rates).items():
        framework, dtype = key.split(" ", 1)
        float32 = rates.get(f"{framework} float32")
        if dtype != "float32" and float32 and rate < NO_FAST_KERNEL_FRACTION * float32:
            name = FRAMEWORK_NAMES.get(framework, framework)
            found[(framework, dtype)] = (
                f"{name}'s {dtype} contestants not run: its {dtype} matmul ran at {rate / 1e9:.1f} "
                f"GFLOP/s on this CPU, {rate / float32:.0%} of its float32 ({float32 / 1e9:.0f} GFLOP/s): "
                f"no fast {dtype} kernel here"
            )
    return found
