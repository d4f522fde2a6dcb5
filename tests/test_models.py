"""Tests of keras_vit.models: variants, shapes, saving, attention maps, precision (the other
backends: tests/test_backends.py)."""

import contextlib
import re

import keras
import numpy as np
import pytest
import reference_numpy  # tests/reference_numpy.py: written from DESIGN.md's equations
from fixtures import DISTINCT, tiny_hybrid, tiny_vit

import keras_vit
from keras_vit import deferred_init
from keras_vit.models import VARIANTS
from keras_vit.weights import export_params

# Parameters at 224 px with a 1000-class head (DESIGN.md; vit_jax models_test.py). S/32 is
# S/16 with 147 fewer position rows and a 32x32 instead of 16x16 patch kernel:
# 22,050,664 - 147 * 384 + (32 * 32 - 16 * 16) * 3 * 384.
PARAMETER_COUNTS = {
    "ViT-Ti_16": 5_717_416,
    "ViT-S_16": 22_050_664,
    "ViT-S_32": 22_050_664 - 147 * 384 + (32 * 32 - 16 * 16) * 3 * 384,
    "ViT-B_8": 86_576_872,
    "ViT-B_16": 86_567_656,
    "ViT-B_32": 88_224_232,
    "ViT-L_16": 304_326_632,
    "ViT-L_32": 306_535_400,
    "ViT-H_14": 632_045_800,
    "R+ViT-Ti_16": 6_337_704,
    "R26+ViT-S_32": 36_431_912,
    "R26+ViT-B_32": 101_383_976,
    "R50+ViT-B_16": 98_659_112,
    # The paper's R50+B/32 and R50+L/16 have no vit_jax config: timm 1.0.31's hybrid ViT on
    # the same ResNetV2 stems ((3, 4, 6, 3) and (3, 4, 9), 1x1 patches) counts the same
    # (it also gives vit_jax's five hybrid counts above).
    "R50+ViT-B_32": 110_945_832,
    "R50+ViT-L_16": 316_483_624,
    "R50+ViT-L_32": 328_994_856,
}
LARGE = {"ViT-L_16", "ViT-L_32", "ViT-H_14", "R50+ViT-L_16", "R50+ViT-L_32"}


def _variant_params(large):
    return [
        pytest.param(v, marks=pytest.mark.slow) if v in LARGE else v
        for v in PARAMETER_COUNTS
        if (v in LARGE) == large
    ]


