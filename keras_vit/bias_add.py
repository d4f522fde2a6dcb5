"""The Dense and EinsumDense layers of a bfloat16 training call, their bias gradients summed in float32.

On TensorFlow, `keras.ops.add` adds a vector bias along the last axis with `tf.nn.bias_add`, whose
gradient is the BiasAddGrad op; on the CPU its bfloat16 kernel sums the rows in bfloat16. Over the
3,152 token rows of a ViT-Ti/16 batch of 16, a gradient of ones summed to 256 (past 256, bfloat16's
8-bit significand cannot count in ones) and normal noise came out 13% off (the error's norm over
the float64 sum's), where `tf.reduce_sum`, the gradient of a broadcasting add, sums bfloat16 in
float32 (0.2% off: the rounding of the result) and took 0.3x to 0.6x the time. The MLP's two
Dense layers and the attention's output projection had such biases: in a bfloat16 training step
of ViT-Ti/16 their gradients were 6% of TensorFlow's op time (docs/guides/benchmarks.md). So has
the pre-logits layer of pre-training (`representation_size`), over the batch's rows: it is
`SummedBiasDense`, a Dense of the model's graph that does in its own call what `call` does.

`call(layer, x, training)` computes the layer's output as its own call does, `tf.nn.bias_add`
included, but with a gradient of its own for that add: `tf.reduce_sum` over the rows. It does so
in a bfloat16 training call on TensorFlow where it sees no GPU (the CPU's kernel is the same with
oneDNN off), for a layer whose bias is a vector (Keras adds any other with a broadcasting add,
whose gradient is that sum already), and is `layer(x)` anywhere else: float32 keeps Keras' ops
and their bits, TensorFlow's GPU kernel sums bfloat16 in float32 (its CPU kernel does so for
float16 only), and so do JAX and PyTorch. The forward values, the weights and their names are
the layer's own; a layer that Keras has quantized or given LoRA weights goes through its own
call.
"""

import keras
from keras import ops

from keras_vit import onednn_graph


def applies(x, training=None):
    """Whether `call(layer, x, training)` sums the bias gradient in float32 in this call: any
    bfloat16 training call on TensorFlow without a GPU, oneDNN's kernels on or off (see above)."""
    return onednn_graph.bfloat16_training(x, training) and not onednn_graph.has_gpu()


def call(layer, x, training=None):
    """`layer(x)` for a keras.layers.Dense or EinsumDense layer, its bias gradient summed in float32
    where `applies`. Called inside the enclosing layer's call, so that the kernel and bias are read
    under its dtype policy (cast to bfloat16 under mixed_bfloat16), as the layer's own call reads
    them."""
    if not _sums_in_float32(layer, x, training):
        return layer(x)
    return _call_summed(layer, x)


@keras.saving.register_keras_serializable(package="keras_vit")
class SummedBiasDense(keras.layers.Dense):
    """keras.layers.Dense whose bias gradient is summed in float32 where `applies`, for a Dense
    layer of the model's functional graph (the pre-logits layer), which no enclosing layer's
    call reaches: its own call does what `call` does. Its weights and their names are Dense's."""

    def call(self, inputs, training=None):
        if not _sums_in_float32(self, inputs, training):
            return super().call(inputs, training=training)
        return _call_summed(self, inputs)


def _sums_in_float32(layer, x, training):
    if not applies(x, training) or layer.bias is None or len(layer.bias.shape) != 1:
        return False
    return not (getattr(layer, "quantization_mode", None) or getattr(layer, "lora_enabled", False))


def _call_summed(layer, x):
    if isinstance(layer, keras.layers.EinsumDense):
        y = ops.einsum(layer.equation, x, layer.kernel)
    else:
        y = ops.matmul(x, layer.kernel)
    y = _bias_add_summed_in_float32(y, layer.bias)
    activation = getattr(layer, "activation", None)
    return y if activation is None else activation(y)


def _bias_add_summed_in_float32(values, bias):
    import tensorflow as tf

    @tf.custom_gradient
    def bias_add(values, vector):
        def gradient(upstream):
            # tf.reduce_sum sums bfloat16 in float32; BiasAddGrad, the op's own gradient, does not.
            return upstream, tf.reduce_sum(upstream, axis=list(range(len(upstream.shape) - 1)))

        return tf.nn.bias_add(values, vector), gradient

    return bias_add(values, tf.cast(bias, values.dtype))
