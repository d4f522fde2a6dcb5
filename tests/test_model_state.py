"""Everything a ViT knows survives every way it is saved: get_config/from_config, `.keras`,
`.weights.h5` with its config, `.npz` (keras_vit.models.load_model, the class names of
create_model(weights=FILE) and keras_vit.predict), and files of earlier versions still load."""

import json

import keras
import numpy as np
import pytest
from fixtures import TINY_SHAPE

import keras_vit
from keras_vit import npz_layout, predict
from keras_vit.errors import CheckpointError

NAMES = ["cat", "dog", "owl"]

# Every argument away from its default, in two models (a fixed size cannot have a base size,
# fc_norm needs gap): a saving format that drops one of them fails the comparison below.
FIXED = dict(
    TINY_SHAPE,
    image_size=(32, 24),  # a non-square grid: the .npz records it
    num_classes=3,
    class_names=NAMES,
    representation_size=16,
    dropout_rate=0.1,
    attention_dropout_rate=0.2,
    stochastic_depth_rate=0.3,
    classifier_activation=None,
    include_preprocessing=False,
    num_channels=1,
    layer_norm_epsilon=1e-5,
    gelu_approximate=False,
    dtype="mixed_bfloat16",
    name="pets",
)
ANY_SIZE = dict(
    TINY_SHAPE,
    image_size=(None, None),
    base_image_size=(16, 32),
    num_classes=0,  # no head: include_top False, pooling the classifier's
    class_names=[],
    classifier="gap",
    fc_norm=True,
    posemb="learned_2d",
    trainable=False,
)


def _vit_attributes(model):
    """{name: value} of every attribute the ViT class sets, beside Keras' own and the name."""
    plain = keras.Model(model.inputs, model.outputs)  # Keras' attributes of the same graph
    own = sorted(set(vars(model)) - set(vars(plain)) - {"_warned_double_scaling"})
    values = {name: getattr(model, name) for name in own}
    if values.get("policy_argument") is not None:
        values["policy_argument"] = keras.dtype_policies.serialize(values["policy_argument"])
    return {**values, "name": model.name, "trainable": model.trainable}


def _randomised(arguments, seed=0):
    model = keras_vit.ViT(**arguments)
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.2, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


def _images(model, seed=1):
    height, width = (size or 32 for size in model.image_size)
    shape = (2, height, width, model.num_channels)
    low, high = (0, 255) if model.include_preprocessing else (-1, 1)
    return np.random.default_rng(seed).uniform(low, high, shape).astype("float32")


def _outputs(model, images):
    return keras.ops.convert_to_numpy(keras.ops.cast(model(images, training=False), "float32"))


def _reloaded(model, saved_as, directory):
    """`model` written in the format `saved_as` names, and read back."""
    if saved_as == "from_config":
        return keras_vit.ViT.from_config(model.get_config())
    if saved_as == ".keras":
        path = directory / "model.keras"
        model.save(path)
        return keras.saving.load_model(path)
    if saved_as == ".weights.h5 + config":  # the config as JSON, as a user keeps it beside the file
        path = directory / "model.weights.h5"
        model.save_weights(path)
        rebuilt = keras_vit.ViT.from_config(json.loads(json.dumps(model.get_config())))
        rebuilt.load_weights(path)
        return rebuilt
    if saved_as == "load_model .npz":
        path = directory / "model.npz"
        keras_vit.weights.save_npz(model, path)
    else:
        path = directory / "model.weights.h5"
        model.save_weights(path)
    return keras_vit.models.load_model(path)


FORMATS = ["from_config", ".keras", ".weights.h5 + config", "load_model .npz", "load_model .weights.h5"]


@pytest.mark.parametrize("saved_as", FORMATS)
@pytest.mark.parametrize(
    "arguments", [FIXED, ANY_SIZE, dict(ANY_SIZE, dtype="bfloat16")], ids=["fixed", "any_size", "bfloat16"]
)
def test_every_attribute_and_output_survives_each_saving_format(tmp_path, arguments, saved_as):
    """Catches an argument or attribute that a format forgets (class_names did, in .keras files
    and from_config), and a format that loads other weights. Keras writes bfloat16 weights as
    opaque 2-byte data, which keras_vit's own reader of .weights.h5 once refused."""
    model = _randomised(arguments)
    reloaded = _reloaded(model, saved_as, tmp_path)
    assert _vit_attributes(reloaded) == _vit_attributes(model)
    assert reloaded.class_names == arguments["class_names"]
    if saved_as != "from_config":
        images = _images(model)
        np.testing.assert_array_equal(_outputs(reloaded, images), _outputs(model, images))


