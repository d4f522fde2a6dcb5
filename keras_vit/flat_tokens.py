"""Attention's projections over the tokens as one 2-D matrix product, for inference, and for
training where Keras' JAX backend compiles for a CPU (`in_training`).

The query, key, value and output projections are EinsumDense layers ("btd,dhk->bthk" and
"bthk,hkd->btd"), the official kernel layout. On TensorFlow an einsum with a weight operand
runs as a batched matmul that broadcasts the kernel over the batch; on a CPU oneDNN runs that
at a fraction of the rate of the same product as one (batch x tokens, width) matrix, which it
also fuses with the bias add. `project` computes the layer's output so, from the layer's own
kernel and bias (read under the caller's dtype policy, so cast to bfloat16 under
mixed_bfloat16): the same values to float rounding, the same weights and names. A layer that
Keras has quantized or given LoRA weights goes through its own call.
"""

import math

from keras import ops

from keras_vit import jax_cpu


def in_training():
    """Whether a training call projects the flattened tokens too (the MLP's Dense layers as
    well): on Keras' JAX backend compiling for a CPU. There XLA differentiated the (B, T, D)
    einsums into copies of the transposed layer norm outputs, each computed again from every
    earlier block's outputs (fusions of up to 171 operands at ViT-Ti/16): with the 2-D products,
    a jitted `jax.value_and_grad` step of ViT-Ti/16 at 224 px, batch 16, float32 took 1.6 s
    against 2.6 s (2 cores of an AMD EPYC with AVX-512, jax 0.10.2, 2026-12-04; the attention's
    projections alone flattened 1.8-1.9 s, the MLP's alone 2.0 s). TensorFlow keeps the einsums
    in training (its bfloat16 step ran 0.93x as fast flattened; under XLA in float32 flattened
    measured 1.04x, within the noise), and GPUs and TPUs, whose layouts differ, were not
    measured."""
    return jax_cpu.compiles_for_cpu()


def project(layer, x, contracted_axes):
    """`layer(x)` for an EinsumDense layer whose kernel's first `contracted_axes` axes are
    contracted with the last ones of `x` and whose remaining axes are the output's."""
    if getattr(layer, "quantization_mode", None) or getattr(layer, "lora_enabled", False):
        return layer(x)
    kernel = layer.kernel
    depth = math.prod(kernel.shape[:contracted_axes])
    outputs = tuple(kernel.shape[contracted_axes:])
    y = ops.matmul(ops.reshape(x, (-1, depth)), ops.reshape(kernel, (depth, math.prod(outputs))))
    if layer.bias is not None:
        y = y + ops.reshape(layer.bias, (-1,))
    shape = ops.shape(x)
    return ops.reshape(y, (shape[0], shape[1], *outputs))
