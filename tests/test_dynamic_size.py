"""One model for any image size: input_shape=(None, None, 3) against fixed-size models.

A fixed-size model gets its position embeddings from the checkpoint loader (scipy.ndimage.zoom
on the grid); a model of no fixed size resizes its stored ones at call time. The two must
agree, on non-square grids too (10 x 20 would go wrong if a grid were transposed), under XLA,
and after saving (on JAX and PyTorch too: tests/test_backends.py).
"""

import json
import os

import backend_cases
import keras
import numpy as np
import pytest
import synthetic_checkpoints as synth
import tensorflow as tf
from fixtures import HYBRID_STEM, TINY_SHAPE

import keras_vit
from keras_vit import weights

# Patch 16, so 224, 384 and 160 x 320 give the grids of the real models (14, 24, 10 x 20).
SMALL = dict(TINY_SHAPE, patch_size=16, num_layers=2)
HYBRID = dict(TINY_SHAPE, **HYBRID_STEM)  # tests/fixtures.py's tiny hybrid, built here at other sizes
SIZES = [(224, 224), (384, 384), (160, 320)]
# ../shared sits beside the repository (the project layout), never at a fixed absolute path.
FIXTURES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "shared", "fixtures"
)


def _pixels(size, seed=0, n=2):
    return np.random.default_rng(seed).uniform(0, 255, (n, *size, 3)).astype("float32")


def _randomise(model, seed=0):
    # The head and class token start at zero: random values everywhere make every part count.
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.2, w.shape).astype("float32") for w in model.get_weights()])
    return model


def _fixed_from_npz(path, size, config):
    """A fixed-size model whose position embeddings the checkpoint loader resized."""
    return keras_vit.create_model(
        "ViT-B_16", weights=path, image_size=size, classifier_activation=None, **config
    )


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory):
    """A dynamic-size model with random weights, built once, and its weights as an official .npz."""
    keras.utils.set_random_seed(7)
    model = _randomise(
        keras_vit.ViT(image_size=(None, None), num_classes=5, classifier_activation=None, **SMALL), seed=7
    )
    path = str(tmp_path_factory.mktemp("dynamic") / "dynamic.npz")
    weights.save_npz(model, path)
    return model, path


def test_the_reported_constructor_call_builds_one_model_for_any_size():
    model = keras_vit.ViT_Ti16(input_shape=(None, None, 3))
    assert model.input_shape == (None, None, None, 3)
    assert model.grid_size == (None, None)
    assert model.get_layer("posembed_input").grid_size == (14, 14)  # stored for 224 px
    for size in ((64, 96), (32, 48)):
        assert tuple(model(_pixels(size, n=1)).shape) == (1, 1000)
    assert model.token_grid((64, 96)) == (4, 6)


def test_a_dynamic_model_is_only_for_sizes_not_channels():
    with pytest.raises(ValueError, match="channel count"):
        keras_vit.ViT_Ti16(input_shape=(None, None, None))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_dynamic_model_equals_fixed_models_loaded_through_the_checkpoint_resize(dynamic, size):
    model, path = dynamic
    assert model.get_layer("posembed_input").grid_size == (14, 14)
    fixed = _fixed_from_npz(path, size, SMALL)
    x = _pixels(size, seed=size[1])
    expected = np.asarray(fixed(x))
    np.testing.assert_allclose(model(x), expected, atol=1e-5, rtol=0)
    # The comparison can see the position embeddings: without them the output moves.
    assert np.abs(expected - np.asarray(_fixed_without_position(fixed)(x))).max() > 1e-2


def _fixed_without_position(model):
    layer = model.get_layer("posembed_input")
    clone = keras_vit.ViT.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    clone.get_layer("posembed_input").pos_embedding.assign(np.zeros(layer.pos_embedding.shape, "float32"))
    return clone


def test_a_size_that_is_not_a_multiple_of_the_patch_drops_the_partial_patches(dynamic):
    model, path = dynamic
    fixed = _fixed_from_npz(path, (160, 320), SMALL)
    x = _pixels((175, 333), seed=3)  # floor(175 / 16) x floor(333 / 16) = 10 x 20
    np.testing.assert_allclose(model(x), fixed(x[:, :160, :320]), atol=1e-5, rtol=0)


def test_one_fixed_axis_stores_its_own_size_and_resizes_the_other(dynamic, tmp_path):
    model, path = dynamic
    wide = keras_vit.ViT(image_size=(None, 320), num_classes=5, classifier_activation=None, **SMALL)
    weights.load_weights(wide, path)  # the loader resizes the fixed axis: 14 x 14 -> 14 x 20
    assert wide.get_layer("posembed_input").grid_size == (14, 20)
    x = _pixels((160, 320), seed=4)
    np.testing.assert_allclose(wide(x), _fixed_from_npz(path, (160, 320), SMALL)(x), atol=1e-5, rtol=0)
    np.testing.assert_allclose(wide(x), model(x), atol=1e-5, rtol=0)


