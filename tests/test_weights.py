"""Official checkpoints load exactly: keras_vit against the fixtures and an independent NumPy pass."""

import logging
import os

import numpy as np
import pytest
import reference_numpy
import scipy.ndimage
import synthetic_checkpoints as synth
from fixtures import TINY_SHAPE

import keras_vit
from keras_vit import weights

# ../shared sits beside the repository (the project layout), never at a fixed absolute path.
FIXTURES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "shared", "fixtures"
)
FIXTURE_MODEL = dict(patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96, num_classes=7)


def build(image_size, *, num_classes=10, **config):
    return keras_vit.ViT(
        image_size=image_size,
        num_classes=num_classes,
        include_preprocessing=False,
        classifier_activation=None,
        **config,
    )


def images(size, seed=0, n=2):
    return np.random.default_rng(seed).uniform(-1, 1, (n, size, size, 3)).astype(np.float32)


def run(model, x):
    return np.asarray(model(x, training=False))


@pytest.mark.parametrize("layout", ["vit_jax", "big_vision"])
@pytest.mark.parametrize("size", [32, 64])
def test_fixture_logits_reproduced(layout, size):
    outputs = np.load(f"{FIXTURES}/tiny_vit_reference_outputs.npz", allow_pickle=False)
    model = build(size, **FIXTURE_MODEL)
    weights.load_weights(model, f"{FIXTURES}/tiny_vit_{layout}_layout.npz")
    np.testing.assert_allclose(
        run(model, outputs[f"x_{size}_nhwc"]), outputs[f"logits_{size}"], atol=1e-5, rtol=0
    )


CASES = {
    "Ti16": (synth.TI16, 224, 288, {}),
    "S32-i21k": (synth.S32, 224, 384, dict(representation_size=384, num_classes=21843)),
    "hybrid": (synth.SMALL_HYBRID, 64, 128, {}),
}


