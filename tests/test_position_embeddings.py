"""Position-information variants (`posemb`): shapes, weight files, resizing, errors, trainers."""

import keras
import numpy as np
import pytest
from fixtures import TINY_DIGITS_FLAGS, TINY_SHAPE
from reference_numpy import resize_axis_linear as resize_axis

import keras_vit
from keras_vit import position_embeddings as pe
from keras_vit import visualize
from keras_vit import weights as weights_lib
from keras_vit.errors import CheckpointError
from trainers import finetune, model_builder, plan_pieces
from trainers import flags as trainer_flags
from trainers.errors import UsageError
from trainers.fields import FIELDS

# A 2 x 3 patch grid: non-square, so a swapped height and width cannot go unnoticed.
SMALL = dict(TINY_SHAPE, include_top=False, pooling="token", include_preprocessing=False)
VARIANTS = ("learned_2d", "sincos_2d", "relative", "none")


def _images(height, width, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, height, width, 3)).astype(np.float32)


def _position_weights(model):
    return sorted(
        w.path for w in model.weights if "pos_embedding" in w.path or "relative_embedding" in w.path
    )


def test_the_trainer_choices_are_the_library_variants():
    assert FIELDS["posemb"].choices == pe.POSEMB_TYPES
    assert FIELDS["posemb"].default == "learned_1d" == pe.POSEMB_TYPES[0]


@pytest.mark.parametrize("posemb", ["learned_1d", *VARIANTS])
def test_each_variant_builds_with_its_own_position_weights(posemb):
    model = keras_vit.ViT(image_size=(16, 24), posemb=posemb, **SMALL)
    assert model(_images(16, 24)).shape == (2, SMALL["hidden_size"])
    expected = {
        "learned_1d": ["posembed_input/pos_embedding"],
        "learned_2d": ["posembed_2d/pos_embedding_x", "posembed_2d/pos_embedding_y"],
        "sincos_2d": [],
        "relative": ["encoderblock_0/MultiHeadDotProductAttention_1/relative_embedding"],
        "none": [],
    }[posemb]
    assert _position_weights(model) == expected
    assert keras_vit.ViT.from_config(model.get_config()).posemb == posemb


def test_position_information_reaches_the_output():
    """sincos_2d and relative change the outputs of the same weights; none is permutation-blind.

    Two blocks: the class token's own query gets no relative bias, so position reaches it only
    through patch tokens that an earlier block has mixed.
    """
    two_blocks = {**SMALL, "num_layers": 2}
    base = keras_vit.ViT(image_size=(16, 24), posemb="none", **two_blocks)
    images = _images(16, 24)
    plain = np.asarray(base(images))
    for posemb in ("sincos_2d", "relative"):
        other = keras_vit.ViT(image_size=(16, 24), posemb=posemb, **two_blocks)
        shared = {**weights_lib.export_params(other), **weights_lib.export_params(base)}
        weights_lib.assign_params(other, shared, "the none model's weights")
        assert np.abs(np.asarray(other(images)) - plain).max() > 1e-4, posemb
    # Without position information, swapping two patches leaves the class token's output alone.
    swapped = images.copy()
    swapped[:, :, :8], swapped[:, :, 8:16] = images[:, :, 8:16], images[:, :, :8]
    np.testing.assert_allclose(np.asarray(base(swapped)), plain, atol=1e-5)


@pytest.mark.parametrize("posemb", VARIANTS)
def test_weight_files_round_trip(posemb, tmp_path):
    model = keras_vit.ViT(image_size=(16, 24), posemb=posemb, **SMALL)
    images = _images(16, 24)
    expected = np.asarray(model(images))
    paths = {
        "h5": str(tmp_path / "m.weights.h5"),
        "keras": str(tmp_path / "m.keras"),
        "npz": str(tmp_path / "m.npz"),
    }
    weights_lib.save_weights(model, paths["h5"])
    model.save(paths["keras"])
    weights_lib.save_npz(model, paths["npz"])
    loaded = keras.saving.load_model(paths["keras"], safe_mode=True)
    np.testing.assert_array_equal(np.asarray(loaded(images)), expected)
    for path in paths.values():
        fresh = keras_vit.ViT(image_size=(16, 24), posemb=posemb, **SMALL)
        weights_lib.load_weights(fresh, path)
        np.testing.assert_array_equal(np.asarray(fresh(images)), expected, err_msg=path)


