"""keras_vit.class_token_only: in a model that reads only the class token, the last encoder block
computes that row alone, in inference and training, and the outputs and gradients are those of
every row computed."""

import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
from fixtures import DISTINCT, pretend_onednn_cpu

import keras_vit
from keras_vit import class_token_only, cpu_info, layers, onednn_graph, row_parts


def _model(seed=0, **kwargs):
    """A small ViT whose every weight (the head, which starts at zero, too) holds distinct values,
    so that each row of each block differs from the others."""
    config = dict(DISTINCT, image_size=16, classifier_activation=None)
    config.update(kwargs)
    model = keras_vit.ViT(**config)
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0.0, 0.3, weight.shape).astype(weight.dtype))
    return model


def _images(batch=2, size=16, seed=1):
    return np.random.default_rng(seed).uniform(0, 255, (batch, size, size, 3)).astype("float32")


@pytest.fixture
def first_rows_calls(monkeypatch):
    """The (block, rows, tokens' shape) of every attention call asked for its first rows alone."""
    calls = []
    original = layers.MultiHeadSelfAttention.call

    def noted(self, tokens, *args, query_rows=None, **kwargs):
        if query_rows is not None:
            calls.append((self.path.split("/")[0], query_rows, tuple(tokens.shape)))
        return original(self, tokens, *args, query_rows=query_rows, **kwargs)

    monkeypatch.setattr(layers.MultiHeadSelfAttention, "call", noted)
    return calls


def _every_row(model, images, monkeypatch, **kwargs):
    with monkeypatch.context() as m:
        m.setenv(class_token_only.SWITCH, "0")
        return keras.ops.convert_to_numpy(model(images, training=False, **kwargs))


def test_the_last_block_computes_the_class_token_alone(first_rows_calls, monkeypatch):
    model, images = _model(), _images()
    one_row = keras.ops.convert_to_numpy(model(images, training=False))
    # Only the last block, for its first row, on the tokens of every row (the keys and values).
    assert first_rows_calls == [("encoderblock_1", 1, (2, 17, 24))]
    every_row = _every_row(model, images, monkeypatch)
    assert len(first_rows_calls) == 1
    assert one_row.shape == (2, 5)
    # The logits of every row computed: a wrong row (the last instead of the class token), a
    # residual of the wrong rows or an MLP left out would move them by the size of a logit.
    np.testing.assert_allclose(one_row, every_row, rtol=1e-5, atol=1e-5)
    assert np.ptp(every_row) > 1.0


