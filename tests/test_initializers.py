"""A model built with weights=None starts as the official Flax code's does, with the same
values on every backend.

These tests read the weights as built, never randomised: vit_jax/models_vit.py and
models_resnet.py are the reference (Xavier-uniform with DenseGeneral's fans, LeCun truncated
normal convs and pre-logits, N(0, 0.02) position embeddings, N(0, 1e-6) MLP biases, zeros
and ones elsewhere). tests/test_backends.py holds the seeded builds of JAX and PyTorch to
TensorFlow's, tests/test_engines.py the two engines' runs from --weights=none.
"""

import collections
import hashlib
import math
import random

import keras
import numpy as np
import pytest
from fixtures import DISTINCT, tiny_hybrid

import keras_vit
from keras_vit import initializers, layers, masked_patches

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


@pytest.mark.parametrize(
    "original",
    [
        initializers.XavierUniform(num_input_axes=2, seed=3),
        initializers.LecunNormal(num_input_axes=2, seed=3),
        initializers.RandomNormal(0.5, 0.02, seed=3),
        initializers.TruncatedNormal(0.0, 0.02, seed=3),
        initializers.RandomUniform(-1.0, 2.0, seed=3),
    ],
    ids=lambda initializer: type(initializer).__name__,
)
def test_initializer_round_trips_through_a_safe_config(original):
    cls = type(original)
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


def _seeded_build(seed, num_layers=2):
    """A plain model with pre-logits and its masked patch predictor ([mask] embedding) under
    seeded(`seed`): {path: values}."""
    with initializers.seeded(seed):
        model = keras_vit.ViT(
            image_size=16,
            include_preprocessing=False,
            representation_size=8,
            **dict(DISTINCT, num_layers=num_layers),
        )
        predictor = masked_patches.MaskedPatchPredictor(model)
    return {v.path: np.asarray(v) for v in [*model.weights, *predictor.trainable_variables]}


def test_seeded_builds_repeat_whatever_was_drawn_before_and_another_seed_differs():
    first = _seeded_build(3)
    random.random()  # Python's random moved on, and another model was built meanwhile
    keras_vit.ViT(**DISTINCT)
    again, other = _seeded_build(3), _seeded_build(4)
    assert "patch_corruption/mask_embedding" in first
    for path, value in first.items():
        np.testing.assert_array_equal(again[path], value, err_msg=path)
        if _design_constant(path) is None and path != "masked_patch_head/kernel":  # the head starts at zero
            assert not np.array_equal(other[path], value), f"{path} ignores the seed"
    _assert_no_two_alike({path: value for path, value in first.items() if value.std() > 0})


def test_a_seeded_weight_is_numpys_draw_from_the_seed_and_its_path():
    """What makes the values the same on every backend: NumPy's PCG64 Generator, seeded with the
    seed and a hash of the layer's path and the weight's rank in it (kernel 0, bias 1)."""
    weights = _seeded_build(3)

    def generator(path, rank):
        digest = hashlib.sha256(f"{path}#{rank}".encode()).digest()
        words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([3, *words])))

    kernel = weights[MLP + "Dense_0/kernel"]
    limit = math.sqrt(6 / (24 + 48))
    expected = generator(MLP.rstrip("/") + "/Dense_0", 0).uniform(-limit, limit, (24, 48)).astype("float32")
    np.testing.assert_array_equal(kernel, expected)
    bias = generator(MLP.rstrip("/") + "/Dense_0", 1).standard_normal(48, dtype=np.float32) * np.float32(1e-6)
    np.testing.assert_array_equal(weights[MLP + "Dense_0/bias"], bias)


def test_adding_a_layer_moves_no_other_layers_start():
    two, three = _seeded_build(3, num_layers=2), _seeded_build(3, num_layers=3)
    assert set(two) < set(three)
    for path, value in two.items():
        np.testing.assert_array_equal(three[path], value, err_msg=path)


