"""keras_vit.jax_cpu: the one place that says Keras' JAX backend compiles for a CPU."""

import keras

from keras_vit import jax_cpu


def test_only_keras_jax_backend_with_a_cpu_compiles_for_a_cpu(monkeypatch):
    # Its two users (flattened projections in training, attention per head) were measured on
    # XLA's CPU code only: a GPU or TPU, or another backend, must keep Keras' forms.
    import jax

    cases = {
        ("jax", "cpu"): True,
        ("jax", "gpu"): False,
        ("jax", "tpu"): False,
        ("tensorflow", "cpu"): False,
        ("torch", "cpu"): False,
    }
    for (backend, platform), expected in cases.items():
        monkeypatch.setattr(keras.backend, "backend", lambda name=backend: name)
        monkeypatch.setattr(jax, "default_backend", lambda name=platform: name)
        assert jax_cpu.compiles_for_cpu() is expected, (backend, platform)
