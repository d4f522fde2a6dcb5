"""keras_vit.deferred_init: a model that is loaded runs none of the random initializers whose
draws the load overwrites (seconds on JAX, where each one compiles), and a model that is built
fresh is initialized as before. Loading on the JAX and PyTorch backends: tests/test_backends.py."""

import keras
import numpy as np
import pytest
from fixtures import tiny_vit
from keras.src.backend.common import global_state

import keras_vit
from keras_vit import deferred_init


@pytest.fixture
def initializer_calls(monkeypatch):
    """The Keras initializers that weights are created with, in order of creation."""
    calls = []
    variable_class = keras.Variable
    original = variable_class._initialize_with_initializer

    def record(self, initializer):
        calls.append(initializer)
        return original(self, initializer)

    monkeypatch.setattr(variable_class, "_initialize_with_initializer", record)
    return calls


def _drawn(calls):
    """The calls of random initializers among `calls` (zeros made by deferred_init are not)."""
    return [
        c for c in calls if isinstance(c, keras.initializers.Initializer) and "Random" in type(c).__name__
    ]


def _randomised(model):
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(0, 0.2, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


def test_a_fresh_model_and_from_config_still_draw_their_weights(initializer_calls):
    """Catches a build that skips initialization outside a load: weights=None, and from_config
    called directly (its caller may train the model without loading anything)."""
    for model in (tiny_vit(), keras_vit.ViT.from_config(tiny_vit().get_config())):
        kernel = model.get_layer("embedding").kernel
        assert np.std(keras.ops.convert_to_numpy(kernel)) > 0.01
    assert _drawn(initializer_calls)
    assert not global_state.get_global_attribute("uninitialized_variables")


@pytest.mark.parametrize("suffix", [".keras", ".weights.h5", ".npz"])
def test_loading_draws_no_weight_and_loads_every_one(tmp_path, initializer_calls, suffix):
    """keras.saving.load_model, keras_vit.models.load_model and create_model(weights=FILE): no
    random initializer runs, and the outputs are the saved model's (a weight left at zero would
    change them). Nothing is left for Keras to initialize later."""
    model = _randomised(tiny_vit(num_classes=3, dropout_rate=0.1, representation_size=8))
    path = tmp_path / f"model{suffix}"
    {
        ".keras": model.save,
        ".weights.h5": model.save_weights,
        ".npz": lambda p: keras_vit.weights.save_npz(model, p),
    }[suffix](path)
    images = np.random.default_rng(1).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    expected = keras.ops.convert_to_numpy(model(images))
    initializer_calls.clear()
    loaded = [keras_vit.models.load_model(path)]
    if suffix == ".keras":
        loaded.append(keras.saving.load_model(path))
    loaded.append(
        keras_vit.create_model(
            "ViT-Ti_16",
            weights=str(path),
            **{k: getattr(model, k) for k in ("patch_size", "hidden_size")},
            num_layers=1,
            num_heads=2,
            mlp_dim=64,
            representation_size=8,
        )
    )
    assert _drawn(initializer_calls) == []
    assert initializer_calls, "the weights were created some other way than this test watches"
    for reloaded in loaded:
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(reloaded(images)), expected)
    assert not global_state.get_global_attribute("uninitialized_variables")
    # The dropout layers' seed states keep their own values, not zeros.
    dropout = loaded[0].get_layer("embedding_dropout")
    seed, counter = keras.ops.convert_to_numpy(dropout.seed_generator.state).tolist()
    assert seed != 0 and counter == 0


def test_a_failed_load_leaves_nothing_pending(tmp_path):
    """A checkpoint that does not fit raises its one-line error, and the weights created for it
    are not left for Keras to initialize at its next scope (which would fail there)."""
    path = tmp_path / "other.npz"
    keras_vit.weights.save_npz(tiny_vit(hidden_size=48), path)
    with pytest.raises(keras_vit.weights.CheckpointError, match="does not fit this model"):
        keras_vit.create_model(
            "ViT-Ti_16",
            weights=str(path),
            image_size=32,
            patch_size=8,
            hidden_size=32,
            num_layers=1,
            num_heads=2,
            mlp_dim=64,
        )
    assert not global_state.get_global_attribute("uninitialized_variables")
    with keras.StatelessScope():  # Keras initializes pending weights when one exits
        pass


def test_weights_created_inside_are_zeros_of_their_dtype_and_only_inside():
    with deferred_init.without_initializers():
        inside = keras.layers.Dense(4, kernel_initializer="he_normal", dtype="bfloat16")
        inside.build((None, 3))
    outside = keras.layers.Dense(4, kernel_initializer="he_normal")
    outside.build((None, 3))
    assert inside.kernel.dtype == "bfloat16"
    assert not np.any(keras.ops.convert_to_numpy(keras.ops.cast(inside.kernel, "float32")))
    assert np.any(keras.ops.convert_to_numpy(outside.kernel))