def test_learned_2d_concatenates_column_then_row_embeddings():
    layer = pe.LearnedPosition2D((2, 3), num_prefix_tokens=1)
    layer.build((None, 7, 4))
    x_table = np.arange(6, dtype=np.float32).reshape(3, 2)  # one row per column c
    y_table = 100 + np.arange(4, dtype=np.float32).reshape(2, 2)  # one row per row r
    layer.pos_embedding_x.assign(x_table)
    layer.pos_embedding_y.assign(y_table)
    out = np.asarray(layer(np.zeros((1, 7, 4), np.float32)))[0]
    np.testing.assert_array_equal(out[0], 0)  # the class token gets none
    for r in range(2):
        for c in range(3):
            np.testing.assert_array_equal(out[1 + r * 3 + c], np.concatenate([x_table[c], y_table[r]]))


def test_learned_2d_resizes_each_half_along_its_own_axis(tmp_path):
    small = keras_vit.ViT(image_size=(16, 24), posemb="learned_2d", **SMALL)
    path = str(tmp_path / "small.npz")
    weights_lib.save_npz(small, path)
    layer = small.get_layer("posembed_2d")
    x_old, y_old = np.asarray(layer.pos_embedding_x), np.asarray(layer.pos_embedding_y)
    big = keras_vit.ViT(image_size=(32, 40), posemb="learned_2d", **SMALL)  # 2 x 3 -> 4 x 5
    weights_lib.load_weights(big, path)
    resized = big.get_layer("posembed_2d")
    np.testing.assert_allclose(np.asarray(resized.pos_embedding_x), resize_axis(x_old, 5, 0), atol=1e-6)
    np.testing.assert_allclose(np.asarray(resized.pos_embedding_y), resize_axis(y_old, 4, 0), atol=1e-6)
    # The any-size model computes the same table for a 32 x 40 image as loading did.
    anysize = keras_vit.ViT(image_size=None, base_image_size=(16, 24), posemb="learned_2d", **SMALL)
    weights_lib.load_weights(anysize, path)
    images = _images(32, 40, seed=1)
    np.testing.assert_allclose(np.asarray(anysize(images)), np.asarray(big(images)), atol=1e-5)


