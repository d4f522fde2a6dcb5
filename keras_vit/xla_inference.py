"""Inference on an x86 CPU without AVX-512: the model's traced call compiled by XLA.

On such a CPU (an AMD EPYC with AVX2 only, say) TensorFlow's own graph of a float32 call ran
well behind the same call compiled by XLA, which fuses the element-wise passes around the
products: ViT-Ti/16 at 224 px 29.4 against 39.8 images/s at batch 1 and 44.4 against 55.5 at
batch 8, ViT-B/16 3.1 against 4.1 at batch 1 (`python -m benchmarks.inference`, the AMD EPYC of
family 25, model 1, 2026-12-02; docs/guides/benchmarks.md). In bfloat16 the gap is wider: such
a CPU has no bfloat16 product instructions, TensorFlow emulates them op by op, while XLA computes
each fusion in float32 and rounds its result to bfloat16: a bfloat16 call ran 4.8x TensorFlow's
graph for ViT-Ti/16 at batch 1 and 8, 3.0x and 2.3x for ViT-B/16 (the benchmark's row "keras_vit
TF graph", the same EPYC, 16:30 UTC), at 0.75x to 0.98x the float32 call's speed, and nearer the
float32 model's outputs (XLA rounds less often). Where the CPU has AVX-512, oneDNN's kernels
(and keras_vit's own CPU paths, keras_vit/row_parts.py and fused_layer_norm.py) were as fast or
faster than XLA in float32, and faster in bfloat16, so nothing changes there.

`applies` says, per traced call, whether `ViT.call` runs its layers inside one XLA-compiled
`tf.function` (`compiled`): on Keras' TensorFlow backend, in a graph XLA does not already
compile, not training, with no GPU and no tf.distribute strategy (a strategy's replicas hold
their variables on several devices), computing in float32 or bfloat16, with the batch size known
when the call is traced (a graph traced for any batch size, as exports are, keeps TensorFlow's
own ops and runs wherever TensorFlow does), for a plain ViT at least ViT-Ti wide (the size
measured). The outputs are the model's to float rounding (bfloat16's, for a bfloat16 model).
Eager calls are unchanged; `KERAS_VIT_XLA_INFERENCE=0` keeps TensorFlow's graph (read at each
trace).
"""

import weakref

import keras

from keras_vit import cpu_info, onednn_default, onednn_graph

SWITCH = "KERAS_VIT_XLA_INFERENCE"
MIN_HIDDEN_SIZE = 192  # ViT-Ti's width, the smallest measured
COMPUTE_DTYPES = ("float32", "bfloat16")  # those measured (float16 was not)
# model -> its compiled call (the model's own attribute would be tracked by Keras).
_COMPILED = weakref.WeakKeyDictionary()


def cpu_prefers_xla():
    """Whether this is an x86 CPU without AVX-512, where XLA ran inference faster."""
    return onednn_default.is_x86() and not cpu_info.has_avx512()


def applies(model, images, training=None):
    """Whether `model`'s call on `images` in this trace runs on the compiled call."""
    if training or keras.backend.backend() != "tensorflow" or not onednn_graph.switched_on(SWITCH):
        return False
    if model.compute_dtype not in COMPUTE_DTYPES or not isinstance(images.shape[0], int):
        return False
    if model.hidden_size < MIN_HIDDEN_SIZE or model.resnet_layers is not None:
        return False
    if not cpu_prefers_xla():
        return False
    import tensorflow as tf

    if tf.distribute.has_strategy():
        return False
    return onednn_graph.traced_without_xla() and not onednn_graph.has_gpu()


def compiled(model):
    """The model's inference call as one XLA-compiled tf.function (traced once per input shape).
    Inside it `applies` is false (XLA compiles that graph), so it runs the layers themselves."""
    if model not in _COMPILED:
        import tensorflow as tf

        # A weak reference: the function is the dictionary's value, and must not keep its key alive.
        model_ref = weakref.ref(model)

        def call(images):
            return model_ref().call(images, training=False)

        _COMPILED[model] = tf.function(call, jit_compile=True, autograph=False)
    return _COMPILED[model]
