"""The layer norms of inference as one oneDNN kernel each, where TensorFlow runs several passes.

Keras' LayerNormalization is, on TensorFlow, a chain of element-wise operations (a mean, a
squared difference, a second mean, a reciprocal square root, products, sums and, in bfloat16,
casts), each a pass over the tokens: most of the element-wise time of a bfloat16 inference
call (docs/guides/benchmarks.md). TensorFlow's x86 builds carry oneDNN's layer normalization as
the internal op `_MklLayerNorm`, which their graph rewriter puts in place of Keras 2's layer norm
only: it matched neither Keras 3's form nor, with the weights as variables, the other forms its
source lists. `layer_norm` creates that op directly in a traced inference call.

The op costs about a quarter of a millisecond a call whatever its size, so it is used only for
at least MIN_ELEMENTS elements, and only where `onednn_graph.runs_on_onednn()`: traced, without
XLA (which cannot compile it), on oneDNN's kernels, with no GPU. The batch must be known when
tracing, as for keras_vit/row_parts.py: graphs traced for any batch size (Keras' `model.export`,
`tf.saved_model.save(model)`, keras_vit.export's signatures) keep TensorFlow's standard ops, so
that what is saved runs wherever TensorFlow, TensorFlow Serving or LiteRT does. A gradient of such
a call (a saliency map) is Keras' own formula's. KERAS_VIT_FUSED_LAYER_NORM=0 keeps Keras' form
(read at each trace): set it when tracing a fixed-batch graph that will be saved and run elsewhere.
A bfloat16 training call has XLA-compiled kernels of its own (keras_vit/compiled_layer_norm.py).
"""

import functools
import math

import keras
from keras import ops

from keras_vit import compiled_layer_norm, onednn_graph

SWITCH = compiled_layer_norm.SWITCH
# Below this many elements Keras' form was as fast or faster. A tf.function of the norm alone in
# bfloat16 on the 2-core EPYC: 0.65x at 197 x 192 (ViT-Ti/16 at batch 1), level at 197 x 384 and
# 2 x 197 x 192, 1.5x to 3x from 197 x 512 to 8 x 197 x 768.
MIN_ELEMENTS = 2**16
# The op's kernel takes these, and tokens of rank 2 or 3 normalised over the last axis.
_DTYPES = ("float32", "bfloat16")


def enabled():
    """Whether KERAS_VIT_FUSED_LAYER_NORM lets inference use the fused kernel (unset: yes)."""
    return onednn_graph.switched_on(SWITCH)


def applies(layer, tokens, training=None):
    """Whether `layer_norm(layer, tokens)` runs on the fused kernel in this trace."""
    if training or keras.backend.backend() != "tensorflow" or not enabled():
        return False
    shape = tuple(tokens.shape)
    if len(shape) not in (2, 3) or not all(isinstance(size, int) for size in shape):
        return False
    if keras.backend.standardize_dtype(tokens.dtype) not in _DTYPES:
        return False
    if not compiled_layer_norm.plain_norm(layer, tokens):
        return False
    return math.prod(shape) >= MIN_ELEMENTS and onednn_graph.runs_on_onednn(tokens.dtype) and op_registered()


@functools.cache
def op_registered():
    """Whether this TensorFlow has the op (its x86 builds with oneDNN do; others, or a later
    version that drops the internal op, keep Keras' form)."""
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get("_MklLayerNorm") is not None


def layer_norm(layer, tokens, training=None):
    """`layer(tokens)` for a built keras.layers.LayerNormalization: on oneDNN's fused kernel where
    `applies`, in a training call on keras_vit/compiled_layer_norm.py's kernels where those apply,
    else the layer's own call."""
    if training:
        return compiled_layer_norm.layer_norm(layer, tokens, training)
    if not applies(layer, tokens, training):
        return layer(tokens)
    gamma, beta = (ops.cast(weight, tokens.dtype) for weight in (layer.gamma, layer.beta))
    return _fused(tokens, gamma, beta, layer.epsilon)


def _fused(tokens, gamma, beta, epsilon):
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2

    @tf.custom_gradient
    def norm(x, scale, offset):
        attrs = {
            "T": attr_value_pb2.AttrValue(type=x.dtype.as_datatype_enum),
            "epsilon": attr_value_pb2.AttrValue(f=epsilon),
        }
        graph = tf.compat.v1.get_default_graph()
        # A name of its own: the op type's leading underscore is not a valid node name.
        op = graph.create_op("_MklLayerNorm", [x, scale, offset], [x.dtype], attrs=attrs, name="LayerNorm")
        normed = op.outputs[0]

        def gradient(upstream):  # the op has none of its own: Keras' formula's
            with tf.GradientTape() as tape:
                tape.watch([x, scale, offset])
                again = ops.layer_normalization(x, scale, offset, axis=-1, epsilon=epsilon)
            return tape.gradient(again, [x, scale, offset], output_gradients=upstream)

        return tf.ensure_shape(normed, x.shape), gradient

    return norm(tokens, gamma, beta)