_XAVIER_LIMIT = math.sqrt(6 / (64 + 256))  # a (64, 8, 32) attention kernel: 64 in, 256 out
_LECUN_BOUND = 2 * math.sqrt(1 / 64) / initializers.TRUNCATED_NORMAL_STDDEV


@pytest.mark.parametrize(
    "ours, keras_own, shape, bounds",
    [
        (initializers.RandomNormal(0.1, 0.02), keras.initializers.RandomNormal(0.1, 0.02), (400, 500), None),
        (
            initializers.TruncatedNormal(0.0, 0.02),
            keras.initializers.TruncatedNormal(0.0, 0.02),
            (400, 500),
            (-0.04, 0.04),
        ),
        (
            initializers.RandomUniform(-0.3, 0.5),
            keras.initializers.RandomUniform(-0.3, 0.5),
            (400, 500),
            (-0.3, 0.5),
        ),
        # Keras' VarianceScaling on the kernel read as a (64, 256) matrix: the Flax fans.
        (
            initializers.XavierUniform(num_input_axes=1),
            keras.initializers.VarianceScaling(1.0, "fan_avg", "uniform"),
            (64, 8, 32),
            (-_XAVIER_LIMIT, _XAVIER_LIMIT),
        ),
        (
            initializers.LecunNormal(num_input_axes=1),
            keras.initializers.VarianceScaling(1.0, "fan_in", "truncated_normal"),
            (64, 8, 32),
            (-_LECUN_BOUND, _LECUN_BOUND),
        ),
    ],
    ids=["RandomNormal", "TruncatedNormal", "RandomUniform", "XavierUniform", "LecunNormal"],
)
def test_numpy_draws_keep_each_initializers_distribution(ours, keras_own, shape, bounds):
    """Mean, standard deviation and range of NumPy's draws (seeded and not) against the
    backend's own initialiser of the same distribution."""
    with initializers.seeded(0):
        seeded = np.asarray(ours(shape), np.float64).ravel()
    drawn = np.asarray(ours(shape), np.float64).ravel()
    reference = np.asarray(keras_own((shape[0], math.prod(shape[1:]))), np.float64).ravel()
    spread = reference.std()
    for values in (seeded, drawn):
        assert abs(values.mean() - reference.mean()) < 6 * spread * math.sqrt(2 / values.size)
        assert abs(values.std() / spread - 1) < _tolerance(values.size)
        if bounds is None:  # a plain normal: tails beyond 3.5 standard deviations
            assert np.abs(values - values.mean()).max() > 3.5 * spread
        else:  # the whole range, and nothing beyond it
            low, high = bounds
            assert low - 1e-7 <= values.min() < low + 0.01 * (high - low)
            assert high - 0.01 * (high - low) < values.max() <= high + 1e-7


def test_for_weight_draws_keras_random_initializers_with_numpy():
    for keras_own, cls in [
        (keras.initializers.RandomNormal(stddev=0.02), initializers.RandomNormal),
        (keras.initializers.TruncatedNormal(stddev=0.02), initializers.TruncatedNormal),
        (keras.initializers.RandomUniform(-1.0, 1.0), initializers.RandomUniform),
    ]:
        drawn = initializers.for_weight(keras_own)
        assert type(drawn) is cls
        assert drawn.get_config() == keras_own.get_config()
    explicit = initializers.for_weight(keras.initializers.RandomNormal(stddev=0.02, seed=5))
    np.testing.assert_array_equal(explicit((8, 8)), initializers.RandomNormal(stddev=0.02, seed=5)((8, 8)))
    with initializers.seeded(1):  # an explicit seed wins over the scope's
        np.testing.assert_array_equal(
            explicit((8, 8)), initializers.RandomNormal(stddev=0.02, seed=5)((8, 8))
        )


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3"])
def test_seeded_refuses_what_is_not_a_seed(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        with initializers.seeded(seed):
            pass
