"""Whether Keras' JAX backend compiles for a CPU, where keras_vit writes two parts of the
encoder in forms XLA's CPU code runs faster than Keras' (`keras_vit.flat_tokens.in_training`,
`keras_vit.per_head_attention`)."""

import keras


def compiles_for_cpu():
    """On Keras' JAX backend with a CPU as JAX's default device: not on TensorFlow or PyTorch, and
    not where JAX has a GPU or TPU, whose compilers were not measured with those forms."""
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "cpu"