def test_predict_and_a_traced_call_take_it_too(first_rows_calls, monkeypatch):
    model, images = _model(seed=2), _images(batch=3)
    every_row = _every_row(model, images, monkeypatch)
    predicted = model.predict(images, verbose=0)
    traced = tf.function(lambda x: model(x, training=False))(tf.constant(images)).numpy()
    assert [call[:2] for call in first_rows_calls] == [("encoderblock_1", 1)] * 2
    np.testing.assert_allclose(predicted, every_row, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(traced, every_row, rtol=1e-5, atol=1e-5)


def test_the_pooled_class_token_without_a_head(first_rows_calls, monkeypatch):
    model, images = _model(num_classes=0, pooling="token"), _images()
    pooled = keras.ops.convert_to_numpy(model(images, training=False))
    assert pooled.shape == (2, 24) and len(first_rows_calls) == 1
    np.testing.assert_allclose(pooled, _every_row(model, images, monkeypatch), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "why, kwargs",
    [
        ("every token is the output", dict(include_top=False, pooling=None)),
        ("the mean of the patch tokens is the output", dict(classifier="gap")),
    ],
)
def test_every_row_where_more_than_the_class_token_is_read(first_rows_calls, monkeypatch, why, kwargs):
    model, images = _model(**kwargs), _images()
    outputs = keras.ops.convert_to_numpy(model(images, training=False))
    assert first_rows_calls == [], why
    np.testing.assert_array_equal(outputs, _every_row(model, images, monkeypatch))
    if kwargs.get("pooling", "") is None:
        assert outputs.shape == (2, 17, 24)


def _gradients(model, images, weights_of_logits):
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.reduce_sum(logits * weights_of_logits)
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def test_training_takes_it_with_the_gradients_of_every_row(first_rows_calls, monkeypatch):
    # A training step (the trainers' engines, Keras' fit) differentiates the class token's row
    # alone: every weight's gradient is the one of every row computed. Keys and values taken
    # from the class token only, or a residual or MLP of the wrong rows, would change them all.
    model, images = _model(seed=6), tf.constant(_images())
    weights_of_logits = tf.constant(np.random.default_rng(7).normal(size=(2, 5)), tf.float32)
    one_row = _gradients(model, images, weights_of_logits)
    assert first_rows_calls == [("encoderblock_1", 1, (2, 17, 24))]
    monkeypatch.setenv(class_token_only.SWITCH, "0")
    every_row = _gradients(model, images, weights_of_logits)
    assert len(first_rows_calls) == 1
    names = [v.path for v in model.trainable_variables]
    for name, got, want in zip(names, one_row, every_row):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
    # The last block's query weights get gradient (from the class token's query alone).
    query = names.index("encoderblock_1/MultiHeadDotProductAttention_1/query/kernel")
    assert np.abs(one_row[query]).max() > 1e-3


def test_training_with_dropout_and_dropped_paths(first_rows_calls):
    # Dropout draws its masks for the rows computed, attention dropout on the class token's
    # weights over every key; stochastic depth one number an example.
    model = _model(seed=8, dropout_rate=0.3, attention_dropout_rate=0.3, stochastic_depth_rate=0.2)
    images = tf.constant(_images(batch=4))
    first, second = (model(images, training=True).numpy() for _ in range(2))
    assert [call[:2] for call in first_rows_calls] == [("encoderblock_1", 1)] * 2
    assert first.shape == (4, 5) and np.isfinite(first).all()
    assert not np.allclose(first, second)  # masks drawn anew at each call
    inference = model(images, training=False).numpy()
    assert not np.allclose(first, inference)


def test_relative_position_attention_keeps_every_row(first_rows_calls, monkeypatch):
    # Its bias is built for every query row: the block computes them all, and is still right.
    model, images = _model(posemb="relative"), _images()
    outputs = keras.ops.convert_to_numpy(model(images, training=False))
    assert first_rows_calls == []
    np.testing.assert_allclose(outputs, _every_row(model, images, monkeypatch), rtol=1e-6, atol=1e-6)


def test_query_rows_with_a_position_bias_is_refused():
    # A bias is built for every query row: a subset of the queries would be added the wrong rows.
    class Biased(layers.MultiHeadSelfAttention):
        def position_bias(self, query):
            return keras.ops.zeros((1, self.num_heads, query.shape[1], query.shape[1]))

    attention = Biased(num_heads=2)
    tokens = np.zeros((1, 5, 8), "float32")
    assert attention(tokens).shape == (1, 5, 8)
    with pytest.raises(ValueError, match="pass query_rows=None"):
        attention(tokens, query_rows=1)
    assert layers.MultiHeadSelfAttention(num_heads=2)(tokens, query_rows=1).shape == (1, 1, 8)


def test_with_the_other_blocks_in_parts_of_the_rows(first_rows_calls, monkeypatch):
    # ViT-Ti/16 at batch 1 on a 2-core EPYC: the earlier blocks in two halves of the rows
    # (keras_vit.row_parts), the last one for the class token, in one traced call.
    monkeypatch.setattr(cpu_info, "l2_bytes", lambda: 1024 * 1024)
    monkeypatch.setattr(row_parts, "available_threads", lambda: 2)
    pretend_onednn_cpu(monkeypatch)
    monkeypatch.setattr(onednn_graph, "onednn_has_bfloat16", lambda: True)
    parts = []
    original = layers.EncoderBlock._call_in_parts
    monkeypatch.setattr(
        layers.EncoderBlock,
        "_call_in_parts",
        lambda self, tokens, count: parts.append(self.name) or original(self, tokens, count),
    )
    model = _model(seed=3, hidden_size=64, num_heads=4, mlp_dim=128, num_layers=3)
    images = tf.constant(_images(batch=16))
    forward = tf.function(lambda x: model(x, training=False))
    one_row = forward(images).numpy()
    assert parts == ["encoderblock_0", "encoderblock_1"]
    assert [call[:2] for call in first_rows_calls] == [("encoderblock_2", 1)]
    monkeypatch.setenv(class_token_only.SWITCH, "0")
    every_row = tf.function(lambda x: model(x, training=False))(images).numpy()
    assert parts[2:] == ["encoderblock_0", "encoderblock_1", "encoderblock_2"]
    np.testing.assert_allclose(one_row, every_row, rtol=1e-5, atol=1e-5)


def test_the_request_is_the_calling_threads_and_ends_with_the_call():
    block = object()
    seen = {}
    with class_token_only.computing(block, 1):
        seen["here"] = class_token_only.rows_wanted(block)
        seen["another block"] = class_token_only.rows_wanted(object())
        other = threading.Thread(target=lambda: seen.update(thread=class_token_only.rows_wanted(block)))
        other.start()
        other.join()
    seen["after"] = class_token_only.rows_wanted(block)
    assert seen == {"here": 1, "another block": None, "thread": None, "after": None}


@pytest.mark.parametrize("value, expected", [(None, 1), ("0", None), ("off", None), ("1", 1)])
def test_the_switch(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(class_token_only.SWITCH, raising=False)
    else:
        monkeypatch.setenv(class_token_only.SWITCH, value)
    assert class_token_only.first_rows() == expected
    assert class_token_only.first_rows(mask=np.ones((2, 17), bool)) is None


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(representation_size=6), dict(include_top=False, pooling=None)],
    ids=["pooled token", "pre-logits", "tokens out"],
)
def test_the_representation_of_few_shot_probes_too(first_rows_calls, monkeypatch, kwargs):
    model, images = _model(seed=4, **kwargs), _images()
    features = model.representation_model()
    assert isinstance(features, class_token_only.ClassTokenModel)
    one_row = keras.ops.convert_to_numpy(features(images, training=False))
    assert first_rows_calls == [("encoderblock_1", 1, (2, 17, 24))]
    every_row = _every_row(features, images, monkeypatch)
    assert one_row.shape == (2, kwargs.get("representation_size", 24))
    np.testing.assert_allclose(one_row, every_row, rtol=1e-5, atol=1e-5)


def test_a_gap_models_representation_computes_every_row(first_rows_calls):
    features = _model(classifier="gap").representation_model()
    assert not isinstance(features, class_token_only.ClassTokenModel)
    features(_images(), training=False)
    assert first_rows_calls == []


def test_the_representation_saves_and_loads(tmp_path, first_rows_calls):
    # A .keras file of it loads as the same class, and its last block is found again by name.
    features, images = _model(seed=5).representation_model(), _images()
    path = str(tmp_path / "features.keras")
    features.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, class_token_only.ClassTokenModel)
    first_rows_calls.clear()
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded(images, training=False)),
        keras.ops.convert_to_numpy(features(images, training=False)),
    )
    assert [call[:2] for call in first_rows_calls] == [("encoderblock_1", 1)] * 2
