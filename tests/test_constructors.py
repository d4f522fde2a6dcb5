"""The public constructors keep the keras.applications contract, and refuse what they cannot do.

Every constructor is built once, small (one encoder block, a 32 x 64 image): the arguments
are handled by the same code for all, the variant (patch size, width, stem) is what differs.
The refusals are checked on all of them and must come before any layer is built.
"""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import models
from keras_vit.models import VARIANTS

NAMES = sorted(keras_vit.CONSTRUCTORS)


def _constructor(name):
    return getattr(keras_vit, name)


@pytest.fixture
def no_building(monkeypatch):
    """Fails the test if a model starts being built: refusals come first."""

    def built(*args, **kwargs):
        raise AssertionError("the model was built before the arguments were refused")

    monkeypatch.setattr(models.ViT, "__init__", built)


@pytest.mark.parametrize("name", NAMES)
def test_keras_applications_arguments(name):
    variant = VARIANTS[keras_vit.CONSTRUCTORS[name]]
    model = _constructor(name)(
        include_top=True,
        weights=None,
        input_shape=(32, 64, 3),
        pooling=None,
        classes=3,
        classifier_activation=None,
        num_layers=1,
    )
    assert model.input_shape == (None, 32, 64, 3)
    assert (model.patch_size, model.hidden_size) == (variant["patch_size"], variant["hidden_size"])
    assert model.resnet_layers == variant.get("resnet_layers")
    assert model.get_layer("head").activation is keras.activations.linear
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 64, 3)).astype(np.float32)
    assert model(x).shape == (2, 3)


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        (dict(dropout=0.5), TypeError, r"unexpected keyword argument 'dropout'; did you mean dropout_rate\?"),
        (dict(num_classes=3), TypeError, r"'num_classes'; use classes"),
        (dict(image_size=64), TypeError, r"'image_size'; use input_shape"),
        (dict(input_tensor=np.zeros((1, 32, 32, 3))), ValueError, r"input_tensor is not supported"),
        (dict(classes=-1), ValueError, r"classes must be a whole number >= 0"),
        (dict(classes=2.5), ValueError, r"classes must be a whole number >= 0"),
        (dict(input_shape=(32, 32)), ValueError, r"input_shape must be \(height, width, channels\)"),
        (dict(input_shape=64), ValueError, r"input_shape must be \(height, width, channels\)"),
        (dict(weights=3), ValueError, r"weights must be None, a registry name or a file path"),
    ],
)
@pytest.mark.parametrize("name", NAMES)
def test_refusals_come_before_anything_is_built(name, arguments, error, message, no_building):
    with pytest.raises(error, match=message):
        _constructor(name)(**arguments)


@pytest.mark.parametrize("name", NAMES)
def test_channels_first_is_refused_at_construction(name, no_building):
    keras.config.set_image_data_format("channels_first")
    try:
        with pytest.raises(ValueError, match=r"take channels_last images.*set_image_data_format"):
            _constructor(name)()
    finally:
        keras.config.set_image_data_format("channels_last")


def test_vit_and_create_model_name_the_closest_argument_too():
    with pytest.raises(
        TypeError, match=r"ViT\(\) got an unexpected keyword argument 'dropout'; did you mean"
    ):
        keras_vit.ViT(image_size=16, patch_size=8, dropout=0.5)
    with pytest.raises(TypeError, match=r"'num_head'; did you mean num_heads\?"):
        keras_vit.create_model("ViT-Ti_16", num_head=3)


SMALL = dict(input_shape=(32, 32, 3), num_layers=1)


@pytest.mark.parametrize(
    "arguments, shape",
    [
        (dict(include_top=False, pooling=None), (2, 5, 192)),
        (dict(include_top=False, pooling="token"), (2, 192)),
        (dict(include_top=False, pooling="gap"), (2, 192)),
        (dict(include_top=True, classes=0), (2, 192)),  # timm's num_classes=0: no head
        (dict(include_top=True, classes=4), (2, 4)),
        (dict(include_top=True, classes=np.int64(4)), (2, 4)),  # a count computed with NumPy
    ],
)
def test_include_top_pooling_and_classes(arguments, shape):
    model = keras_vit.ViT_Ti16(**SMALL, **arguments)
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    out = np.asarray(model(x))
    assert out.shape == shape
    assert ("head" in [layer.name for layer in model.layers]) == (len(shape) == 2 and shape[1] == 4)
    if arguments.get("classes") == 4:
        np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-5)  # softmax by default


def test_classes_zero_is_the_pooled_representation_and_survives_saving(tmp_path):
    model = keras_vit.ViT_Ti16(classes=0, **SMALL)
    features = keras_vit.ViT_Ti16(include_top=False, pooling="token", **SMALL)
    features.set_weights(model.get_weights())
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    np.testing.assert_array_equal(model(x), features(x))
    model.save(tmp_path / "m.keras")
    again = keras.saving.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(again(x), model(x))


def test_any_size_input_shape():
    model = keras_vit.ViT_Ti16(input_shape=(None, None, 3), classes=3, num_layers=1)
    for size in ((32, 32), (48, 80)):
        x = np.zeros((1, *size, 3), np.float32)
        assert model(x).shape == (1, 3)