@pytest.mark.parametrize("layout", ["vit_jax", "big_vision"])
@pytest.mark.parametrize(
    "case",
    # S32 at 224 and 384 px with a 21,843-class head: 18 to 20 s each in make test-fast's run; Ti16
    # at 224 and 288 px 8 s each on the 2-core Xeon. The hybrid at 64 and 128 px stays fast.
    [pytest.param(case, marks=pytest.mark.slow) if case != "hybrid" else case for case in sorted(CASES)],
)
def test_synthetic_checkpoint_matches_numpy_reference(tmp_path, case, layout):
    config, native, larger, extra = CASES[case]
    params = synth.vit_jax_params(1, image_size=native, **config, **extra)
    stored = params if layout == "vit_jax" else synth.to_big_vision(params)
    path = synth.save(tmp_path / "ckpt.npz", stored)
    token_stride = config["patch_size"] * (16 if "resnet_layers" in config else 1)
    for size in (native, larger):
        model = build(size, **config, **extra)
        weights.load_weights(model, path)
        x = images(size)
        grid = size // token_stride
        expected = reference_numpy.vit_forward(
            params, x, num_heads=config["num_heads"], resize_to_grid=None if size == native else (grid, grid)
        )
        np.testing.assert_allclose(run(model, x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_real_r50_hybrid_matches_numpy_reference(tmp_path):
    params = synth.vit_jax_params(2, image_size=224, num_classes=1000, **synth.R50_B16)
    path = synth.save(tmp_path / "r50.npz", synth.to_big_vision(params))
    model = build(224, num_classes=1000, **synth.R50_B16)
    weights.load_weights(model, path)
    x = images(224, n=1)
    expected = reference_numpy.vit_forward(params, x, num_heads=12)
    # 28 float32 layers (16 residual units, 12 blocks) against a float64 reference: the
    # accumulated rounding reaches ~5e-5 on logits of size ~1, hence 1e-4 here; the
    # reduced hybrid above holds 1e-5.
    np.testing.assert_allclose(run(model, x), expected, atol=1e-4, rtol=1e-4)


# tests/fixtures.py's tiny ViT with a second block: a block loaded into the other shows.
TINY = dict(TINY_SHAPE, num_layers=2)


@pytest.fixture
def tiny_params():
    return synth.vit_jax_params(3, image_size=32, num_classes=5, **TINY)


def test_every_official_layout_gives_identical_outputs(tmp_path, tiny_params):
    params = dict(tiny_params)
    # big_vision without a class-token row means the same model only if that row is zero.
    params["Transformer/posembed_input/pos_embedding"][:, 0] = 0.0
    layouts = {
        "vit_jax": params,
        "opt_target": {f"opt/target/{k}": v for k, v in params.items()},
        "big_vision_stacked": synth.to_big_vision(params),
        "big_vision_per_block": synth.to_big_vision(params, stacked=False),
        "big_vision_no_cls_row": synth.to_big_vision(params, cls_row=False),
    }
    x = images(32)
    outputs = {}
    for name, stored in layouts.items():
        model = build(32, num_classes=5, **TINY)
        weights.load_weights(model, synth.save(tmp_path / f"{name}.npz", stored))
        outputs[name] = run(model, x)
    for name, out in outputs.items():
        np.testing.assert_array_equal(out, outputs["vit_jax"], err_msg=name)


def test_resize_logs_one_line(tmp_path, tiny_params, caplog):
    path = synth.save(tmp_path / "c.npz", tiny_params)
    model = build(64, num_classes=5, **TINY)
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        weights.load_weights(model, path)
    resized = [r.getMessage() for r in caplog.records if "resized" in r.getMessage()]
    assert resized == [
        "keras_vit: resized position embeddings from a 4x4 to a 8x8 patch grid "
        "(scipy.ndimage.zoom, order 1, class-token row kept)"
    ]
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        caplog.clear()
        weights.load_weights(build(32, num_classes=5, **TINY), path)
    assert not [r for r in caplog.records if "resized" in r.getMessage()]


def test_same_class_count_keeps_head_other_count_gets_zero_head(tmp_path, tiny_params, caplog):
    path = synth.save(tmp_path / "c.npz", tiny_params)
    kept = build(32, num_classes=5, **TINY)
    weights.load_weights(kept, path)
    np.testing.assert_array_equal(kept.get_layer("head").kernel.numpy(), tiny_params["head/kernel"])

    new = build(32, num_classes=3, **TINY)
    new.get_layer("head").bias.assign(np.ones(3))  # must be reset, not left as it was
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        weights.load_weights(new, path)
    assert not new.get_layer("head").kernel.numpy().any()
    assert not new.get_layer("head").bias.numpy().any()
    assert "new zero-initialised head of 3 classes (checkpoint head: 5)" in caplog.text
    # Everything but the head is the checkpoint's.
    np.testing.assert_array_equal(new.get_layer("embedding").kernel.numpy(), tiny_params["embedding/kernel"])


def test_include_top_false_drops_head(tmp_path, tiny_params):
    path = synth.save(tmp_path / "c.npz", tiny_params)
    model = keras_vit.ViT(
        image_size=32, include_top=False, pooling="token", include_preprocessing=False, **TINY
    )
    weights.load_weights(model, path)
    x = images(32)
    no_head = {k: v for k, v in tiny_params.items() if not k.startswith("head/")}
    np.testing.assert_allclose(
        run(model, x), reference_numpy.vit_forward(no_head, x, num_heads=2), atol=1e-5, rtol=1e-5
    )


def test_pre_logits_kept_for_features_and_dropped_when_model_has_none(tmp_path, caplog):
    params = synth.vit_jax_params(4, image_size=32, num_classes=21, representation_size=32, **TINY)
    path = synth.save(tmp_path / "i21k.npz", params)
    features = keras_vit.ViT(
        image_size=32,
        include_top=False,
        pooling="token",
        representation_size=32,
        include_preprocessing=False,
        **TINY,
    )
    weights.load_weights(features, path)
    x = images(32)
    no_head = {k: v for k, v in params.items() if not k.startswith("head/")}
    expected = reference_numpy.vit_forward(no_head, x, num_heads=2)  # tanh pre-logits output
    np.testing.assert_allclose(run(features, x), expected, atol=1e-5, rtol=1e-5)

    plain = build(32, num_classes=7, **TINY)
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        weights.load_weights(plain, path)
    assert "dropped the checkpoint's pre-logits layer" in caplog.text


def test_gap_checkpoint_without_class_token(tmp_path):
    params = synth.vit_jax_params(5, image_size=32, classifier="gap", **TINY)
    path = synth.save(tmp_path / "gap.npz", synth.to_big_vision(params))
    assert weights.describe(path)["classifier"] == "gap"
    for size in (32, 48):
        model = build(size, classifier="gap", **TINY)
        weights.load_weights(model, path)
        x = images(size)
        expected = reference_numpy.vit_forward(
            params, x, num_heads=2, classifier="gap", resize_to_grid=None if size == 32 else (6, 6)
        )
        np.testing.assert_allclose(run(model, x), expected, atol=1e-5, rtol=1e-5)


def test_token_checkpoint_into_gap_model_gets_a_new_head_without_the_class_token(tmp_path, caplog):
    # Fine-tuning a token checkpoint with a new head on the mean of the patch tokens: the blocks
    # are the checkpoint's, the class token and its position row are dropped, and a line says so.
    params = synth.vit_jax_params(5, image_size=32, **TINY)
    path = synth.save(tmp_path / "token.npz", params)
    model = build(32, num_classes=3, classifier="gap", include_top=False, pooling="gap", **TINY)
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        weights.load_weights(model, path)
    assert "dropped the checkpoint's class token" in caplog.text
    gap_params = {k: v for k, v in params.items() if k != "cls" and not k.startswith("head/")}
    gap_params["Transformer/posembed_input/pos_embedding"] = params[
        "Transformer/posembed_input/pos_embedding"
    ][:, 1:]
    x = images(32)
    expected = reference_numpy.vit_forward(gap_params, x, num_heads=2, classifier="gap")
    np.testing.assert_allclose(run(model, x), expected, atol=1e-5, rtol=1e-5)


def test_export_and_load_back_is_identical(tmp_path):
    params = synth.vit_jax_params(
        6, image_size=64, num_classes=4, representation_size=16, **synth.SMALL_HYBRID
    )
    model = build(64, num_classes=4, representation_size=16, **synth.SMALL_HYBRID)
    weights.load_weights(model, synth.save(tmp_path / "src.npz", synth.to_big_vision(params)))
    exported = weights.export_params(model)
    assert exported.keys() == params.keys()
    for key, value in params.items():
        np.testing.assert_array_equal(exported[key], value, err_msg=key)

    weights.save_npz(model, tmp_path / "out.npz")
    assert sorted(os.listdir(tmp_path)) == ["out.npz", "src.npz"]  # no temp files left
    again = build(64, num_classes=4, representation_size=16, **synth.SMALL_HYBRID)
    weights.load_weights(again, str(tmp_path / "out.npz"))
    x = images(64)
    np.testing.assert_array_equal(run(again, x), run(model, x))


def test_non_square_grid_saves_and_loads_back_unchanged(tmp_path):
    # A 2 x 3 grid has 7 position rows: read as a square grid (plus a class row) it would not
    # be one, and a 4 x 4 grid's 17 rows would pass for 2 x 8: the model's own grid comes first.
    for size, grid in (((16, 24), (2, 3)), ((16, 64), (2, 8))):
        model = keras_vit.ViT(
            image_size=size, num_classes=3, include_preprocessing=False, classifier_activation=None, **TINY
        )
        assert tuple(model.grid_size) == grid
        model.get_layer("posembed_input").pos_embedding.assign(
            np.random.default_rng(1).normal(size=(1, grid[0] * grid[1] + 1, TINY["hidden_size"]))
        )
        path = tmp_path / f"{grid[0]}x{grid[1]}.npz"
        weights.save_npz(model, path)
        again = keras_vit.ViT(
            image_size=size, num_classes=3, include_preprocessing=False, classifier_activation=None, **TINY
        )
        weights.load_weights(again, str(path))
        x = np.random.default_rng(0).uniform(-1, 1, (2, *size, 3)).astype(np.float32)
        np.testing.assert_array_equal(run(again, x), run(model, x))


def test_keras_weight_files_load_and_describe(tmp_path, tiny_params):
    model = build(32, num_classes=5, representation_size=None, **TINY)
    weights.load_weights(model, synth.save(tmp_path / "c.npz", tiny_params))
    weights.save_weights(model, tmp_path / "c.weights.h5")
    model.save(tmp_path / "c.keras")
    expected = dict(image_size=(32, 32), num_classes=5, representation_size=None, classifier="token")
    x = images(32)
    for name in ("c.weights.h5", "c.keras"):
        path = str(tmp_path / name)
        assert weights.describe(path) == expected
        same = build(32, num_classes=5, **TINY)
        weights.load_weights(same, path)
        np.testing.assert_array_equal(run(same, x), run(model, x))
        bigger = build(64, num_classes=5, **TINY)  # resized like any other checkpoint
        weights.load_weights(bigger, path)
        np.testing.assert_allclose(
            run(bigger, images(64)),
            reference_numpy.vit_forward(tiny_params, images(64), num_heads=2, resize_to_grid=(8, 8)),
            atol=1e-5,
            rtol=1e-5,
        )


def test_constructor_builds_the_checkpoints_model(tmp_path, monkeypatch):
    params = synth.vit_jax_params(7, image_size=64, num_classes=21, representation_size=384, **synth.S32)
    path = synth.save(tmp_path / "s32.npz", params)
    assert weights.describe(path) == dict(
        image_size=(64, 64), num_classes=21, representation_size=384, classifier="token"
    )
    reads = []
    read_params = weights.read_params
    monkeypatch.setattr(weights, "read_params", lambda p: reads.append(p) or read_params(p))
    model = keras_vit.ViT_S32(weights=path, classifier_activation=None, include_preprocessing=False)
    assert len(reads) == 1  # a large file is read once, for both its shapes and its weights
    x = images(64)
    np.testing.assert_allclose(
        run(model, x), reference_numpy.vit_forward(params, x, num_heads=6), atol=1e-5, rtol=1e-5
    )


def _randomised(model, seed=1):
    # Non-zero everywhere (the head starts at zero, which would hide any difference).
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.05, variable.shape).astype(np.float32))
    return model


