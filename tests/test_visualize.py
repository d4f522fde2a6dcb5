"""keras_vit.visualize on attention and weights whose answers are known by construction."""

import io

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit import visualize


def _uniform(batch, heads, tokens):
    return np.full((batch, heads, tokens, tokens), 1.0 / tokens)


def _all_attend_to(token, tokens, batch=1, heads=2):
    """Every query puts all of its attention on one token."""
    probs = np.zeros((batch, heads, tokens, tokens))
    probs[..., token] = 1.0
    return probs


def _tiny(**kwargs):
    config = dict(image_size=16, patch_size=4, hidden_size=12, num_layers=2, num_heads=2, mlp_dim=8)
    config.update(kwargs)
    return keras_vit.ViT(num_classes=2, **config)


# --- attention rollout ------------------------------------------------------------------------


def test_rollout_of_attention_fixed_on_one_patch_by_hand():
    # Grid 2 x 3; every token attends only to token 3 = patch 2 = grid cell (0, 2). With the
    # residual, one layer gives the class token (1 - r) on it; two give 1 - r^2 (r = 0.5: 0.75).
    tokens = 1 + 6
    one = visualize.attention_rollout([_all_attend_to(3, tokens)], (2, 3))
    two = visualize.attention_rollout([_all_attend_to(3, tokens)] * 2, (2, 3))
    expected_one, expected_two = np.zeros((1, 2, 3)), np.zeros((1, 2, 3))
    expected_one[0, 0, 2], expected_two[0, 0, 2] = 0.5, 0.75
    np.testing.assert_allclose(one, expected_one, atol=1e-12)
    np.testing.assert_allclose(two, expected_two, atol=1e-12)


def test_rollout_residual_weight_changes_the_answer():
    maps = [_all_attend_to(5, 7)] * 2  # patch 4 = cell (1, 1)
    rollout = visualize.attention_rollout(maps, (2, 3), residual_weight=0.25)
    np.testing.assert_allclose(rollout[0, 1, 1], 1 - 0.25**2)
    assert rollout.sum() == pytest.approx(1 - 0.25**2)


def test_rollout_rejects_a_grid_that_does_not_fit():
    with pytest.raises(ValueError, match="does not fit"):
        visualize.attention_rollout([_uniform(1, 1, 7)], (2, 2))


def test_rollout_of_uniform_attention_is_uniform_over_the_grid():
    rollout = visualize.attention_rollout([_uniform(2, 3, 5)] * 3, (2, 2))
    assert rollout.shape == (2, 2, 2)
    np.testing.assert_allclose(rollout, rollout[0, 0, 0])


def test_rollout_without_a_class_token_is_the_mean_over_tokens():
    # 'gap': no prefix; half the tokens attend to patch 0, the others to patch 5 (cell (1, 2)).
    probs = np.zeros((1, 1, 6, 6))
    probs[0, 0, :3, 0] = 1.0
    probs[0, 0, 3:, 5] = 1.0
    rollout = visualize.attention_rollout([probs], (2, 3), num_prefix_tokens=0)[0]
    # Mean over rows of 0.5 * A + 0.5 * I: patch 0 and 5 get 0.25 from A plus 1/12 from I each.
    expected = np.full((2, 3), 0.5 / 6)
    expected[0, 0] += 0.25
    expected[1, 2] += 0.25
    np.testing.assert_allclose(rollout, expected)


# --- mean attention distance -----------------------------------------------------------------


def test_mean_attention_distance_of_one_target_patch_on_a_wide_grid():
    # Grid 2 x 3, patch 16: every patch attends to patch 2 = cell (0, 2). Distances in patches
    # from the six cells to (0, 2): 2, 1, 0, sqrt(5), sqrt(2), 1.
    maps = [_all_attend_to(1 + 2, 7), _all_attend_to(1 + 0, 7)]
    distance = visualize.mean_attention_distance(maps, (2, 3), 16)
    assert distance.shape == (2, 2)
    np.testing.assert_allclose(distance[0], 16 * (4 + np.sqrt(5) + np.sqrt(2)) / 6)
    # To cell (0, 0): 0, 1, 2, 1, sqrt(2), sqrt(5).
    np.testing.assert_allclose(distance[1], 16 * (4 + np.sqrt(2) + np.sqrt(5)) / 6)


