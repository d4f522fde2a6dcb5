"""The hybrid variants (a BiT ResNet stem under the ViT): names, registry files, exact logits.

Stems of any number of stages, none included: R+ViT-Ti/16 is the root alone with 8x8 patches,
R26+ViT-S/32 four stages of two units, R50+ViT-L/32 ResNet-50's four stages.
"""

import dataclasses
import json
import types

import numpy as np
import pytest
import reference_numpy  # tests/reference_numpy.py: written from DESIGN.md's equations
import synthetic_checkpoints as synth
from fixtures import tiny_hybrid

import keras_vit
from keras_vit import npz_layout, variants
from keras_vit.variants import VARIANTS
from keras_vit.weights import REGISTRY

HYBRIDS = [name for name, spec in VARIANTS.items() if "resnet_layers" in spec]
DESCRIBE_KEYS = ("image_size", "num_classes", "representation_size", "classifier")


def images(size, seed=0, n=1):
    return np.random.default_rng(seed).uniform(-1, 1, (n, size, size, 3)).astype(np.float32)


def logits(model, x):
    return np.asarray(model(x, training=False))


def test_every_variant_is_told_from_its_twin_with_another_stem():
    for name, spec in VARIANTS.items():
        assert variants.variant_of(types.SimpleNamespace(**spec)) == name
    # R+ViT-Ti_16's encoder and 8x8 patches without the stem is no official variant; nor is
    # R26+ViT-S_32's encoder on R50's /16 stem.
    no_stem = dict(VARIANTS["R+ViT-Ti_16"], resnet_layers=None)
    assert variants.variant_of(types.SimpleNamespace(**no_stem)) is None
    other_stem = dict(VARIANTS["R26+ViT-S_32"], resnet_layers=(3, 4, 9))
    assert variants.variant_of(types.SimpleNamespace(**other_stem)) is None


def test_root_only_stem_is_kept_through_the_saved_config():
    model = tiny_hybrid(patch_size=4, num_classes=3, resnet_layers=())
    names = [layer.name for layer in model.layers]
    assert "conv_root" in names and "root_pool" in names and "block1" not in names
    assert model.grid_size == (2, 2)  # 32 px, 4x by the root, 4x4 patches
    again = keras_vit.ViT.from_config(json.loads(json.dumps(model.get_config())))
    assert again.resnet_layers == () and again.count_params() == model.count_params()


@pytest.mark.parametrize(
    "name, variant", [(n, v) for n in sorted(REGISTRY) for v in REGISTRY[n] if v in HYBRIDS]
)
def test_hybrid_registry_entries_describe_a_file_of_their_variant(name, variant):
    # What the download check compares: a file of the variant's official shape at the entry's
    # resolution must describe itself as the entry does (shapes only: R50+L/32 has 329M).
    entry = REGISTRY[name][variant]
    params = synth.vit_jax_params(
        0,
        image_size=entry.image_size,
        num_classes=entry.num_classes,
        representation_size=entry.representation_size,
        shapes_only=True,
        **VARIANTS[variant],
    )
    found = npz_layout.architecture(params)
    assert {key: found[key] for key in DESCRIBE_KEYS} == entry.describe()
    assert found["resnet_layers"] == VARIANTS[variant]["resnet_layers"]


@pytest.fixture
def served(tmp_path, monkeypatch):
    """Serves a synthetic file for a registry entry from a file:// URL, with a fresh cache."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))

    def serve(name, variant, params):
        source = synth.save(tmp_path / f"{variant}.npz", params)
        entry = dataclasses.replace(REGISTRY[name][variant], url=f"file://{source}")
        monkeypatch.setitem(REGISTRY[name], variant, entry)
        return tmp_path / "keras_home" / "models" / entry.file_name

    return serve


def test_r_ti16_loads_by_registry_name_and_matches_the_reference(served):
    # The real R+ViT-Ti/16 (6.3M parameters) as AugReg's ImageNet fine-tune at 384 px.
    name = "augreg-imagenet21k+imagenet2012"
    params = synth.vit_jax_params(4, image_size=384, num_classes=1000, **synth.R_TI16)
    cached = served(name, "R+ViT-Ti_16", params)
    model = keras_vit.R_ViT_Ti16(weights=name, classifier_activation=None, include_preprocessing=False)
    assert cached.is_file()
    assert model.grid_size == (12, 12) and model.num_classes == 1000
    x = images(384)
    expected = reference_numpy.vit_forward(params, x, num_heads=3)
    np.testing.assert_allclose(logits(model, x), expected, atol=2e-5, rtol=2e-5)
    assert model.token_grid(224) == (7, 7)  # 224 px / (4 * 8): the resize a 224 px model gets


# R26's stem (four stages of two units) at half width, under a reduced encoder: the keys are
# the published file's and go through the same loader; the encoder path is the plain ViT's.
SMALL_ENCODER = dict(hidden_size=64, num_layers=2, num_heads=2, mlp_dim=128)
HALF_WIDTH = 0.5  # 32 channels at the root: still one channel per GroupNorm group


@pytest.mark.parametrize("size", [64, 96])
def test_four_stage_stem_in_the_big_vision_layout_matches_the_reference(tmp_path, size):
    config = dict(synth.R26_S32, **SMALL_ENCODER)
    params = synth.vit_jax_params(5, image_size=64, num_classes=10, resnet_width=HALF_WIDTH, **config)
    path = synth.save(tmp_path / "r26.npz", synth.to_big_vision(params))
    model = keras_vit.create_model(
        "R26+ViT-S_32",
        weights=path,
        image_size=size,
        classifier_activation=None,
        include_preprocessing=False,
        resnet_width=HALF_WIDTH,
        **SMALL_ENCODER,
    )
    grid = size // reference_numpy.token_stride(params)
    assert model.grid_size == (grid, grid) and reference_numpy.resnet_stages(params) == (2, 2, 2, 2)
    x = images(size, n=2)
    expected = reference_numpy.vit_forward(
        params, x, num_heads=2, resize_to_grid=None if size == 64 else (grid, grid)
    )
    # Eight float32 residual units against a float64 reference: ~1e-5 of rounding on logits
    # of size ~1 (a wrong stem, stride or padding is off by far more).
    np.testing.assert_allclose(logits(model, x), expected, atol=5e-5, rtol=5e-5)