def _save(model, path):
    if path.endswith(".npz"):
        weights.save_npz(model, path)
    elif path.endswith(".weights.h5"):
        model.save_weights(path)
    else:
        model.save(path)


@pytest.mark.parametrize("file_type", [".weights.h5", ".keras", ".npz"])
@pytest.mark.parametrize("size", [(160, 320), (32, 64)])
def test_every_file_of_a_non_square_model_loads_into_fixed_and_any_size_models(tmp_path, file_type, size):
    # 10 x 20 patches: 201 rows, no square grid; 2 x 4: 9 rows, which a square reading takes
    # for a 3 x 3 grid without a class row. The file tells the grid, not the row count.
    source = _randomised(keras_vit.ViT_Ti16(input_shape=(*size, 3), classes=5, num_layers=1))
    path = str(tmp_path / f"m{file_type}")
    _save(source, path)
    x = np.random.default_rng(0).uniform(0, 255, (2, *size, 3)).astype(np.float32)
    expected = run(source, x)
    for input_shape in ((*size, 3), (None, None, 3)):
        again = keras_vit.ViT_Ti16(input_shape=input_shape, weights=path, classes=5, num_layers=1)
        np.testing.assert_array_equal(run(again, x), expected, err_msg=str(input_shape))
    assert weights.describe(path)["image_size"] == size