def test_sincos_2d_is_big_visions_table_on_every_grid():
    height, width, dim = 3, 5, 16
    omega = 1.0 / 10000 ** (np.arange(dim // 4) / (dim // 4 - 1))
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    y = rows.reshape(-1, 1) * omega
    x = cols.reshape(-1, 1) * omega
    expected = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)
    np.testing.assert_allclose(np.asarray(pe.sincos_2d((height, width), dim)), expected, atol=1e-6)
    # A model built for 2 x 3 and called on 4 x 5 equals one built for 4 x 5 with the same weights.
    anysize = keras_vit.ViT(image_size=None, base_image_size=(16, 24), posemb="sincos_2d", **SMALL)
    fixed = keras_vit.ViT(image_size=(32, 40), posemb="sincos_2d", **SMALL)
    fixed.set_weights(anysize.get_weights())
    images = _images(32, 40, seed=2)
    np.testing.assert_allclose(np.asarray(anysize(images)), np.asarray(fixed(images)), atol=1e-5)


def test_relative_bias_is_the_query_dotted_with_the_offset_embedding():
    layer = pe.RelativePositionAttention(2, grid_size=(2, 3), num_prefix_tokens=1)
    layer.build((None, 7, 8))
    table = np.random.default_rng(0).normal(size=(3, 5, 2, 4)).astype(np.float32)
    layer.relative_embedding.assign(table)
    query = np.random.default_rng(1).normal(size=(1, 7, 2, 4)).astype(np.float32)
    bias = np.asarray(layer.position_bias(query))
    assert bias.shape == (1, 2, 7, 7)
    np.testing.assert_array_equal(bias[:, :, 0], 0)  # class-token query
    np.testing.assert_array_equal(bias[:, :, :, 0], 0)  # class-token key
    for q in range(6):
        for k in range(6):
            (rq, cq), (rk, ck) = divmod(q, 3), divmod(k, 3)
            for head in range(2):
                want = query[0, 1 + q, head] @ table[rq - rk + 1, cq - ck + 2, head] / 2.0
                np.testing.assert_allclose(bias[0, head, 1 + q, 1 + k], want, rtol=1e-5, atol=1e-6)


def test_relative_table_resizes_on_its_offset_axes(tmp_path):
    small = keras_vit.ViT(image_size=(16, 24), posemb="relative", **SMALL)
    path = str(tmp_path / "small.npz")
    weights_lib.save_npz(small, path)
    name = "encoderblock_0/MultiHeadDotProductAttention_1/relative_embedding"
    old = next(np.asarray(w) for w in small.weights if w.path == name)
    big = keras_vit.ViT(image_size=(32, 40), posemb="relative", **SMALL)  # (3, 5) -> (7, 9) offsets
    weights_lib.load_weights(big, path)
    new = next(np.asarray(w) for w in big.weights if w.path == name)
    expected = resize_axis(resize_axis(old, 7, 0), 9, 1)
    np.testing.assert_allclose(new, expected, atol=1e-6)
    np.testing.assert_array_equal(new[3, 4], old[1, 2])  # offset (0, 0) stays offset (0, 0)
    anysize = keras_vit.ViT(image_size=None, base_image_size=(16, 24), posemb="relative", **SMALL)
    weights_lib.load_weights(anysize, path)
    images = _images(32, 40, seed=3)
    np.testing.assert_allclose(np.asarray(anysize(images)), np.asarray(big(images)), atol=1e-5)
    assert [m.shape for m in anysize.attention_maps(images)] == [(2, 2, 21, 21)]


def test_a_checkpoint_of_another_variant_is_one_line(tmp_path):
    official = keras_vit.ViT(image_size=(16, 24), **SMALL)
    path = str(tmp_path / "learned_1d.npz")
    weights_lib.save_npz(official, path)
    sincos = keras_vit.ViT(image_size=(16, 24), posemb="sincos_2d", **SMALL)
    with pytest.raises(CheckpointError, match="posemb='learned_1d'.*posemb='sincos_2d'") as err:
        weights_lib.load_weights(sincos, path)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="learned 1-D position embeddings; build with posemb='learned_1d'"):
        keras_vit.create_model("ViT-Ti_16", weights="imagenet21k", posemb="relative")
    with pytest.raises(ValueError, match="posemb='relative' model adds no position embeddings"):
        visualize.position_embedding_similarity(keras_vit.ViT(image_size=16, posemb="relative", **SMALL))


def test_a_learned_2d_file_says_what_it_is(tmp_path):
    model = keras_vit.ViT(image_size=(16, 24), posemb="learned_2d", **SMALL)
    path = str(tmp_path / "m.npz")
    weights_lib.save_npz(model, path)
    built = keras_vit.create_model("ViT-Ti_16", weights=path, **SMALL)
    assert built.posemb == "learned_2d" and built.grid_size == (2, 3)


@pytest.mark.slow
def test_a_relative_run_fine_tunes_from_its_model_npz(tmp_path, capsys):
    tiny = [
        "--dataset=digits",
        *TINY_DIGITS_FLAGS,
        "--batch_size=32",
        "--total_steps=3",
        "--warmup_steps=1",
        "--steps_per_loop=3",
        "--eval_every=0",
        "--checkpoint_every=0",
    ]
    workdir = tmp_path / "run"
    code = finetune.main(["finetune", f"--workdir={workdir}", *tiny, "--posemb=relative"])
    assert code == 0, capsys.readouterr().err
    path = str(workdir / "model.npz")
    params = np.load(path, allow_pickle=False)
    key = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/relative_embedding"
    assert key in params.files and "Transformer/posembed_input/pos_embedding" not in params.files

    def fine_tuning_model(*flags):
        config = trainer_flags.parse_flags(
            ["finetune", "--dataset=digits", f"--weights={path}", *flags], finetune.get_config
        )
        return model_builder.build_model(plan_pieces.model_settings(config), num_classes=10)

    # The file says it is relative; the fine-tuning model starts from its trained table.
    for model in (fine_tuning_model(), fine_tuning_model("--posemb=relative")):
        table = next(w for w in model.weights if w.path.endswith("relative_embedding"))
        np.testing.assert_array_equal(np.asarray(table), params[key])
    with pytest.raises(
        UsageError, match="trained with posemb='relative' but the model has posemb='learned_1d'"
    ):
        fine_tuning_model("--posemb=learned_1d")
