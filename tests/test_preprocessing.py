"""preprocess_input and decode_predictions, as keras.applications users expect them."""

import hashlib
import warnings
from importlib import resources

import numpy as np
import pytest
import tensorflow as tf
from fixtures import tiny_vit

from keras_vit import preprocessing
from keras_vit.preprocessing import DoubleScalingWarning, decode_predictions, preprocess_input

# tests/fixtures.py's tiny ViT at the size of _pixels(), with 3 classes.
SIXTEEN = dict(image_size=16, num_classes=3)


def _pixels(n=2, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, (n, 16, 16, 3)).astype(np.float32)


def test_preprocess_input_maps_pixels_to_minus_one_one():
    pixels = np.array([[0, 127.5, 255]], np.float32)
    np.testing.assert_allclose(preprocess_input(pixels), [[-1.0, 0.0, 1.0]])
    as_int = preprocess_input(np.array([0, 255], np.uint8))
    assert as_int.dtype == np.float32
    np.testing.assert_array_equal(as_int, [-1.0, 1.0])
    tensor = preprocess_input(tf.constant([0, 51, 255], tf.uint8))
    np.testing.assert_allclose(np.asarray(tensor), [-1.0, 51 / 127.5 - 1.0, 1.0], rtol=1e-6)


def test_preprocess_input_takes_the_keras_applications_data_format():
    pixels = _pixels()
    expected = pixels / 127.5 - 1.0
    for data_format in (None, "channels_last"):
        np.testing.assert_allclose(preprocess_input(pixels, data_format=data_format), expected)
    # Channels first: the same scaling on every value, the layout kept.
    chw = np.transpose(pixels, (0, 3, 1, 2))
    np.testing.assert_allclose(
        preprocess_input(chw, data_format="channels_first"), np.transpose(expected, (0, 3, 1, 2))
    )
    with pytest.raises(ValueError, match="data_format must be None, 'channels_last' or 'channels_first'"):
        preprocess_input(pixels, data_format="nhwc")


def test_preprocess_input_matches_the_models_rescaling_layer():
    model = tiny_vit(**SIXTEEN)
    x = np.random.default_rng(0).uniform(0, 255, (1, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(model.get_layer("rescaling")(x)), preprocess_input(x), atol=1e-6)


def test_a_default_model_warns_once_when_given_preprocessed_images():
    model = tiny_vit(**SIXTEEN)
    pixels = _pixels()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DoubleScalingWarning)
        model(pixels)
        model(np.zeros_like(pixels))  # black images are pixels too: no false alarm
    with pytest.warns(DoubleScalingWarning, match="scaled twice") as record:
        out = model(preprocess_input(pixels))
    assert record[0].filename == __file__  # points at the caller's line
    assert "include_preprocessing=False" in str(record[0].message)
    assert out.shape == (2, 3)  # a warning, not an error: the output is still computed
    with warnings.catch_warnings():
        warnings.simplefilter("error", DoubleScalingWarning)
        model(preprocess_input(pixels))  # once per model, not once per batch


@pytest.mark.parametrize("method", ["predict", "evaluate", "fit", "attention_maps"])
def test_the_arrays_given_to_predict_evaluate_fit_and_attention_maps_are_checked(method):
    model = tiny_vit(**SIXTEEN)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    scaled = preprocess_input(_pixels())
    calls = {
        "predict": lambda: model.predict(scaled, verbose=0),
        "evaluate": lambda: model.evaluate(scaled, np.zeros(2), verbose=0),
        "fit": lambda: model.fit(scaled, np.zeros(2), epochs=1, verbose=0),
        "attention_maps": lambda: model.attention_maps(scaled),
    }
    with pytest.warns(DoubleScalingWarning) as record:
        calls[method]()
    assert record[0].filename == __file__


def test_models_that_take_scaled_inputs_and_compiled_calls_are_not_checked():
    scaled = preprocess_input(_pixels())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DoubleScalingWarning)
        tiny_vit(include_preprocessing=False, **SIXTEEN)(scaled)
        model = tiny_vit(**SIXTEEN)
        traced = tf.function(model)
        traced(scaled)
    # Nothing is added to a compiled graph: the check is Python-side, on concrete data only.
    graph = traced.get_concrete_function(tf.TensorSpec((None, 16, 16, 3), tf.float32)).graph
    assert "Min" not in {op.type for op in graph.get_operations()}


def test_preprocess_input_warns_when_its_input_is_already_scaled():
    pixels = _pixels()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DoubleScalingWarning)
        once = preprocess_input(pixels)
        # Inside a tf.data pipeline the tensors hold no values yet: nothing to check, no error.
        dataset = tf.data.Dataset.from_tensor_slices(pixels).map(preprocess_input)
        np.testing.assert_allclose(np.stack(list(dataset.as_numpy_iterator())), once, atol=1e-6)
    with pytest.warns(DoubleScalingWarning, match="already") as record:
        preprocess_input(once)
    assert record[0].filename == __file__
    with pytest.warns(DoubleScalingWarning):
        preprocess_input(tf.constant(once))


def test_the_check_on_the_jax_backend(jax_without_tensorflow):
    """On JAX, preprocess_input under jax.jit (traced values) raises nothing, and a model called
    eagerly on already-scaled pixels warns (DoubleScalingWarning): catches a check that reads a
    traced value, or one that only works on TensorFlow's tensors. (A part of the child of
    tests/jax_without_tensorflow.py, shared with other files.)"""
    assert jax_without_tensorflow.part("preprocessing")["warned"]


def test_class_index_is_the_keras_imagenet_file_and_tfds_order():
    data = resources.files("keras_vit").joinpath("data/imagenet_class_index.json").read_bytes()
    # The md5 keras.applications pins for the imagenet_class_index.json it downloads.
    assert hashlib.md5(data).hexdigest() == "c2c37ea517e94d9795004a39431a14cb"
    classes = preprocessing.imagenet_class_index()
    assert len(classes) == 1000
    tfds_labels = (
        resources.files("tensorflow_datasets")
        .joinpath("datasets/imagenet2012/labels.txt")
        .read_text()
        .split()
    )
    assert [wnid for wnid, _ in classes] == tfds_labels  # the class order TFDS labels use
    assert classes[0] == ("n01440764", "tench") and classes[999] == ("n15075141", "toilet_tissue")


def test_decode_predictions_top_k_best_first():
    preds = np.zeros((2, 1000), np.float32)
    preds[0, [1, 207, 999]] = [0.2, 0.7, 0.1]
    preds[1, 281] = 1.0
    decoded = decode_predictions(preds, top=3)
    assert decoded[0] == [
        ("n02099601", "golden_retriever", pytest.approx(0.7)),
        ("n01443537", "goldfish", pytest.approx(0.2)),
        ("n15075141", "toilet_tissue", pytest.approx(0.1)),
    ]
    assert decoded[1][0][:2] == ("n02123045", "tabby")
    assert len(decode_predictions(preds)[0]) == 5


def test_decode_predictions_rejects_other_heads():
    with pytest.raises(ValueError, match=r"shape \(samples, 1000\), got \(2, 21843\)") as err:
        decode_predictions(np.zeros((2, 21843)))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="top must be at least 1"):
        decode_predictions(np.zeros((1, 1000)), top=0)