@pytest.mark.parametrize("file_type", [".weights.h5", ".keras", ".npz"])
def test_any_size_model_with_a_non_square_base_round_trips(tmp_path, file_type):
    config = dict(classes=5, num_layers=1, input_shape=(None, None, 3))
    source = _randomised(keras_vit.ViT_Ti16(base_image_size=(64, 32), **config))
    path = str(tmp_path / f"m{file_type}")
    _save(source, path)
    again = keras_vit.ViT_Ti16(weights=path, **config)
    assert tuple(again.get_layer("posembed_input").grid_size) == (4, 2)
    for size in ((64, 32), (48, 80)):
        x = np.random.default_rng(0).uniform(0, 255, (2, *size, 3)).astype(np.float32)
        np.testing.assert_array_equal(run(again, x), run(source, x))


def test_recorded_non_square_grid_is_resized_as_the_official_rule(tmp_path):
    source = _randomised(keras_vit.ViT_Ti16(input_shape=(32, 64, 3), classes=5, num_layers=1))
    path = str(tmp_path / "m.npz")
    weights.save_npz(source, path)
    # Transposed: the same 8 patches, another grid; corner-aligned linear zoom per axis.
    other = keras_vit.ViT_Ti16(input_shape=(64, 32, 3), weights=path, classes=5, num_layers=1)
    table = source.get_layer("posembed_input").pos_embedding.numpy()
    rows = scipy.ndimage.zoom(table[0, 1:].reshape(2, 4, -1), (4 / 2, 2 / 4, 1), order=1)
    resized = other.get_layer("posembed_input").pos_embedding.numpy()
    np.testing.assert_allclose(resized[0, 1:], rows.reshape(8, -1), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(resized[0, :1], table[0, :1])


def test_square_grids_are_never_recorded(tmp_path):
    # Official files stay exactly the official layout: a square grid is told by its rows.
    model = keras_vit.ViT_Ti16(input_shape=(32, 32, 3), classes=5, num_layers=1)
    weights.save_npz(model, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as data:
        assert "Transformer/posembed_input/grid_size" not in data.files
