"""The NumPy reference itself: it reproduces the fixtures and its ResNet primitives match XLA."""

import os

import numpy as np
import pytest
import reference_numpy

# ../shared sits beside the repository (the project layout), never at a fixed absolute path.
FIXTURES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "shared", "fixtures"
)


@pytest.mark.parametrize("size, grid", [(32, None), (64, (8, 8))])
def test_reference_reproduces_fixture_logits(size, grid):
    params = dict(np.load(f"{FIXTURES}/tiny_vit_vit_jax_layout.npz", allow_pickle=False))
    outputs = np.load(f"{FIXTURES}/tiny_vit_reference_outputs.npz", allow_pickle=False)
    logits = reference_numpy.vit_forward(params, outputs[f"x_{size}_nhwc"], num_heads=3, resize_to_grid=grid)
    np.testing.assert_allclose(logits, outputs[f"logits_{size}"], atol=1e-5, rtol=0)


def test_resnet_primitives_match_xla_same_padding():
    jax = pytest.importorskip("jax")
    from jax import lax

    rng = np.random.default_rng(0)
    for size, k, stride in [(15, 7, 2), (16, 7, 2), (9, 3, 2), (8, 3, 1), (7, 1, 2)]:
        x = rng.standard_normal((2, size, size + 1, 4))
        w = rng.standard_normal((k, k, 4, 5))
        expected = lax.conv_general_dilated(
            x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        np.testing.assert_allclose(reference_numpy.conv2d_same(x, w, stride), expected, atol=1e-4)
        pooled = lax.reduce_window(x, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        np.testing.assert_allclose(reference_numpy.max_pool_same(x), pooled)
    del jax


def test_weight_standardisation_is_vit_jax_std_plus_eps():
    w = np.random.default_rng(1).standard_normal((3, 3, 8, 4)) * 0.01
    out = reference_numpy.standardize(w)
    centred = w - w.mean(axis=(0, 1, 2))
    np.testing.assert_allclose(out, centred / (centred.std(axis=(0, 1, 2)) + 1e-5))
    np.testing.assert_allclose(out.mean(axis=(0, 1, 2)), 0, atol=1e-12)


def test_group_norm_normalises_each_group():
    x = np.random.default_rng(2).standard_normal((1, 4, 4, 64)) * 3 + 1
    y = reference_numpy.group_norm(x, np.ones(64), np.zeros(64))
    groups = y.reshape(1, 4, 4, 32, 2)
    np.testing.assert_allclose(groups.mean(axis=(1, 2, 4)), 0, atol=1e-9)
    np.testing.assert_allclose(groups.var(axis=(1, 2, 4)), 1, atol=1e-5)