def test_mean_attention_distance_uses_each_axis_patch_size():
    # Patches 8 high and 32 wide on a 2 x 2 grid, every patch attending to cell (0, 1).
    distance = visualize.mean_attention_distance([_all_attend_to(2, 5)], (2, 2), (8, 32))
    np.testing.assert_allclose(distance[0], (32 + 0 + np.hypot(8, 32) + 8) / 4)


def test_mean_attention_distance_by_hand():
    self_only = np.broadcast_to(np.eye(5), (1, 2, 5, 5))
    result = visualize.mean_attention_distance([self_only, _uniform(1, 2, 5)], (2, 2), 16)
    np.testing.assert_allclose(result[0], 0.0)
    np.testing.assert_allclose(result[1], (32 + 16 * np.sqrt(2)) / 4)


# --- position embeddings ---------------------------------------------------------------------


def _row_column_embeddings(height, width):
    """Patch (r, c) -> onehot(r) ++ onehot(c): cosine similarity ([r = r'] + [c = c']) / 2."""
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.concatenate([np.eye(height)[rows.ravel()], np.eye(width)[cols.ravel()]], axis=1)


def test_position_similarity_of_hand_set_embeddings_on_a_wide_grid():
    height, width = 2, 3
    model = _tiny(image_size=(8, 12), hidden_size=6)
    layer = model.get_layer("posembed_input")
    posemb = np.zeros((1, 1 + height * width, 6), "float32")
    posemb[0, 0] = 7.0  # the class token's row must be left out
    posemb[0, 1:, :5] = _row_column_embeddings(height, width)
    layer.pos_embedding.assign(posemb)
    similarity = visualize.position_embedding_similarity(model)
    r, c, r2, c2 = np.meshgrid(*[np.arange(n) for n in (height, width, height, width)], indexing="ij")
    np.testing.assert_allclose(similarity, ((r == r2) * 1.0 + (c == c2)) / 2.0, atol=1e-6)


def test_position_similarity_after_a_resize():
    # Embeddings that depend on the column only stay so under any resize: every row alike.
    model = _tiny(image_size=16, hidden_size=4)
    layer = model.get_layer("posembed_input")
    cols = np.tile(np.arange(4), 4).astype("float32")
    posemb = np.stack([np.cos(cols), np.sin(cols), np.ones_like(cols), np.zeros_like(cols)], -1)
    layer.pos_embedding.assign(np.concatenate([np.zeros((1, 1, 4)), posemb[None]], axis=1))
    resized = visualize.position_embedding_similarity(model, (3, 6))
    assert resized.shape == (3, 6, 3, 6)
    np.testing.assert_allclose(resized[:, 2, :, 2], 1.0, atol=1e-6)  # same column, any rows
    np.testing.assert_allclose(resized, resized[0:1, :, 0:1, :].repeat(3, 0).repeat(3, 2), atol=1e-6)
    assert resized[0, 0, 0, 5] < 0.99
    np.testing.assert_allclose(
        visualize.position_embedding_similarity(model, (4, 4)), visualize.position_embedding_similarity(model)
    )


# --- patch-embedding components --------------------------------------------------------------


