"""The registry of position-embedding types (keras_vit/posembs): a type is its module alone.

`RowType` below is a whole type as a module of keras_vit/posembs would declare it, registered
by the fixture with one `register` call and nothing else: the model, the .npz and Keras weight
files, the resize to another grid and the file's own description must all follow it.
"""

import keras
import numpy as np
import pytest
from fixtures import TINY_SHAPE
from keras import ops
from reference_numpy import resize_axis_linear as resize_axis

import keras_vit
from keras_vit import hf_export, posembs, visualize
from keras_vit import layers as vit_layers
from keras_vit import weights as weights_lib
from keras_vit.errors import CheckpointError
from keras_vit.posembs.base import PosembType
from keras_vit.posembs.grid_layer import GridPositionLayer, is_static
from trainers.fields import FIELDS

# A 2 x 3 patch grid: non-square, so a swapped height and width cannot go unnoticed.
SMALL = dict(TINY_SHAPE, num_classes=4, include_preprocessing=False)
LAYER = "posembed_rows"
KEY = f"Transformer/{LAYER}/row_embedding"


@keras.saving.register_keras_serializable(package="keras_vit_tests")
class RowPosition(GridPositionLayer):
    """One learned row per patch row, shared by the row's patches: (h, D), resized on h."""

    def build(self, input_shape):
        self.row_embedding = self.add_weight(
            name="row_embedding",
            shape=(self.grid_size[0], input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.5),
        )

    def patch_embeddings(self, grid):
        table = self.row_embedding
        if not is_static(grid) or tuple(grid) != self.grid_size:
            table = vit_layers._linear_resize_axis(ops.convert_to_tensor(table), grid[0], axis=0)
        width = table.shape[-1]
        return ops.reshape(ops.broadcast_to(table[:, None, :], (grid[0], grid[1], width)), (-1, width))


class RowType(PosembType):
    name = "rows_for_tests"
    summary = "a row embedding"
    layer_name = LAYER
    variables = {LAYER: ("row_embedding",)}
    grid_axes = {"row_embedding": (0,)}

    def check_width(self, hidden_size):
        if hidden_size < 4:
            raise ValueError(f"posemb='rows_for_tests' needs a hidden size of 4 or more, got {hidden_size}.")

    def input_layer(self, grid_size, num_prefix_tokens, patch_size=None, dtype=None):
        return RowPosition(grid_size, num_prefix_tokens, patch_size, name=LAYER, dtype=dtype)


@pytest.fixture
def rows():
    posembs.register(RowType())
    yield RowType.name
    posembs.unregister(RowType.name)


def _images(height, width, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, height, width, 3)).astype(np.float32)


def _with_random_head(model):
    for variable in model.weights:
        if variable.path.startswith("head/"):
            variable.assign(np.random.default_rng(5).normal(size=variable.shape).astype(np.float32))
    return model


def test_the_flag_offers_exactly_the_registered_types():
    assert FIELDS["posemb"].choices == posembs.names()
    assert posembs.names() == ("learned_1d", "learned_2d", "sincos_2d", "relative", "none")
    assert FIELDS["posemb"].default == posembs.OFFICIAL == posembs.names()[0]
    for kind in posembs.types():
        assert kind.name in FIELDS["posemb"].help and kind.summary in FIELDS["posemb"].help


def test_unknown_types_and_widths_are_one_line():
    with pytest.raises(ValueError, match=r"^posemb must be one of learned_1d, learned_2d, sincos_2d, "):
        keras_vit.ViT(posemb="learned", **SMALL)
    with pytest.raises(ValueError, match="posemb must be one of") as err:
        keras_vit.ViT(posemb=["learned_1d"], **SMALL)  # not a name at all: the same message
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="even hidden size"):
        keras_vit.ViT(posemb="learned_2d", **{**SMALL, "hidden_size": 5, "num_heads": 1})


def test_the_registry_refuses_a_name_twice_and_a_layer_with_other_variables():
    with pytest.raises(ValueError, match="'relative' is registered twice"):
        posembs.register(posembs.get("relative"))

    class Clash(RowType):
        name = "clash_for_tests"
        variables = {"posembed_2d": ("row_embedding",)}  # learned_2d's layer, other variables

    with pytest.raises(ValueError, match="layer 'posembed_2d' holds pos_embedding_x, pos_embedding_y"):
        posembs.register(Clash())
    assert "clash_for_tests" not in posembs.names()


def test_a_registered_type_builds_saves_reloads_and_resizes(rows, tmp_path):
    model = _with_random_head(keras_vit.ViT(image_size=(16, 24), posemb=rows, **SMALL))
    images = _images(16, 24)
    expected = np.asarray(model(images))
    assert [w.path for w in model.weights if "row" in w.path] == [f"{LAYER}/row_embedding"]
    with pytest.raises(ValueError, match="needs a hidden size of 4 or more"):
        keras_vit.ViT(posemb=rows, **{**SMALL, "hidden_size": 2, "num_heads": 1})

    paths = {ext: str(tmp_path / f"m.{ext}") for ext in ("npz", "weights.h5", "keras")}
    weights_lib.save_npz(model, paths["npz"])
    model.save_weights(paths["weights.h5"])
    model.save(paths["keras"])
    stored = np.load(paths["npz"])
    assert KEY in stored.files and not any("posembed_input" in key for key in stored.files)
    for path in paths.values():
        fresh = keras_vit.ViT(image_size=(16, 24), posemb=rows, **SMALL)
        weights_lib.load_weights(fresh, path)
        np.testing.assert_array_equal(np.asarray(fresh(images)), expected, err_msg=path)
    loaded = keras.saving.load_model(paths["keras"], safe_mode=True)
    assert loaded.posemb == rows
    np.testing.assert_array_equal(np.asarray(loaded(images)), expected)

    # The file says what it holds; a model of another type is refused in one line.
    assert weights_lib.read_checkpoint(paths["npz"])[0]["posemb"] == rows
    unplaced = keras_vit.ViT(image_size=(16, 24), posemb="none", **SMALL)
    with pytest.raises(
        CheckpointError, match=f"trained with posemb='{rows}' but the model has posemb='none'"
    ):
        weights_lib.load_weights(unplaced, paths["npz"])

    # Another grid: the row table follows the rows (2 -> 4), as an any-size model computes it.
    big = keras_vit.ViT(image_size=(32, 40), posemb=rows, **SMALL)
    weights_lib.load_weights(big, paths["npz"])
    old_table = np.asarray(model.get_layer(LAYER).row_embedding)
    np.testing.assert_allclose(
        np.asarray(big.get_layer(LAYER).row_embedding), resize_axis(old_table, 4, 0), atol=1e-6
    )
    anysize = keras_vit.ViT(image_size=None, base_image_size=(16, 24), posemb=rows, **SMALL)
    weights_lib.load_weights(anysize, paths["keras"])
    wide = _images(32, 40, seed=1)
    np.testing.assert_allclose(np.asarray(anysize(wide)), np.asarray(big(wide)), atol=1e-5)
    assert [m.shape for m in anysize.attention_maps(wide)] == [(2, 2, 21, 21)]
    assert visualize.position_embedding_similarity(model).shape == (2, 3, 2, 3)

    # Only a type that says so goes to timm or transformers.
    with pytest.raises(CheckpointError, match=f"posemb='{rows}'; timm and transformers have learned 1-D"):
        hf_export.save_pretrained(model, str(tmp_path / "hf"), to="timm")
