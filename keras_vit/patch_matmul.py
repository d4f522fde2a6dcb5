"""The patch embedding of a bfloat16 training call as one matrix product, on TensorFlow's CPU kernels.

The patch embedding is a P x P convolution with stride P. TensorFlow's oneDNN CPU kernels compute
its weight gradient (Conv2DBackpropFilter) at about 20 GFLOP/s in bfloat16: 45 ms, 6% of the op
time, of a bfloat16 training step of ViT-Ti/16 at batch 16 on the 2-core Xeon with AMX. The same
embedding is the image cut into rows of P * P * C patch values (a reshape, a transpose, a reshape)
times the kernel flattened to (P * P * C, D): one matrix product, whose weight gradient is one
more. The embedding with its gradients took 5.6 ms against 30 ms that way for ViT-Ti/16, 18.5
against 123 ms for ViT-B/16 (bfloat16, batch 16, in turns in one process). The values are the
convolution's, each output a sum of the same P * P * C products, in another order.

`embed` computes it so in a training call traced without XLA on TensorFlow's own x86 kernels
(`onednn_graph.runs_on_onednn()`) whose images are bfloat16; anywhere else (inference, float32
(1.4x there, so its runs keep their bits), eager calls, steps XLA compiles whole, GPUs, the other
backends, TF_ENABLE_ONEDNN_OPTS=0) it is the convolution. KERAS_VIT_PATCH_MATMUL=0 keeps the
convolution everywhere (read at each trace).
"""

from keras import ops

from keras_vit import onednn_graph

SWITCH = "KERAS_VIT_PATCH_MATMUL"


def applies(images, training=None):
    """Whether `embed(images, ..., training)` is the matrix product in this trace."""
    return onednn_graph.bfloat16_training_call(images, training, SWITCH)


def embed(images, kernel, bias, training=None):
    """The (B, H/P, W/P, D) embedding of (B, H, W, C) images by a (P, P, C, D) kernel and a bias:
    a P x P convolution with stride P (rows and columns past the last whole patch left out)."""
    patch_h, patch_w, channels, width = kernel.shape
    if not applies(images, training):
        return ops.conv(images, kernel, strides=(patch_h, patch_w), padding="valid") + bias
    batch, height, image_width = ops.shape(images)[0], ops.shape(images)[1], ops.shape(images)[2]
    rows, columns = height // patch_h, image_width // patch_w
    x = images[:, : rows * patch_h, : columns * patch_w, :]
    x = ops.reshape(x, (batch, rows, patch_h, columns, patch_w, channels))
    # Each patch's values in the kernel's (row, column, channel) order.
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    x = ops.reshape(x, (-1, patch_h * patch_w * channels))
    y = ops.matmul(x, ops.reshape(kernel, (patch_h * patch_w * channels, width)))
    return ops.reshape(y + bias, (batch, rows, columns, width))
