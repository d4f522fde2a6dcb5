"""A model built with weights=None starts as the official Flax code's does.

These tests read the weights as built, never randomised: vit_jax/models_vit.py and
models_resnet.py are the reference (Xavier-uniform with DenseGeneral's fans, LeCun truncated
normal convs and pre-logits, N(0, 0.02) position embeddings, N(0, 1e-6) MLP biases, zeros
and ones elsewhere).
"""

import collections
import math

import keras
import numpy as np
import pytest
from fixtures import tiny_hybrid

import keras_vit
from keras_vit import initializers, layers

# ViT-B/16's encoder widths: sampling noise of a 768 x 12 x 64 kernel's variance is ~0.2%,
# far below the gap between the Flax fans and Keras' convolution-style 3-D fans.
BASE_ONE_BLOCK = dict(
    image_size=224,
    patch_size=16,
    hidden_size=768,
    num_layers=1,
    num_heads=12,
    mlp_dim=3072,
    num_classes=10,
    representation_size=512,
)
ATTENTION = "encoderblock_0/MultiHeadDotProductAttention_1/"
MLP = "encoderblock_0/MlpBlock_3/"


def _design_constant(path):
    """The value a weight starts at by design (all of it), or None for a random weight."""
    if "/MlpBlock_3/" in path and path.endswith("/bias"):
        return None  # normal(1e-6)
    if path.endswith("/gamma"):  # LayerNorm and GroupNorm scales; gn3 starts each unit as identity
        return 0.0 if "/gn3/" in path else 1.0
    if path.endswith(("/beta", "/bias")) or path.startswith(("cls/", "head/")):
        return 0.0
    return None


def _hybrid():
    """tests/fixtures.py's tiny hybrid with two blocks and pre-logits: every kind of weight, twice."""
    return tiny_hybrid(num_layers=2, num_classes=3, representation_size=8)


def _weights(model):
    return {v.path: np.asarray(v) for v in model.weights}


def _random_weights(model, tag):
    return {
        f"{tag}:{path}": value for path, value in _weights(model).items() if _design_constant(path) is None
    }


def _assert_no_two_alike(weights):
    """No two weights hold the same values in any order, nor linearly related leading values."""
    by_size = collections.defaultdict(list)
    for name, value in weights.items():
        by_size[value.size].append((name, np.sort(value, axis=None)))
    for group in by_size.values():
        for index, (name, values) in enumerate(group):
            for other, other_values in group[index + 1 :]:
                assert not np.array_equal(values, other_values), f"{name} and {other} hold the same values"
    # Same seed, different shapes: the leading draws coincide up to scale. 256 independent
    # values correlate with |r| ~ 0.06, so 0.5 is ~8 standard deviations.
    names = sorted(n for n, v in weights.items() if v.size >= 256)
    leading = np.stack([weights[n].ravel()[:256].astype(np.float64) for n in names])
    correlation = np.abs(np.corrcoef(leading))
    np.fill_diagonal(correlation, 0.0)
    first, second = np.unravel_index(correlation.argmax(), correlation.shape)
    assert correlation[first, second] < 0.5, f"{names[first]} and {names[second]} are correlated"


def test_constant_weights_start_at_their_official_values_and_the_rest_is_random():
    model = _hybrid()
    for path, value in _weights(model).items():
        constant = _design_constant(path)
        if constant is None:
            assert value.std() > 0, f"{path} should be random"
        else:
            np.testing.assert_array_equal(value, constant, err_msg=path)
    assert "block1/unit1/gn3/gamma" in _weights(model)  # the zero-initialised GroupNorm exists


def test_vit_ti16_weights_are_all_drawn_independently_within_and_across_models():
    first = keras_vit.ViT_Ti16()
    second = keras_vit.ViT_Ti16()
    weights = {**_random_weights(first, "first"), **_random_weights(second, "second")}
    assert len(weights) == 2 * (2 + 12 * 8)  # embedding, pos-emb; q k v out, 2 MLP kernels and biases
    _assert_no_two_alike(weights)


def test_hybrid_weights_are_all_drawn_independently_within_and_across_models():
    weights = {
        **_random_weights(_hybrid(), "first"),
        **_random_weights(_hybrid(), "second"),
    }
    assert sum("conv" in name for name in weights) == 2 * 9  # conv_root and 8 unit convs
    _assert_no_two_alike(weights)


def _keras_conv_style_fans(shape):
    """Keras' fans for a kernel of rank > 2: the leading axes count as a receptive field."""
    receptive_field = math.prod(shape[:-2])
    return shape[-2] * receptive_field, shape[-1] * receptive_field


def _tolerance(size):
    # Six standard errors of a variance estimate (at most sqrt(2 / n) relative, for normals).
    return 6 * math.sqrt(2 / size)


def _assert_variance(value, expected, name):
    relative = value.var() / expected - 1
    assert abs(relative) < _tolerance(value.size), f"{name}: variance {value.var():.3g}, Flax {expected:.3g}"


