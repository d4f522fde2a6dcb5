"""Tests of keras_vit.visualize on attention patterns whose answer is known by hand."""

import numpy as np
import pytest

import keras_vit
from keras_vit import visualize


def _uniform(batch, heads, tokens):
    return np.full((batch, heads, tokens, tokens), 1.0 / tokens)


def test_rollout_of_uniform_attention_is_uniform_over_the_grid():
    maps = [_uniform(2, 3, 5)] * 3
    rollout = visualize.attention_rollout(maps, (2, 2))
    assert rollout.shape == (2, 2, 2)
    np.testing.assert_allclose(rollout, rollout[0, 0, 0])
    assert 0 < rollout.sum(axis=(1, 2))[0] < 1


def test_rollout_follows_attention_through_the_layers():
    tokens = 5
    # Layer 1: every token attends to patch 3; layer 2: the class token attends to patch 1,
    # which (through layer 1) carries patch 3 and itself.
    first = np.zeros((1, 1, tokens, tokens))
    first[..., :, 3] = 1.0
    second = np.zeros((1, 1, tokens, tokens))
    second[..., 0, 1] = 1.0
    second[..., 1:, :] = np.eye(tokens)[1:]
    rollout = visualize.attention_rollout([first, second], (2, 2))[0]
    assert rollout.argmax() == 2  # patch 3 is grid position 2 (token 0 is the class token)
    assert rollout[0, 0] > 0  # patch 1 through the residual


def test_rollout_needs_a_class_token():
    with pytest.raises(ValueError, match="class token"):
        visualize.attention_rollout([_uniform(1, 1, 4)], (2, 2), num_prefix_tokens=0)


def test_mean_attention_distance_by_hand():
    tokens = 5  # class token + 2 x 2 grid, patch 16
    self_only = np.broadcast_to(np.eye(tokens), (1, 2, tokens, tokens))
    uniform = _uniform(1, 2, tokens)
    result = visualize.mean_attention_distance([self_only, uniform], (2, 2), 16)
    assert result.shape == (2, 2)
    np.testing.assert_allclose(result[0], 0.0)
    # From any patch of a 2 x 2 grid: distances 0, 16, 16, 16 * sqrt(2), each weighted 1/4.
    np.testing.assert_allclose(result[1], (32 + 16 * np.sqrt(2)) / 4)


def test_position_embedding_similarity_of_a_model():
    model = keras_vit.ViT(
        image_size=16, patch_size=4, hidden_size=12, num_layers=1, num_heads=2, mlp_dim=8, num_classes=2
    )
    similarity = visualize.position_embedding_similarity(model)
    assert similarity.shape == (4, 4, 4, 4)
    np.testing.assert_allclose(similarity[1, 2, 1, 2], 1.0, atol=1e-6)
    np.testing.assert_allclose(similarity, similarity.transpose(2, 3, 0, 1), atol=1e-6)


def test_maps_of_a_real_model_feed_the_analysis():
    model = keras_vit.ViT(
        image_size=16, patch_size=4, hidden_size=12, num_layers=2, num_heads=2, mlp_dim=8, num_classes=2
    )
    maps = model.attention_maps(np.random.default_rng(0).uniform(0, 255, (2, 16, 16, 3)))
    assert visualize.attention_rollout(maps, model.grid_size).shape == (2, 4, 4)
    assert visualize.mean_attention_distance(maps, model.grid_size, 4).shape == (2, 2)
