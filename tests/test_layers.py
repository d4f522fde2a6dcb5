"""Unit tests of keras_vit.layers and keras_vit.resnet: shapes, configs, training."""

import inspect

import keras
import numpy as np
import pytest
import scipy.ndimage
import tensorflow as tf

from keras_vit import layers, resnet

# (factory, input shape, expected output shape)
CASES = {
    "PatchEmbedding": (lambda: layers.PatchEmbedding(4, 24), (2, 16, 12, 3), (2, 12, 24)),
    "ClassToken": (lambda: layers.ClassToken(), (2, 12, 24), (2, 13, 24)),
    "PositionEmbedding": (lambda: layers.PositionEmbedding((4, 3), 1), (2, 13, 24), (2, 13, 24)),
    "PositionEmbedding-any-size": (
        lambda: layers.PositionEmbedding((4, 3), 1, patch_size=(4, 2)),
        (2, 13, 24),
        (2, 13, 24),
    ),
    "MultiHeadSelfAttention": (
        lambda: layers.MultiHeadSelfAttention(3, dropout_rate=0.1),
        (2, 13, 24),
        (2, 13, 24),
    ),
    "MlpBlock": (lambda: layers.MlpBlock(48, dropout_rate=0.1), (2, 13, 24), (2, 13, 24)),
    "EncoderBlock": (lambda: layers.EncoderBlock(3, 48, 0.1, 0.1, 0.1), (2, 13, 24), (2, 13, 24)),
    "TokenPooling": (lambda: layers.TokenPooling("gap", 1), (2, 13, 24), (2, 24)),
    "StdConv2D": (lambda: resnet.StdConv2D(32, 3, 2), (2, 9, 9, 8), (2, 5, 5, 32)),
    "ResidualUnit": (lambda: resnet.ResidualUnit(32, 2), (2, 8, 8, 64), (2, 4, 4, 128)),
    "ResNetStage": (lambda: resnet.ResNetStage(2, 32, 2), (2, 8, 8, 64), (2, 4, 4, 128)),
}


def _inputs(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_shape(name):
    factory, in_shape, out_shape = CASES[name]
    layer = factory()
    assert tuple(layer(_inputs(in_shape)).shape) == out_shape
    assert tuple(layer.compute_output_shape(in_shape)) == out_shape


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_keys_are_init_arguments(name):
    factory, _, _ = CASES[name]
    layer = factory()
    params = set(inspect.signature(type(layer).__init__).parameters) - {"self", "kwargs"}
    base = {"name", "trainable", "dtype"}
    assert set(layer.get_config()) - base == params


@pytest.mark.parametrize("name", sorted(CASES))
def test_from_config_round_trip(name):
    factory, in_shape, _ = CASES[name]
    layer = factory()
    x = _inputs(in_shape)
    expected = layer(x)
    config = keras.saving.serialize_keras_object(layer)
    clone = keras.saving.deserialize_keras_object(config, safe_mode=True)
    if not clone.built:
        clone.build(in_shape)
    clone.set_weights(layer.get_weights())
    assert clone.get_config() == layer.get_config()
    np.testing.assert_allclose(clone(x), expected, atol=1e-6)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"TokenPooling"}))
def test_training_step_reduces_loss(name):
    factory, in_shape, _ = CASES[name]
    layer = factory()
    x = tf.constant(_inputs(in_shape))
    layer(x)
    target = tf.constant(_inputs(layer(x).shape, seed=1))
    optimizer = keras.optimizers.SGD(0.05)

    def loss():
        return tf.reduce_mean((layer(x, training=False) - target) ** 2)

    before = float(loss())
    for _ in range(3):
        with tf.GradientTape() as tape:
            value = tf.reduce_mean((layer(x) - target) ** 2)
        grads = tape.gradient(value, layer.trainable_weights)
        assert all(g is not None for g in grads)
        optimizer.apply_gradients(zip(grads, layer.trainable_weights))
    assert float(loss()) < before


