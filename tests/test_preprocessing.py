"""preprocess_input and decode_predictions, as keras.applications users expect them."""
import hashlib
from importlib import resources

import numpy as np
import pytest
import tensorflow as tf

from keras_vit import preprocessing
from keras_vit.preprocessing import decode_predictions, preprocess_input


def test_preprocess_input_maps_pixels_to_minus_one_one():
    pixels = np.array([[0, 127.5, 255]], np.float32)
    np.testing.assert_allclose(preprocess_input(pixels), [[-1.0, 0.0, 1.0]])
    as_int = preprocess_input(np.array([0, 255], np.uint8))
    assert as_int.dtype == np.float32
    np.testing.assert_array_equal(as_int, [-1.0, 1.0])
    tensor = preprocess_input(tf.constant([0, 51, 255], tf.uint8))
    np.testing.assert_allclose(np.asarray(tensor), [-1.0, 51 / 127.5 - 1.0, 1.0], rtol=1e-6)


def test_preprocess_input_matches_the_models_rescaling_layer():
    import keras_vit

    model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
                          mlp_dim=8, num_classes=3)
    x = np.random.default_rng(0).uniform(0, 255, (1, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(model.get_layer("rescaling")(x)), preprocess_input(x),
                               atol=1e-6)


def test_class_index_is_the_keras_imagenet_file_and_tfds_order():
    data = resources.files("keras_vit").joinpath("data/imagenet_class_index.json").read_bytes()
    # The md5 keras.applications pins for the imagenet_class_index.json it downloads.
    assert hashlib.md5(data).hexdigest() == "c2c37ea517e94d9795004a39431a14cb"
    classes = preprocessing.imagenet_class_index()
    assert len(classes) == 1000
    tfds_labels = resources.files("tensorflow_datasets").joinpath(
        "datasets/imagenet2012/labels.txt").read_text().split()
    assert [wnid for wnid, _ in classes] == tfds_labels  # the class order TFDS labels use
    assert classes[0] == ("n01440764", "tench") and classes[999] == ("n15075141", "toilet_tissue")


def test_decode_predictions_top_k_best_first():
    preds = np.zeros((2, 1000), np.float32)
    preds[0, [1, 207, 999]] = [0.2, 0.7, 0.1]
    preds[1, 281] = 1.0
    decoded = decode_predictions(preds, top=3)
    assert decoded[0] == [("n02099601", "golden_retriever", pytest.approx(0.7)),
                          ("n01443537", "goldfish", pytest.approx(0.2)),
                          ("n15075141", "toilet_tissue", pytest.approx(0.1))]
    assert decoded[1][0][:2] == ("n02123045", "tabby")
    assert len(decode_predictions(preds)[0]) == 5


def test_decode_predictions_rejects_other_heads():
    with pytest.raises(ValueError, match=r"shape \(samples, 1000\), got \(2, 21843\)") as err:
        decode_predictions(np.zeros((2, 21843)))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="top must be at least 1"):
        decode_predictions(np.zeros((1, 1000)), top=0)
