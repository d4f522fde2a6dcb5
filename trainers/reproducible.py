"""What `python -m trainers.demo` pins so that the same command computes the same numbers on
any x86-64 CPU with AVX2, not only on the same machine.

A float32 run on TensorFlow's CPU kernels repeats bit for bit on one machine, but these change
its rounding from one CPU to another. The first three were measured on the demo's pre-training
(20 steps, the bytes of model.npz compared); the last two are read from the code that runs:
- TensorFlow turns its oneDNN custom ops on by default only on CPUs with AVX512-VNNI,
  AVX512-BF16, AVX-VNNI or AMX (tensorflow/core/util/util.cc), so an older CPU runs other
  kernels. TF_ENABLE_ONEDNN_OPTS=0 runs TensorFlow's own kernels on every CPU.
- oneDNN picks its code by the CPU's instruction set at run time, also under TensorFlow's own
  matmuls (their contraction kernel calls oneDNN's sgemm): capping it at AVX2 changed the
  weights, with the custom ops on and off. ONEDNN_MAX_CPU_ISA=AVX2 gives every CPU that has
  AVX2 (Intel since 2013, AMD since 2015) the same code.
- The kernels split a matmul's or a reduction's work between the intra-op threads and add the
  parts in another order: 1 and 2 threads gave different weights, and TensorFlow starts one
  thread per core. The demo's stages set --cpu_threads (configs/demo.py's CPU_THREADS;
  trainers/distribute.py applies it).
- TensorFlow's Eigen is built with EIGEN_FAST_MATH: its float32 rsqrt (every LayerNorm, through
  Keras' layer_normalization) and the reciprocal in its softmax (attention, the head) start from
  the RSQRTPS / RCPPS instructions plus one Newton step (Eigen/src/Core/arch/AVX/MathFunctions.h).
  Those instructions are approximations whose bits Intel and AMD define differently (only a
  relative error of 1.5 * 2^-12 is specified), so every forward and backward pass rounds
  differently on a Xeon and on an EPYC; over 1,500 pre-training steps the difference grows into
  other weights, and every probe and fine-tune that starts from them differs. KERAS_VIT_IEEE_MATH=1
  makes the trainers replace the two (pin_math): rsqrt by 1 / sqrt and softmax by exp / sum,
  square root and division being exactly rounded by IEEE 754 on every CPU.
- NumPy's OpenBLAS (the few-shot probes' float64 ridge regression) picks its kernels by the CPU
  (Haswell ones on an EPYC, SkylakeX or newer on a Xeon with AVX-512), which sum in another
  order. OPENBLAS_CORETYPE=Haswell gives every CPU with AVX2 the same kernels.
The variables are read when TensorFlow or NumPy loads, so trainers/__init__.py sets them for the
demo's command before it imports either. The precision and XLA are the stages' own fields
(--mixed_precision=none, --jit_compile=false). Not pinned, because no setting reaches it: the
block sizes oneDNN and Eigen derive from the size of the CPU's caches. That is why the demo's
headline rows are means over several seeds (configs/demo.py REPEATED).
"""

import os
import sys

IEEE_MATH = "KERAS_VIT_IEEE_MATH"
ENVIRONMENT = {
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    IEEE_MATH: "1",
    "OPENBLAS_CORETYPE": "Haswell",
}
MODULE = "trainers.demo"


def is_pinned_command(argv):
    """Whether the interpreter's command line (sys.orig_argv) runs `python -m trainers.demo`."""
    argv = list(argv)
    return any(a == "-m" and b == MODULE for a, b in zip(argv, argv[1:]))


def pin_environment():
    os.environ.update(ENVIRONMENT)


def ieee_rsqrt(x, name=None):
    """tf.math.rsqrt as 1 / sqrt(x): both steps exactly rounded, the same bits on every CPU."""
    import tensorflow as tf

    x = tf.convert_to_tensor(x)
    return tf.math.divide(tf.ones([], x.dtype), tf.math.sqrt(x), name=name)


def ieee_softmax(logits, axis=None, name=None):
    """tf.nn.softmax as exp(x - max) / sum: a division where TensorFlow's kernel multiplies by an
    approximate reciprocal."""
    import tensorflow as tf

    logits = tf.convert_to_tensor(logits)
    axis = -1 if axis is None else axis
    shifted = tf.math.exp(logits - tf.stop_gradient(tf.reduce_max(logits, axis=axis, keepdims=True)))
    return tf.math.divide(shifted, tf.reduce_sum(shifted, axis=axis, keepdims=True), name=name)


_REPLACED = (
    ("math", "rsqrt", ieee_rsqrt),
    ("nn", "softmax", ieee_softmax),
    ("math", "softmax", ieee_softmax),
)


def pin_math():
    """Replaces TensorFlow's rsqrt and softmax, as Keras' TensorFlow backend calls them
    (tf.math.rsqrt, tf.nn.softmax), in this process: for the demo's stages, whose functions are
    traced after this."""
    import tensorflow as tf

    for module, name, function in _REPLACED:
        setattr(getattr(tf, module), name, function)


def math_pinned():
    tf = sys.modules.get("tensorflow")
    return tf is not None and all(getattr(getattr(tf, m), n) is f for m, n, f in _REPLACED)


def describe():
    """TensorFlow's CPU kernels in this process, in words: "pinned (...)" or what differs from the
    pins. (An engine whose step runs other code says so itself: trainers/engines/.)"""
    differ = [f"{k}={os.environ.get(k, '(unset)')}" for k, v in ENVIRONMENT.items() if os.environ.get(k) != v]
    if _onednn_ops_on():
        differ.append("oneDNN custom ops on")
    if os.environ.get(IEEE_MATH) == "1" and not math_pinned():
        differ.append("TensorFlow's rsqrt and softmax not replaced")
    if differ:
        return "not pinned (" + ", ".join(differ) + ")"
    return "pinned (" + ", ".join(f"{k}={v}" for k, v in ENVIRONMENT.items()) + ")"


def _onednn_ops_on():
    """Whether TensorFlow runs its oneDNN custom ops, as it decided when it loaded."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # a TensorFlow without the query: go by the variable alone
        return os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0"
    return bool(_pywrap_util_port.IsMklEnabled())