def test_the_attribute_comparison_sees_an_attribute_that_does_not_travel(tmp_path):
    """The check above compares every attribute the class sets, not a fixed list."""
    model = keras_vit.ViT(**FIXED)
    model.checkpoint_step = 7  # set after construction, outside get_config
    assert "checkpoint_step" in _vit_attributes(model)
    assert _vit_attributes(keras_vit.ViT.from_config(model.get_config())) != _vit_attributes(model)


@pytest.mark.parametrize("suffix", [".keras", ".weights.h5", ".npz"])
def test_create_model_takes_the_class_names_a_file_was_saved_with(tmp_path, suffix):
    """A model saved with class names (e.g. loaded from a Hub checkpoint) names its classes
    again when its file is the weights of create_model; a new head of another size does not
    inherit them, and names given by the caller win."""
    model = keras_vit.ViT_Ti16(input_shape=(32, 32, 3), classes=3, class_names=NAMES, num_layers=1)
    path = tmp_path / f"model{suffix}"
    {
        ".keras": model.save,
        ".weights.h5": model.save_weights,
        ".npz": lambda p: keras_vit.weights.save_npz(model, p),
    }[suffix](path)
    loaded = keras_vit.ViT_Ti16(weights=str(path), input_shape=(32, 32, 3), num_layers=1)
    assert loaded.class_names == NAMES
    assert keras_vit.ViT_Ti16(weights=str(path), classes=5, num_layers=1).class_names is None
    own = ["a", "b", "c"]
    assert keras_vit.ViT_Ti16(weights=str(path), class_names=own, num_layers=1).class_names == own


def test_predict_prints_the_names_of_a_reloaded_model(tmp_path, capsys, monkeypatch):
    """keras_vit.predict on a saved model prints its class names, not indices."""
    from PIL import Image

    monkeypatch.setitem(keras_vit.VARIANTS, "Test-Ti_8", TINY_SHAPE)  # a variant of the tiny shape
    model = _randomised(dict(TINY_SHAPE, image_size=32, num_classes=3, class_names=NAMES))
    path = tmp_path / "pets.keras"
    model.save(path)
    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
    assert predict.main([str(image), "--model=Test-Ti_8", f"--weights={path}", "--top=3"]) == 0
    printed = capsys.readouterr().out
    assert all(f"  {name}  (class {index})" in printed for index, name in enumerate(NAMES)), printed


def test_an_official_layout_file_without_a_config_names_what_to_do(tmp_path):
    model = keras_vit.ViT(**{**FIXED, "dtype": None})
    path = tmp_path / "official.npz"
    keras_vit.weights.save_npz(keras_vit.weights.export_params(model), path)  # weights alone
    with pytest.raises(
        CheckpointError, match=r"without a model config.*create_model\(variant, weights=path\)"
    ):
        keras_vit.models.load_model(path)
    assert keras_vit.weights.read_checkpoint(str(path))[0]["class_names"] is None


def test_the_npz_config_is_a_string_array_read_without_pickles(tmp_path):
    """The config entry is text NumPy reads with allow_pickle=False; an entry that is not a
    config is a one-line error, and other text arrays are still refused."""
    model = keras_vit.ViT(**{**FIXED, "dtype": None})
    path = tmp_path / "model.npz"
    keras_vit.weights.save_npz(model, path)
    with np.load(path, allow_pickle=False) as data:
        assert data[npz_layout.CONFIG].dtype.kind == "U"
        assert json.loads(str(data[npz_layout.CONFIG]))["class_names"] == NAMES
        arrays = dict(data)
    np.savez(tmp_path / "bad.npz", **{**arrays, npz_layout.CONFIG: np.asarray("[1, 2]")})
    with pytest.raises(CheckpointError, match="is not a model config"):
        keras_vit.models.load_model(tmp_path / "bad.npz")
    np.savez(tmp_path / "text.npz", **{**arrays, "notes": np.asarray("hello")})
    with pytest.raises(CheckpointError, match="'notes' is <U5, not numbers"):
        keras_vit.weights.read_params(tmp_path / "text.npz")


@pytest.mark.parametrize(
    "names, message",
    [(["cat"], "1 names for num_classes=3"), ("cat", "a list of strings"), ([1, 2, 3], "a list of strings")],
)
def test_class_names_that_do_not_fit_the_head_are_a_clear_error(names, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT(**{**TINY_SHAPE, "image_size": 32, "num_classes": 3, "class_names": names})
