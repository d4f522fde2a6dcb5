"""What `python -m trainers.demo` pins so that the same command computes the same numbers on
any x86-64 CPU with AVX2, not only on the same machine.

A float32 run on TensorFlow's CPU kernels repeats bit for bit on one machine, but three things
change its rounding from one CPU to another. Each was measured on the demo's pre-training
(20 steps, the bytes of model.npz compared):
- TensorFlow turns its oneDNN custom ops on by default only on CPUs with AVX512-VNNI,
  AVX512-BF16, AVX-VNNI or AMX (tensorflow/core/util/util.cc), so an older CPU runs other
  kernels. TF_ENABLE_ONEDNN_OPTS=0 runs TensorFlow's own kernels on every CPU.
- oneDNN picks its code by the CPU's instruction set at run time, also under TensorFlow's own
  matmuls (their contraction kernel calls oneDNN's sgemm): capping it at AVX2 changed the
  weights, with the custom ops on and off. ONEDNN_MAX_CPU_ISA=AVX2 gives every CPU that has
  AVX2 (Intel since 2013, AMD since 2015) the same code.
- The kernels split a matmul's or a reduction's work between the intra-op threads and add the
  parts in another order: 1 and 2 threads gave different weights, and TensorFlow starts one
  thread per core. The demo's stages set --cpu_threads (configs/demo.py's CPU_THREADS; trainers/distribute.py
  applies it).
Both variables are read when TensorFlow loads, so trainers/__init__.py sets them for the demo's
command before it imports TensorFlow. The precision and XLA are the stages' own fields
(--mixed_precision=none, --jit_compile=false). Not pinned, because no setting reaches it: the
block sizes oneDNN and Eigen derive from the size of the CPU's caches.
"""

import os

ENVIRONMENT = {"TF_ENABLE_ONEDNN_OPTS": "0", "ONEDNN_MAX_CPU_ISA": "AVX2"}
MODULE = "trainers.demo"


def is_pinned_command(argv):
    """Whether the interpreter's command line (sys.orig_argv) runs `python -m trainers.demo`."""
    argv = list(argv)
    return any(a == "-m" and b == MODULE for a, b in zip(argv, argv[1:]))


def pin_environment():
    os.environ.update(ENVIRONMENT)


def describe():
    """TensorFlow's CPU kernels in this process, in words: "pinned (...)" or what differs from the
    pins. (An engine whose step runs other code says so itself: trainers/engines/.)"""
    differ = [f"{k}={os.environ.get(k, '(unset)')}" for k, v in ENVIRONMENT.items() if os.environ.get(k) != v]
    if _onednn_ops_on():
        differ.append("oneDNN custom ops on")
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
