"""The encoder blocks' layer norms in a traced bfloat16 training call: one XLA-compiled kernel each way.

Keras' layer norm computes in float32: on TensorFlow's CPU kernels it is a cast, a mean, a squared
difference, a second mean, a reciprocal square root, products, sums and a cast back, each a
pass over the tokens, and its gradient a longer chain. In a bfloat16 training step of ViT-Ti/16
at batch 16 on the 2-core Xeon with AMX the encoder blocks' norms took about 6% of the op time
(docs/guides/benchmarks.md, "Where the time goes on the Intel Xeon with AMX").

`layer_norm` computes it, in a training call traced for TensorFlow's own CPU kernels whose tokens
are bfloat16 (as keras_vit/fused_gelu.py does the GELU), as a custom-gradient op whose forward
pass is one small XLA-compiled function (Keras' formula in float32, rounded once to bfloat16) and
whose backward pass is another (the formula's derivative in float32: the tokens' gradient
rounded once to bfloat16, the scale's and offset's summed over the rows in float32). Anywhere
else it is the layer's own call. KERAS_VIT_FUSED_LAYER_NORM=0 keeps Keras' form here too (read
at each trace).
"""

import functools

import keras
from keras import ops

from keras_vit import onednn_graph

# One switch for these kernels and keras_vit/fused_layer_norm.py's inference kernel.
SWITCH = "KERAS_VIT_FUSED_LAYER_NORM"


def applies(layer, tokens, training=None):
    """Whether `layer_norm(layer, tokens, training)` runs on the compiled kernels in this trace."""
    return onednn_graph.bfloat16_training_call(tokens, training, SWITCH) and plain_norm(layer, tokens)


def plain_norm(layer, tokens):
    """Whether `layer` normalises `tokens` the way the fused kernels compute: in its own compute
    dtype, over the last axis only, with a scale and an offset, without RMS scaling."""
    if keras.backend.standardize_dtype(tokens.dtype) != layer.compute_dtype:
        return False
    axis = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    if [a % len(tokens.shape) for a in axis] != [len(tokens.shape) - 1]:
        return False
    return bool(layer.center and layer.scale) and not getattr(layer, "rms_scaling", False)


def layer_norm(layer, tokens, training=None):
    """`layer(tokens)` for a built keras.layers.LayerNormalization, on the compiled kernels where
    `applies`."""
    if not applies(layer, tokens, training):
        return layer(tokens)
    return _fused(
        tokens, ops.convert_to_tensor(layer.gamma), ops.convert_to_tensor(layer.beta), layer.epsilon
    )


def _statistics(x, epsilon):
    """(x - mean, 1 / sqrt(variance + epsilon)) over the last axis, in float32."""
    import tensorflow as tf

    centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
    return centered, tf.math.rsqrt(variance + epsilon)


def _value(x, gamma, beta, epsilon):
    import tensorflow as tf

    centered, inverse = _statistics(tf.cast(x, tf.float32), epsilon)
    return tf.cast(centered * inverse * tf.cast(gamma, tf.float32) + tf.cast(beta, tf.float32), x.dtype)


def _gradients(x, gamma, upstream, epsilon):
    """(d/dx, d/dgamma, d/dbeta) of sum(upstream * layer_norm(x)): y = x̂ gamma + beta with
    x̂ = (x - mean) / sigma, so dx = (g - mean(g) - x̂ mean(g x̂)) / sigma for g = upstream * gamma."""
    import tensorflow as tf

    centered, inverse = _statistics(tf.cast(x, tf.float32), epsilon)
    normed = centered * inverse
    wide = tf.cast(upstream, tf.float32)
    rows = list(range(len(x.shape) - 1))
    scaled = wide * tf.cast(gamma, tf.float32)
    mean_scaled = tf.reduce_mean(scaled, axis=-1, keepdims=True)
    mean_projection = tf.reduce_mean(scaled * normed, axis=-1, keepdims=True)
    d_x = inverse * (scaled - mean_scaled - normed * mean_projection)
    d_gamma = tf.reduce_sum(wide * normed, axis=rows)
    d_beta = tf.reduce_sum(wide, axis=rows)
    return tf.cast(d_x, x.dtype), tf.cast(d_gamma, gamma.dtype), tf.cast(d_beta, gamma.dtype)


@functools.cache
def _kernels(epsilon):
    """(forward, backward): the two XLA-compiled functions for one epsilon."""
    import tensorflow as tf

    compiled = functools.partial(tf.function, jit_compile=True, autograph=False)
    return compiled(functools.partial(_value, epsilon=epsilon)), compiled(
        functools.partial(_gradients, epsilon=epsilon)
    )


def _fused(tokens, gamma, beta, epsilon):
    import tensorflow as tf

    forward, backward = _kernels(float(epsilon))

    @tf.custom_gradient
    def compiled_layer_norm(x, scale, offset):
        return forward(x, scale, offset), lambda upstream: backward(x, scale, upstream)

    return compiled_layer_norm(tokens, gamma, beta)