def test_hybrid_grid_follows_the_resnet_stems_rounding(tmp_path):
    model = _randomise(
        keras_vit.ViT(
            image_size=None, base_image_size=64, num_classes=3, classifier_activation=None, **HYBRID
        ),
        seed=5,
    )
    assert model.get_layer("posembed_input").grid_size == (8, 8)
    path = str(tmp_path / "hybrid.npz")
    weights.save_npz(model, path)
    size = (100, 150)  # SAME-padded strides: 100 -> 50 -> 25 -> 13 and 150 -> 75 -> 38 -> 19
    assert model.token_grid(size) == (13, 19)
    fixed = keras_vit.create_model(
        "R50+ViT-B_16", weights=path, image_size=size, classifier_activation=None, **HYBRID
    )
    assert fixed.get_layer("posembed_input").grid_size == (13, 19)
    x = _pixels(size, seed=6)
    np.testing.assert_allclose(model(x), fixed(x), atol=1e-5, rtol=0)


def test_reproduces_the_independent_reference_at_its_own_and_the_doubled_size():
    # Logits from a separate PyTorch implementation at 32 px and, after the official resize,
    # at 64 px (see the fixtures' README): one model gives both.
    outputs = np.load(f"{FIXTURES}/tiny_vit_reference_outputs.npz", allow_pickle=False)
    model = keras_vit.ViT(**backend_cases.FIXTURE_MODEL)
    weights.load_weights(model, f"{FIXTURES}/tiny_vit_vit_jax_layout.npz")
    for size in (32, 64):
        np.testing.assert_allclose(
            model(outputs[f"x_{size}_nhwc"]), outputs[f"logits_{size}"], atol=1e-5, rtol=0
        )


def test_official_weights_keep_their_own_grid_in_a_dynamic_model(tmp_path):
    params = synth.vit_jax_params(1, image_size=384, num_classes=10, **synth.TI16)
    path = synth.save(tmp_path / "ti16_384.npz", params)
    model = keras_vit.ViT_Ti16(weights=path, input_shape=(None, None, 3), classifier_activation=None)
    layer = model.get_layer("posembed_input")
    assert layer.grid_size == (24, 24) and model.base_image_size == (384, 384)
    np.testing.assert_array_equal(
        layer.pos_embedding.numpy(), params["Transformer/posembed_input/pos_embedding"]
    )
    fixed = keras_vit.ViT_Ti16(weights=path, input_shape=(224, 224, 3), classifier_activation=None)
    x = _pixels((224, 224), n=1)
    np.testing.assert_allclose(model(x), fixed(x), atol=1e-5, rtol=0)


def test_tensorflow_xla_and_graphs_of_unknown_size_equal_eager(dynamic):
    model, _ = dynamic
    x = _pixels((160, 320), seed=8)
    eager = np.asarray(model(x))
    xla = tf.function(lambda images: model(images, training=False), jit_compile=True)
    np.testing.assert_allclose(xla(x), eager, atol=1e-5, rtol=0)
    # Traced once for every size: the grid is only known when the graph runs.
    any_size = tf.function(
        lambda images: model(images, training=False),
        input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)],
    )
    for size in ((160, 320), (96, 48)):
        x = _pixels(size, seed=9)
        np.testing.assert_allclose(any_size(x), model(x), atol=1e-5, rtol=0)


def test_predict_on_batches_of_different_sizes(dynamic):
    model, _ = dynamic
    for size in ((160, 320), (64, 48), (160, 320)):
        x = _pixels(size, seed=10, n=3)
        np.testing.assert_allclose(model.predict(x, verbose=0), model(x), atol=1e-5, rtol=0)


def test_config_and_keras_file_round_trip(dynamic, tmp_path):
    model, _ = dynamic
    config = model.get_config()
    assert tuple(config["image_size"]) == (None, None)
    clone = keras_vit.ViT.from_config(json.loads(json.dumps(config)))
    assert clone.get_config() == config
    path = str(tmp_path / "dynamic.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, keras_vit.ViT) and loaded.get_config() == config
    for size in ((160, 320), (48, 80)):
        x = _pixels(size, seed=12)
        np.testing.assert_array_equal(loaded(x), model(x))


def test_attention_maps_and_representation_model_take_any_size(dynamic):
    model, path = dynamic
    size = (160, 320)
    x = _pixels(size, seed=13, n=1)
    maps = model.attention_maps(x)
    fixed_maps = _fixed_from_npz(path, size, SMALL).attention_maps(x)
    assert tuple(maps[0].shape) == (1, 2, 1 + 10 * 20, 1 + 10 * 20)
    for got, expected in zip(maps, fixed_maps):
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    features = model.representation_model()
    assert tuple(features(x).shape) == (1, 32)
    assert tuple(features(_pixels((64, 96), n=1)).shape) == (1, 32)
