"""Whether a call being traced runs on TensorFlow's oneDNN CPU kernels, outside XLA.

keras_vit's CPU inference paths (keras_vit/row_parts.py, keras_vit/fused_layer_norm.py) and its
kernels of bfloat16 training (`bfloat16_training_call`) change the graph only where TensorFlow
will run it with its own x86 oneDNN kernels: traced (not eager), not compiled by XLA, with no GPU,
and with oneDNN's optimisations on; each path also has an environment variable that turns it off
(`switched_on`).
"""

import functools
import os
import sys

import keras

from keras_vit import cpu_info, onednn_default

# CPUs whose TensorFlow wheels run their kernels on oneDNN's x86 code.
X86 = onednn_default.X86


def switched_on(name):
    """Whether the environment variable `name` leaves one of those paths on: unset, yes; "0",
    "false" or "off", no. Read at each trace, so a graph traced after setting it follows it."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "off")


def onednn_on():
    """Whether TensorFlow's oneDNN kernels are on: not where TF_ENABLE_ONEDNN_OPTS is "0" or
    "false" (also keras_vit's switch for its oneDNN paths, read at each trace); else TensorFlow's
    own answer once it is imported (its default depends on the CPU, and it reads the variable once,
    at its import); before, an x86 CPU (keras_vit asks for the kernels where the variable is unset,
    keras_vit/onednn_default.py), so that this does not start TensorFlow."""
    flag = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower()
    if flag in ("0", "false") or not onednn_default.is_x86():
        return False
    if "tensorflow" in sys.modules:
        try:
            from tensorflow.python.util import _pywrap_util_port
        except ImportError:  # moved in a later TensorFlow: as before it is imported
            return True
        return bool(_pywrap_util_port.IsMklEnabled())
    return True


def onednn_has_bfloat16():
    """Whether oneDNN has bfloat16 kernels on this CPU: it needs AVX-512 (elsewhere TensorFlow's
    oneDNN says "oneDNN supports DT_BFLOAT16 only on platforms with AVX-512", and its fused layer
    norm fails to create a primitive in bfloat16; the AVX2 EPYC, 2026-12-02)."""
    return cpu_info.has_avx512()


def traced_without_xla():
    """Whether TensorFlow is tracing a graph that XLA will not compile."""
    import tensorflow as tf

    if tf.executing_eagerly():
        return False
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # the check moved: not knowing, change nothing
        return False
    return not control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


@functools.cache
def has_gpu():
    """Whether TensorFlow sees a GPU, which would run the graph instead of oneDNN."""
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def runs_on_onednn(dtype=None):
    """All of the above: a traced call that TensorFlow's oneDNN kernels will run; given `dtype`,
    one that oneDNN has kernels of (bfloat16 only with AVX-512: `onednn_has_bfloat16`)."""
    bfloat16 = dtype is not None and keras.backend.standardize_dtype(dtype) == "bfloat16"
    if bfloat16 and not onednn_has_bfloat16():
        return False
    return onednn_on() and traced_without_xla() and not has_gpu()


def bfloat16_training(x, training):
    """Whether a call on `x` is a training call on Keras' TensorFlow backend whose activations are
    bfloat16 (float32 keeps Keras' ops and the bits of its runs)."""
    if not training or keras.backend.backend() != "tensorflow":
        return False
    return keras.backend.standardize_dtype(x.dtype) == "bfloat16"


def bfloat16_training_call(x, training, switch):
    """Whether a call on `x` is where keras_vit's kernels of bfloat16 training apply: a
    `bfloat16_training` call traced for TensorFlow's oneDNN kernels (`runs_on_onednn`), with the
    KERAS_VIT_* `switch` left on (keras_vit/fused_gelu.py, compiled_layer_norm.py, patch_matmul.py)."""
    return bfloat16_training(x, training) and switched_on(switch) and runs_on_onednn()