def test_attention_probabilities_are_returned_and_match_fused_path():
    layer = layers.MultiHeadSelfAttention(4)
    x = _inputs((2, 7, 16))
    fused = layer(x)
    explicit, probs = layer(x, return_attention_scores=True)
    assert tuple(probs.shape) == (2, 4, 7, 7)
    np.testing.assert_allclose(np.sum(probs, axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(explicit, fused, atol=1e-5)


class _SelfOnlyAttention(layers.MultiHeadSelfAttention):
    """A position bias that leaves each token attending to itself only."""

    def position_bias(self, query):
        length = query.shape[1]
        return (1.0 - np.eye(length, dtype="float32"))[None, None] * -1e4


def test_position_bias_reaches_the_fused_and_the_explicit_path():
    layer = _SelfOnlyAttention(4)
    x = _inputs((2, 7, 16))
    fused = layer(x)
    explicit, probs = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(probs, np.broadcast_to(np.eye(7), (2, 4, 7, 7)), atol=1e-6)
    # Attending only to itself, each token's context is its own value vector.
    expected = layer.out(layer.value(x))
    np.testing.assert_allclose(fused, expected, atol=1e-5)
    np.testing.assert_allclose(explicit, expected, atol=1e-5)
    assert layers.MultiHeadSelfAttention(4).position_bias(None) is None


def test_attention_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="not divisible by 5 heads"):
        layers.MultiHeadSelfAttention(5)(_inputs((1, 3, 16)))


def test_gelu_is_the_tanh_approximation():
    layer = layers.MlpBlock(8)
    x = _inputs((1, 2, 4))
    layer(x)
    w0, b0 = layer.dense_0.kernel.numpy(), layer.dense_0.bias.numpy()
    w1, b1 = layer.dense_1.kernel.numpy(), layer.dense_1.bias.numpy()
    h = x @ w0 + b0
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    np.testing.assert_allclose(layer(x), h @ w1 + b1, atol=1e-5)


def test_the_mlp_gives_every_token_its_own_output_in_inference_and_training_alike():
    # Inference runs the MLP on the tokens flattened to 2-D, training on (B, T, D): the same
    # numbers up to float rounding, each token's row mapped to its own place (a mixed-up
    # reshape would move them), in a traced graph too, with batch and token count known only
    # at run time.
    layer = layers.MlpBlock(16)
    x = _inputs((3, 5, 8))
    per_token = np.stack([layer(x[:, t : t + 1])[:, 0] for t in range(5)], axis=1)
    np.testing.assert_allclose(layer(x, training=False), layer(x, training=True), atol=1e-6)
    np.testing.assert_allclose(layer(x), per_token, atol=1e-6)
    traced = tf.function(lambda t: layer(t), input_signature=[tf.TensorSpec((None, None, 8))])
    np.testing.assert_allclose(traced(x), layer(x, training=True), atol=1e-6)
    assert traced(_inputs((2, 7, 8))).shape == (2, 7, 8)


def test_attention_projects_the_flattened_tokens_in_inference_as_its_einsums_do():
    # Inference runs the query/key/value/output projections as 2-D matmuls of the layer's own
    # kernels (keras_vit.flat_tokens), training as EinsumDense: the same numbers to float
    # rounding. Random biases and a head count that does not divide into a square make a
    # transposed kernel reshape or a dropped bias visible; tokens known only at run time too.
    layer = layers.MultiHeadSelfAttention(3)
    x = _inputs((2, 5, 12))
    layer.build(x.shape)
    for i, weight in enumerate(layer.weights):
        weight.assign(_inputs(weight.shape, seed=i + 1) * 0.3)
    np.testing.assert_allclose(layer(x, training=False), layer(x, training=True), atol=1e-5)
    traced = tf.function(lambda t: layer(t), input_signature=[tf.TensorSpec((None, None, 12))])
    np.testing.assert_allclose(traced(x), layer(x, training=True), atol=1e-5)
    assert traced(_inputs((3, 7, 12))).shape == (3, 7, 12)
    # Under mixed_bfloat16 the products run in bfloat16 both ways.
    mixed = layers.MultiHeadSelfAttention(3, dtype="mixed_bfloat16")
    mixed.build(x.shape)
    mixed.set_weights(layer.get_weights())
    flat, einsum = mixed(x, training=False), mixed(x, training=True)
    assert flat.dtype == einsum.dtype == "bfloat16"
    np.testing.assert_allclose(np.float32(flat), np.float32(einsum), atol=3e-2)


def test_stochastic_depth_drops_whole_examples_only_in_training():
    block = layers.EncoderBlock(2, 8, stochastic_depth_rate=0.5)
    x = _inputs((64, 3, 8))
    np.testing.assert_allclose(block(x), block(x, training=False))
    trained = block(x, training=True).numpy()
    # An example whose two residual branches are both dropped (p = 1/4) passes unchanged;
    # the others do not.
    unchanged = np.abs(trained - x).reshape(64, -1).max(axis=1) == 0
    assert 0 < unchanged.sum() < 64


@pytest.mark.parametrize("old,new", [((4, 4), (8, 8)), ((3, 5), (7, 2)), ((6, 6), (4, 4)), ((2, 2), (2, 2))])
def test_position_embedding_resize_matches_scipy_zoom(old, new):
    dim = 5
    posemb = _inputs((1, 1 + old[0] * old[1], dim))
    resized = np.asarray(layers.resize_position_embedding(posemb, old, new, 1))
    grid = posemb[0, 1:].reshape(old[0], old[1], dim)
    zoom = (new[0] / old[0], new[1] / old[1], 1)
    expected = scipy.ndimage.zoom(grid, zoom, order=1).reshape(1, -1, dim)
    assert resized.shape == (1, 1 + new[0] * new[1], dim)
    np.testing.assert_array_equal(resized[:, :1], posemb[:, :1])
    np.testing.assert_allclose(resized[:, 1:], expected, atol=1e-6)


def test_position_embedding_layer_resize_and_length_check():
    layer = layers.PositionEmbedding((2, 2))
    layer.build((None, 5, 3))
    assert tuple(layer.resize((3, 3)).shape) == (1, 10, 3)
    with pytest.raises(ValueError, match="expects 5 tokens"):
        layers.PositionEmbedding((2, 2)).build((None, 7, 3))


def _zoomed(posemb, old, new):
    """The loader's resize, written with scipy: the patch grid zoomed, the class row kept."""
    grid = posemb[0, 1:].reshape(old[0], old[1], -1)
    zoom = (new[0] / old[0], new[1] / old[1], 1)
    rows = scipy.ndimage.zoom(grid, zoom, order=1).reshape(1, new[0] * new[1], -1)
    return np.concatenate([posemb[:, :1], rows], axis=1)


def test_position_embedding_follows_the_grid_of_its_patch_input():
    layer = layers.PositionEmbedding((3, 5), 1, patch_size=4)
    # floor(10 / 4) x floor(30 / 4) = 2 x 7: a partial patch is dropped, as the VALID conv does.
    tokens = _inputs((2, 1 + 2 * 7, 6))
    out = layer(tokens, _inputs((2, 10, 30, 3)))
    posemb = layer.pos_embedding.numpy()
    np.testing.assert_allclose(out, tokens + _zoomed(posemb, (3, 5), (2, 7)), atol=1e-6)
    own = _inputs((2, 16, 6))
    np.testing.assert_array_equal(layer(own, _inputs((2, 12, 20, 3))), own + posemb)
    # The same token count on the transposed grid is a different embedding.
    transposed = layer(_inputs((2, 1 + 7 * 2, 6)), _inputs((2, 28, 8, 3)))
    assert np.abs(np.asarray(transposed) - np.asarray(out)).max() > 1e-3


def test_position_embedding_resizes_to_sizes_known_only_at_run_time():
    layer = layers.PositionEmbedding((3, 5), 1, patch_size=(4, 2))
    layer.build((None, None, 6))
    traced = tf.function(
        layer,
        input_signature=[
            tf.TensorSpec((None, None, 6), tf.float32),
            tf.TensorSpec((None, None, None, 3), tf.float32),
        ],
    )
    # Another grid, the stored one, and a single patch.
    for height, width in ((10, 30), (12, 10), (4, 2)):
        grid = (height // 4, width // 2)
        tokens = _inputs((2, 1 + grid[0] * grid[1], 6), seed=height)
        patch_input = _inputs((2, height, width, 3))
        expected = tokens + _zoomed(layer.pos_embedding.numpy(), (3, 5), grid)
        np.testing.assert_allclose(traced(tokens, patch_input), expected, atol=1e-6)


def test_position_embedding_errors_name_the_grid():
    layer = layers.PositionEmbedding((2, 2), 1, patch_size=4)
    with pytest.raises(ValueError, match="smaller than one 4 x 4 patch"):
        layer(_inputs((1, 1, 3)), _inputs((1, 3, 8, 3)))
    fixed = layers.PositionEmbedding((2, 2), 1)
    fixed.build((None, None, 3))
    with pytest.raises(ValueError, match="expects 5 tokens, got 7"):
        fixed(_inputs((1, 7, 3)))
    with pytest.raises(ValueError, match="fixed grid"):
        fixed(_inputs((1, 5, 3)), _inputs((1, 8, 8, 3)))


def test_std_conv_standardises_its_kernel():
    conv = resnet.StdConv2D(4, 1)
    x = _inputs((1, 3, 3, 6))
    conv(x)
    kernel = conv.kernel.numpy()[0, 0]
    w = (kernel - kernel.mean(axis=0)) / (kernel.std(axis=0) + 1e-5)
    np.testing.assert_allclose(conv(x), x @ w, atol=1e-4)
    # Scaling and shifting the raw kernel per output channel changes (almost) nothing.
    before = conv(x).numpy()
    conv.kernel.assign(conv.kernel.numpy() * 10.0 + 3.0)
    np.testing.assert_allclose(conv(x), before, atol=1e-3)