def test_kernel_variances_follow_the_flax_formulas_not_keras_fans():
    keras.utils.set_random_seed(0)
    weights = _weights(keras_vit.ViT(**BASE_ONE_BLOCK))
    for name, input_axes in [("query", 1), ("key", 1), ("value", 1), ("out", 2)]:
        kernel = weights[ATTENTION + name + "/kernel"]
        fan_in = math.prod(kernel.shape[:input_axes])
        fan_out = math.prod(kernel.shape[input_axes:])
        assert (fan_in, fan_out) == (768, 768)
        expected = 2 / (fan_in + fan_out)
        _assert_variance(kernel, expected, name)
        wrong = 2 / sum(_keras_conv_style_fans(kernel.shape))
        assert abs(wrong / expected - 1) > 10 * _tolerance(kernel.size)
        assert np.abs(kernel).max() <= math.sqrt(3 * expected) + 1e-7  # uniform on +-sqrt(3 var)
    for name in ("Dense_0", "Dense_1"):
        _assert_variance(weights[MLP + name + "/kernel"], 2 / (768 + 3072), name)
        _assert_variance(weights[MLP + name + "/bias"], 1e-12, name + " bias")
    position = weights["posembed_input/pos_embedding"]
    _assert_variance(position, 0.02**2, "pos_embedding")
    assert np.abs(position).max() > 2.5 * 0.02  # a plain normal, not a truncated one
    # Keras' Dense default (glorot_uniform, 2 / (768 + 512)) would be 20% off for pre_logits.
    for path, fan_in in [("embedding/kernel", 16 * 16 * 3), ("pre_logits/kernel", 768)]:
        _assert_lecun_normal(weights[path], fan_in, path)


def _assert_lecun_normal(kernel, fan_in, name):
    _assert_variance(kernel, 1 / fan_in, name)
    # Truncated at two standard deviations of the untruncated normal.
    bound = 2 * math.sqrt(1 / fan_in) / initializers.TRUNCATED_NORMAL_STDDEV
    assert np.abs(kernel).max() <= bound * (1 + 1e-6), f"{name} is not truncated"


def test_hybrid_convolutions_are_lecun_normal_as_flax_conv():
    keras.utils.set_random_seed(0)
    weights = _weights(_hybrid())
    for path in ("conv_root/kernel", "block2/unit1/conv2/kernel", "block2/unit1/conv_proj/kernel"):
        kernel = weights[path]
        _assert_lecun_normal(kernel, math.prod(kernel.shape[:3]), path)


def test_set_random_seed_makes_builds_repeat_and_different_seeds_differ():
    def build(seed):
        keras.utils.set_random_seed(seed)
        return _weights(_hybrid())

    first, again, other = build(7), build(7), build(8)
    for path, value in first.items():
        np.testing.assert_array_equal(again[path], value, err_msg=path)
        if _design_constant(path) is None:
            assert not np.array_equal(other[path], value), f"{path} ignores the seed"


@pytest.mark.parametrize(
    "shape, num_input_axes, fans",
    [
        ((768, 12, 64), 1, (768, 768)),
        ((12, 64, 768), 2, (768, 768)),
        ((16, 16, 3, 192), 3, (768, 192)),
        ((192, 768), None, (192, 768)),
    ],
)
def test_kernel_fans_read_the_kernel_as_a_matrix(shape, num_input_axes, fans):
    assert initializers.kernel_fans(shape, num_input_axes) == fans


def test_kernel_fans_reject_impossible_input_axes():
    with pytest.raises(ValueError, match="num_input_axes"):
        initializers.kernel_fans((4, 4), 2)


@pytest.mark.parametrize("cls", [initializers.XavierUniform, initializers.LecunNormal])
def test_initializer_round_trips_through_a_safe_config(cls):
    original = cls(num_input_axes=2, seed=3)
    config = keras.saving.serialize_keras_object(original)
    clone = keras.saving.deserialize_keras_object(config, safe_mode=True)
    assert type(clone) is cls and clone.get_config() == original.get_config()
    np.testing.assert_array_equal(clone((4, 5, 6)), original((4, 5, 6)))


def test_for_weight_gives_each_weight_its_own_draw_and_keeps_an_explicit_seed():
    shared = initializers.XavierUniform()
    first, second = initializers.for_weight(shared, 1), initializers.for_weight(shared, 1)
    assert not np.array_equal(first((8, 8)), second((8, 8)))
    assert initializers.for_weight(shared, 2).num_input_axes == 2
    seeded = initializers.XavierUniform(seed=5)
    np.testing.assert_array_equal(initializers.for_weight(seeded)((8, 8)), seeded((8, 8)))


def test_a_user_kernel_initializer_is_told_each_attention_kernels_axes():
    attention = layers.MultiHeadSelfAttention(12, kernel_initializer=initializers.XavierUniform())
    attention.build((None, 5, 768))
    for kernel in (attention.query.kernel, attention.out.kernel):
        # 768 in, 768 out for both layouts; Keras' 3-D fans would give ~38x or ~6.5x less.
        _assert_variance(np.asarray(kernel), 2 / (768 + 768), kernel.path)