def _images(shape, seed=0, low=0.0, high=255.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype("float32")


def _randomise(model, seed=0):
    """Random values in every weight, so that zero-initialised heads do not hide bugs."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.2, w.shape).astype("float32") for w in model.get_weights()])
    return model


def test_every_public_constructor_is_a_variant_of_the_table():
    assert set(keras_vit.CONSTRUCTORS.values()) == set(VARIANTS) == set(PARAMETER_COUNTS)
    for function_name in keras_vit.CONSTRUCTORS:
        assert callable(getattr(keras_vit, function_name))


@pytest.mark.parametrize("variant", _variant_params(False) + _variant_params(True))
def test_parameter_count_and_build_at_224_and_384(variant):
    function = [f for f, v in keras_vit.CONSTRUCTORS.items() if v == variant][0]
    # The large variants' shapes are what is checked here; drawing their random weights took
    # most of the time (ViT-H/14: 11 s of 13 at 224 px), and the same initializers run for every
    # other variant.
    building = deferred_init.without_initializers if variant in LARGE else contextlib.nullcontext
    with building():
        model = getattr(keras_vit, function)()
    assert model.count_params() == PARAMETER_COUNTS[variant]
    assert model.output_shape == (None, 1000)
    del model
    keras.backend.clear_session()
    if variant in ("R50+ViT-L_16", "R50+ViT-L_32"):
        return  # 384 px: their stems' grids are R50+ViT-B_16's and R50+ViT-B_32's, built here
    with building():
        model = getattr(keras_vit, function)(input_shape=(384, 384, 3), classes=10)
    stride = VARIANTS[variant]["patch_size"]
    if "resnet_layers" in VARIANTS[variant]:  # the root's 4x, then 2x per later stage
        stride *= 4 * 2 ** max(len(VARIANTS[variant]["resnet_layers"]) - 1, 0)
    tokens = (384 // stride) ** 2 + 1  # H/14: 27 x 27, as the official 384 px checkpoint
    hidden = VARIANTS[variant]["hidden_size"]
    assert model.get_layer("posembed_input").pos_embedding.shape == (1, tokens, hidden)
    assert model.output_shape == (None, 10)
    keras.backend.clear_session()


def test_tiny_model_runs_at_any_divisible_size_including_non_square():
    model = keras_vit.ViT(image_size=(16, 28), **DISTINCT)
    assert model.grid_size == (4, 7)
    out = model(_images((2, 16, 28, 3)))
    assert out.shape == (2, 5)
    np.testing.assert_allclose(np.sum(out, axis=-1), 1.0, atol=1e-5)


def test_indivisible_size_drops_the_partial_patches_like_the_official_valid_conv():
    model = keras_vit.ViT(image_size=(30, 17), **DISTINCT)
    assert model.grid_size == (7, 4)
    x = _images((1, 30, 17, 3))
    cropped = keras_vit.ViT(image_size=(28, 16), **DISTINCT)
    _randomise(model)
    cropped.set_weights(model.get_weights())
    np.testing.assert_allclose(model(x), cropped(x[:, :28, :16]), atol=1e-6)


def test_image_smaller_than_a_patch_is_a_clear_error():
    with pytest.raises(ValueError, match="smaller than one patch"):
        keras_vit.ViT(image_size=3, **DISTINCT)


def test_images_of_another_channel_count_or_smaller_than_a_patch_are_one_line_errors():
    # Keras lets a channel count of 1 through: RGB images ran through a grayscale model (a
    # grouped convolution) and gave outputs; the reverse failed deep inside TensorFlow.
    gray = keras_vit.ViT(image_size=16, num_channels=1, **DISTINCT)
    with pytest.raises(
        ValueError,
        match=r"^vit\w* takes images of 1 channels but was given 3 \(shape \(2, 16, 16, 3\)\); convert",
    ):
        gray(_images((2, 16, 16, 3)))
    rgb = keras_vit.ViT(image_size=None, **DISTINCT)
    for call in (rgb, rgb.predict):
        with pytest.raises(ValueError, match=r"^vit\w* takes images of 3 channels but was given 1 "):
            call(_images((1, 16, 16, 1)))
    with pytest.raises(
        ValueError, match=r"^vit\w* was given images of 3 x 5 pixels, smaller than one 4 x 4 patch; pass"
    ):
        rgb(_images((1, 3, 5, 3)))
    assert gray(_images((1, 16, 16, 1))).shape == (1, 5)


@pytest.mark.parametrize("pooling,shape", [(None, (2, 17, 24)), ("token", (2, 24)), ("gap", (2, 24))])
def test_include_top_false_pooling_shapes(pooling, shape):
    model = keras_vit.ViT(image_size=16, include_top=False, pooling=pooling, **DISTINCT)
    assert tuple(model(_images((2, 16, 16, 3))).shape) == shape
    assert "head" not in [layer.name for layer in model.layers]


def test_pooling_gap_is_the_mean_of_normalised_patch_tokens():
    tokens = keras_vit.ViT(image_size=16, include_top=False, **DISTINCT)
    _randomise(tokens)
    gap = keras_vit.ViT(image_size=16, include_top=False, pooling="gap", **DISTINCT)
    gap.set_weights(tokens.get_weights())
    x = _images((2, 16, 16, 3))
    np.testing.assert_allclose(gap(x), np.mean(tokens(x)[:, 1:], axis=1), atol=1e-5)


def test_representation_size_adds_tanh_pre_logits():
    model = keras_vit.ViT(
        image_size=16, representation_size=12, include_top=False, pooling="token", **DISTINCT
    )
    out = model(_images((2, 16, 16, 3)))
    assert out.shape == (2, 12)
    assert np.all(np.abs(out) <= 1.0)


def test_gap_classifier_has_no_class_token():
    model = keras_vit.ViT(image_size=16, classifier="gap", **DISTINCT)
    names = [layer.name for layer in model.layers]
    assert "cls" not in names
    assert model.get_layer("posembed_input").pos_embedding.shape == (1, 16, 24)
    with pytest.raises(ValueError, match="needs a class token"):
        keras_vit.ViT(image_size=16, classifier="gap", include_top=False, pooling="token", **DISTINCT)


def test_head_starts_at_zero_so_predictions_start_uniform():
    model = keras_vit.ViT(image_size=16, **DISTINCT)
    np.testing.assert_allclose(model(_images((2, 16, 16, 3))), 0.2, atol=1e-6)


def test_include_preprocessing_maps_pixels_to_minus_one_one():
    raw = _randomise(
        keras_vit.ViT(image_size=16, include_preprocessing=False, classifier_activation=None, **DISTINCT)
    )
    with_pre = keras_vit.ViT(image_size=16, classifier_activation=None, **DISTINCT)
    with_pre.set_weights(raw.get_weights())
    pixels = _images((2, 16, 16, 3))
    np.testing.assert_allclose(with_pre(pixels), raw(pixels / 127.5 - 1), atol=1e-5)


def test_keras_file_round_trip_gives_identical_outputs(tmp_path):
    model = _randomise(
        keras_vit.ViT(
            image_size=16, representation_size=8, dropout_rate=0.1, stochastic_depth_rate=0.1, **DISTINCT
        )
    )
    path = str(tmp_path / "tiny.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, keras_vit.ViT)
    assert loaded.get_config() == model.get_config()
    x = _images((3, 16, 16, 3))
    np.testing.assert_array_equal(loaded(x), model(x))


def test_hybrid_round_trip_and_feature_stride(tmp_path):
    model = _randomise(tiny_hybrid(num_classes=3))
    assert model.grid_size == (4, 4)  # 32 / (4 * 2)
    path = str(tmp_path / "hybrid.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    x = _images((2, 32, 32, 3))
    np.testing.assert_array_equal(loaded(x), model(x))


def test_attention_maps_shapes_and_rows_sum_to_one():
    model = _randomise(keras_vit.ViT(image_size=16, **DISTINCT))
    maps = model.attention_maps(_images((2, 16, 16, 3)))
    assert len(maps) == 2
    for probs in maps:
        assert tuple(probs.shape) == (2, 3, 17, 17)
        np.testing.assert_allclose(np.sum(probs, axis=-1), 1.0, atol=1e-5)


def test_attention_maps_come_from_the_same_forward_pass():
    # With one block, the class token's output is fixed by its attention row: replaying the
    # block by hand from the maps must give the model's own features.
    model = _randomise(
        keras_vit.ViT(
            image_size=16,
            include_top=False,
            num_layers=1,
            **{k: v for k, v in DISTINCT.items() if k != "num_layers"},
        )
    )
    x = _images((2, 16, 16, 3))
    (probs,) = model.attention_maps(x)
    block = model.get_layer("encoderblock_0")
    stem = keras.Model(model.input, model.get_layer("embedding_dropout").output)
    tokens = stem(x)
    out, expected_probs = block(tokens, return_attention_scores=True)
    np.testing.assert_allclose(probs, expected_probs, atol=1e-6)
    np.testing.assert_allclose(model.get_layer("encoder_norm")(out), model(x), atol=1e-5)


def test_representation_model_outputs_pre_logits_or_pooled_token():
    model = keras_vit.ViT(image_size=16, representation_size=6, **DISTINCT)
    assert model.representation_model().output_shape == (None, 6)
    model = keras_vit.ViT(image_size=16, include_top=False, **DISTINCT)
    assert model.representation_model().output_shape == (None, 24)


def test_mixed_bfloat16_keeps_float32_weights_and_logits():
    reference = _randomise(keras_vit.ViT(image_size=16, classifier_activation=None, **DISTINCT))
    x = _images((2, 16, 16, 3))
    expected = reference(x).numpy()
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        model = keras_vit.ViT(image_size=16, classifier_activation=None, **DISTINCT)
        model.set_weights(reference.get_weights())
        assert all(w.dtype == "float32" for w in model.weights)
        assert model.get_layer("encoderblock_0").compute_dtype == "bfloat16"
        out = model(x)
        maps = model.attention_maps(x)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    assert out.dtype == "float32"
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, expected, atol=0.15 * np.abs(expected).max())
    np.testing.assert_allclose(np.sum(np.asarray(maps[0], "float32"), axis=-1), 1.0, atol=2e-2)


@pytest.mark.parametrize(
    "policy, compute",
    [
        ("mixed_bfloat16", "bfloat16"),
        ("mixed_float16", "float16"),
        ("bfloat16", "bfloat16"),
        (keras.DTypePolicy("mixed_bfloat16"), "bfloat16"),
    ],
    ids=["mixed_bfloat16", "mixed_float16", "bfloat16", "DTypePolicy"],
)
def test_dtype_argument_runs_trains_saves_and_reloads_under_its_policy(tmp_path, policy, compute):
    # Only the constructor's dtype: the global policy stays float32. Dropout and drop-path on,
    # so that every internal layer of the block runs in the step.
    assert keras.config.dtype_policy().name == "float32"
    config = dict(image_size=16, dropout_rate=0.1, stochastic_depth_rate=0.1, **{**DISTINCT, "num_layers": 1})
    model = keras_vit.ViT(dtype=policy, **config)
    name = keras.dtype_policies.get(policy).name
    assert model.get_config()["dtype"]["config"]["name"] == name
    for layer in ("encoderblock_0", "encoder_norm", "embedding"):
        assert model.get_layer(layer).compute_dtype == compute, layer
    x = _images((4, 16, 16, 3))
    assert model(x).dtype == "float32"
    assert model.get_layer("encoderblock_0").mlp.dropout.compute_dtype == compute
    # Eager: the same layers and dtypes as a compiled step, without its tracing time.
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", run_eagerly=True)
    history = model.fit(x, np.array([0, 1, 2, 3]), batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    headless = keras_vit.ViT(dtype=policy, include_top=False, pooling="gap", **config)
    assert headless(x).dtype == "float32"
    model.save(tmp_path / "m.keras")
    again = keras.saving.load_model(tmp_path / "m.keras")
    assert again.get_layer("encoderblock_0").compute_dtype == compute
    np.testing.assert_array_equal(again(x), model(x))


def test_mixed_float16_argument_gets_loss_scaling_from_compile():
    model = keras_vit.ViT(image_size=16, dtype="mixed_float16", **DISTINCT)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)


@pytest.mark.slow  # 16 s: fits until it learns
def test_compile_and_fit_learns_a_small_problem():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 64)
    images = rng.uniform(0, 80, (64, 16, 16, 3)).astype("float32")
    images[labels == 1, :8] += 150.0  # class 1: bright top half
    model = keras_vit.ViT(image_size=16, **{**DISTINCT, "num_classes": 2})
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    history = model.fit(images, labels, batch_size=16, epochs=15, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert history.history["accuracy"][-1] >= 0.9


def test_unknown_weights_value_is_a_clear_error():
    with pytest.raises(ValueError, match="weights"):
        keras_vit.ViT_Ti16(weights=123)


def test_unknown_variant_lists_the_known_ones():
    with pytest.raises(ValueError, match="known models: ViT-Ti_16"):
        keras_vit.create_model("ViT-X_99")


def test_functional_graph_has_stable_layer_names():
    model = keras_vit.ViT(image_size=16, representation_size=4, **DISTINCT)
    names = [layer.name for layer in model.layers]
    assert names == [
        "image",
        "rescaling",
        "embedding",
        "cls",
        "posembed_input",
        "embedding_dropout",
        "encoderblock_0",
        "encoderblock_1",
        "encoder_norm",
        "token_pool",
        "pre_logits",
        "head",
    ]
    block = model.get_layer("encoderblock_0")
    assert [block.norm1.name, block.attention.name, block.norm2.name, block.mlp.name] == [
        "LayerNorm_0",
        "MultiHeadDotProductAttention_1",
        "LayerNorm_2",
        "MlpBlock_3",
    ]
    assert tuple(block.attention.query.kernel.shape) == (24, 3, 8)


@pytest.mark.parametrize("classifier,representation_size", [("token", None), ("gap", 6)])
def test_keras_model_agrees_with_a_hand_written_numpy_forward_pass(classifier, representation_size):
    model = _randomise(
        keras_vit.ViT(
            image_size=(16, 12),
            classifier=classifier,
            representation_size=representation_size,
            classifier_activation=None,
            include_preprocessing=False,
            **DISTINCT,
        )
    )
    x = _images((3, 16, 12, 3), low=-1.0, high=1.0)
    expected = reference_numpy.vit_forward(export_params(model), x, num_heads=3, classifier=classifier)
    np.testing.assert_allclose(model(x), expected, atol=1e-5)


def test_a_model_is_named_vit_not_after_its_class():
    # Keras would call it "vi_t" (from the class name ViT) in its messages and summaries.
    first = tiny_vit(num_classes=2)
    second = tiny_vit(num_classes=2)
    assert re.fullmatch(r"vit(_\d+)?", first.name) and re.fullmatch(r"vit_\d+", second.name)
    assert first.name != second.name
    named = tiny_vit(name="mine")
    assert named.name == "mine"
    assert keras_vit.create_model("ViT-Ti_16", image_size=32, num_classes=2).name == "vit_ti_16"
    # The layers keep their names: they are the weight format.
    names = [layer.name for layer in first.layers]
    assert {"embedding", "posembed_input", "encoder_norm", "head"} <= set(names), names
