"""The MLP's GELU in a traced training step: one XLA-compiled kernel forward, one backward.

On TensorFlow's CPU kernels Keras' GELU is a chain of element-wise operations (a power, three
products, two sums and a tanh, or an erfc), each a pass over the MLP's activations, and its
gradient is a longer chain; in bfloat16 each pass also rounds. In a bfloat16 training step of
ViT-Ti/16 at batch 16 on a 2-core EPYC the GELU took about a sixth of the step: the same step
with the identity in its place ran 1.2x as fast (docs/guides/benchmarks.md, "GELU kernel").

`gelu` computes it, in a training call traced for TensorFlow's own CPU kernels, as a custom-
gradient op whose forward pass is one small XLA-compiled function (Keras' formula, computed in
float32 and rounded once to the tokens' dtype) and whose backward pass is another (the formula's
derivative times the incoming gradient, in float32, rounded once). XLA fuses each into a single
loop over the activations. Anywhere else (inference, eager calls, a step XLA compiles whole, a
GPU, the other backends, and TF_ENABLE_ONEDNN_OPTS=0, under which the demo pins its bits across
CPUs: XLA's code, like oneDNN's, follows the CPU's instruction set) it is Keras' GELU.
KERAS_VIT_FUSED_GELU=0 keeps Keras' GELU everywhere (read at each trace).

Only bfloat16 activations take it (Keras' mixed_bfloat16, the trainers' `auto` precision on CPUs
with AVX-512 BF16 or AMX): there it ran 1.11x, in float32 1.04x, within the noise, and a float32
run keeps the bits of Keras' GELU, so the float32 runs the documentation reports still repeat.
"""

import functools
import math

import keras

from keras_vit import onednn_graph

SWITCH = "KERAS_VIT_FUSED_GELU"
# The tanh approximation's constants, as tf.nn.gelu and jax.nn.gelu write them.
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def applies(x, training=None):
    """Whether `gelu(x, ..., training)` runs on the compiled kernels in this trace."""
    return onednn_graph.bfloat16_training_call(x, training, SWITCH)


def gelu(x, approximate=True, training=None):
    """keras.activations.gelu(x, approximate), on the compiled kernels where `applies`."""
    if not applies(x, training):
        return keras.activations.gelu(x, approximate=approximate)
    return _fused(x, bool(approximate))


def _value(x, approximate):
    import tensorflow as tf

    return tf.cast(tf.nn.gelu(tf.cast(x, tf.float32), approximate=approximate), x.dtype)


def _slope(x, approximate):
    """d gelu(x) / dx in float32, for float32 `x` (the kernels' own precision)."""
    import tensorflow as tf

    if approximate:
        # gelu = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
        t = tf.tanh(_SQRT_2_OVER_PI * (x + _CUBIC * x * x * x))
        du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _CUBIC * x * x)
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
    # gelu = x Phi(x): Phi(x) + x phi(x), Phi the normal distribution, phi its density.
    return 0.5 * tf.math.erfc(-x * math.sqrt(0.5)) + x * tf.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _input_gradient(x, upstream, approximate):
    import tensorflow as tf

    wide = tf.cast(x, tf.float32)
    return tf.cast(tf.cast(upstream, tf.float32) * _slope(wide, approximate), x.dtype)


@functools.cache
def _kernels(approximate):
    """(forward, backward): the two XLA-compiled functions for one form of the GELU."""
    import tensorflow as tf

    compiled = functools.partial(tf.function, jit_compile=True, autograph=False)
    forward = compiled(functools.partial(_value, approximate=approximate))
    backward = compiled(functools.partial(_input_gradient, approximate=approximate))
    return forward, backward


def _fused(x, approximate):
    import tensorflow as tf

    forward, backward = _kernels(approximate)

    @tf.custom_gradient
    def fused_gelu(pre_activation):
        return forward(pre_activation), lambda upstream: backward(pre_activation, upstream)

    return fused_gelu(x)