def test_components_of_filters_along_known_directions():
    # 12 filters of 2 x 2 x 3: multiples of patch `a` (large spread) plus multiples of `b`
    # (small spread), a and b orthonormal: the components are a then b, signs fixed.
    model = _tiny(image_size=8, patch_size=2, hidden_size=12)
    a = np.zeros((2, 2, 3))
    a[0, 1, 0] = 1.0
    b = np.zeros((2, 2, 3))
    b[1, 0, 2] = -1.0
    rng = np.random.default_rng(0)
    big, small = rng.normal(size=12) * 10, rng.normal(size=12)
    big -= big.mean()
    small -= small.mean()
    small -= big * (small @ big) / (big @ big)  # uncorrelated, so the directions are exact
    kernel = a[..., None] * big + b[..., None] * small
    model.get_layer("embedding").kernel.assign(kernel.astype("float32"))
    components, explained = visualize.patch_embedding_components(model, num_components=2)
    assert components.shape == (2, 2, 2, 3)
    np.testing.assert_allclose(components[0], a, atol=1e-5)
    np.testing.assert_allclose(components[1], -b, atol=1e-5)  # largest entry made positive
    np.testing.assert_allclose(explained, [big @ big, small @ small] / (big @ big + small @ small), rtol=1e-5)


def test_hybrid_has_no_rgb_filters():
    model = keras_vit.ViT(
        image_size=32, patch_size=1, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=8,
        num_classes=2, resnet_layers=(1,), resnet_width=1,
    )  # fmt: skip
    with pytest.raises(ValueError, match="not pixels"):
        visualize.patch_embedding_components(model)
    assert visualize.token_stride(model) == (4, 4)


# --- a real model, and the pictures ----------------------------------------------------------


def test_analyse_a_model_at_another_input_size():
    model = _tiny(image_size=(None, None), base_image_size=16)
    images = np.random.default_rng(0).uniform(0, 255, (2, 12, 20, 3)).astype("float32")
    numbers = visualize.analyse(model, images, num_components=5)
    assert numbers["rollout"].shape == (2, 3, 5)
    assert numbers["attention_distance"].shape == (2, 2)
    assert numbers["position_similarity"].shape == (3, 5, 3, 5)
    assert numbers["components"].shape == (5, 4, 4, 3)
    assert np.all(numbers["rollout"] >= 0) and np.all(numbers["rollout"].sum(axis=(1, 2)) <= 1 + 1e-9)


def _png_size_and_spread(figure):
    image = Image.open(io.BytesIO(visualize.png_bytes(figure))).convert("RGB")
    pixels = np.asarray(image, np.float64)
    return image.size, pixels.std(), len(np.unique(pixels.reshape(-1, 3), axis=0))


def _expected_size(figure):
    width, height = figure.get_size_inches() * figure.dpi
    return (round(width), round(height))


@pytest.mark.parametrize(
    "draw",
    [
        lambda: visualize.plot_attention_rollout(
            np.random.default_rng(0).uniform(0, 255, (3, 32, 48, 3)),
            np.random.default_rng(1).uniform(0, 1, (3, 2, 3)),
            16,
            titles=["a", "b", "c"],
        ),
        lambda: visualize.plot_mean_attention_distance(
            np.random.default_rng(0).uniform(0, 100, (12, 12)), image_size=(224, 224)
        ),
        lambda: visualize.plot_position_embedding_similarity(
            visualize.embedding_similarity(np.random.default_rng(0).normal(size=(35, 8)), (5, 7))
        ),
        lambda: visualize.plot_patch_embedding_components(
            np.random.default_rng(0).normal(size=(28, 16, 16, 3)), np.linspace(0.3, 0.01, 28)
        ),
        lambda: visualize.plot_accuracy_by_shots(
            {"cifar10": {1: 0.3, 5: 0.5, 10: 0.6}, "pets": {1: 0.2, 5: 0.4, 10: 0.45}},
            std={"cifar10": {1: 0.05, 5: 0.02, 10: 0.01}},
        ),
    ],
    ids=["rollout", "distance", "similarity", "components", "shots"],
)
def test_each_figure_renders_a_png_of_its_size_that_is_not_blank(draw):
    figure = draw()
    size, spread, colours = _png_size_and_spread(figure)
    assert size == _expected_size(figure)
    assert spread > 10 and colours > 50
