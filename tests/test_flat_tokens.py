"""keras_vit.flat_tokens: an EinsumDense projection as one 2-D matmul of its own kernel."""

import keras
import numpy as np

from keras_vit import flat_tokens, jax_cpu


def _layer(equation, output_shape, bias_axes, input_shape, seed):
    layer = keras.layers.EinsumDense(equation, output_shape=output_shape, bias_axes=bias_axes)
    layer.build(input_shape)
    rng = np.random.default_rng(seed)
    for weight in layer.weights:  # random biases too: a dropped or misplaced bias shows
        weight.assign(rng.normal(size=weight.shape).astype("float32"))
    return layer


def test_projections_equal_the_layers_own_call():
    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(2, 5, 6)).astype("float32")
    heads = rng.normal(size=(2, 5, 3, 4)).astype("float32")
    query = _layer("btd,dhk->bthk", (None, 3, 4), "hk", tokens.shape, 1)
    out = _layer("bthk,hkd->btd", (None, 6), "d", heads.shape, 2)
    np.testing.assert_allclose(flat_tokens.project(query, tokens, 1), query(tokens), atol=1e-5)
    np.testing.assert_allclose(flat_tokens.project(out, heads, 2), out(heads), atol=1e-5)


def test_a_layer_with_lora_weights_goes_through_its_own_call():
    # The flat product reads only the kernel: LoRA's extra weights would be left out silently.
    tokens = np.random.default_rng(0).normal(size=(2, 5, 6)).astype("float32")
    query = _layer("btd,dhk->bthk", (None, 3, 4), "hk", tokens.shape, 1)
    query.enable_lora(2)
    query.lora_kernel_b.assign(np.ones(query.lora_kernel_b.shape, "float32"))
    np.testing.assert_allclose(flat_tokens.project(query, tokens, 1), query(tokens), atol=1e-6)


def test_training_projects_flattened_tokens_where_jax_compiles_for_a_cpu_only(monkeypatch):
    # On JAX for a CPU the einsums' gradients made a step 1.6x slower; TensorFlow's bfloat16
    # step ran slower flattened, and accelerators were not measured: those keep the einsums
    # (which platforms count: tests/test_jax_cpu.py).
    for answer in (True, False):
        monkeypatch.setattr(jax_cpu, "compiles_for_cpu", lambda answer=answer: answer)
        assert flat_tokens.in_training() is answer
