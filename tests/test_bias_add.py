"""keras_vit.bias_add: a bfloat16 training call sums the bias gradients of the MLP, of the
attention's output projection and of the pre-logits layer in float32, and keeps the layers'
outputs, weights and names."""

import fixtures
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import bias_add, layers, onednn_graph

# More rows than bfloat16 can count in ones (its 8-bit significand stops at 256).
ROWS = 4096
WIDTH = 8


@pytest.fixture
def mixed_bfloat16():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    yield
    keras.config.set_dtype_policy(previous)


def _bias_gradients(block, tokens, training):
    """{weight path: gradient} of sum(block(tokens)) for the block's bias weights, in one trace."""
    biases = [w for w in block.trainable_weights if w.path.endswith("bias")]

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = block(x, training=training)
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        return y, tape.gradient(loss, biases)

    outputs, gradients = step(tokens)
    return outputs, {b.path: g.numpy() for b, g in zip(biases, gradients)}


def test_a_bfloat16_training_call_counts_every_row_into_the_mlp_bias_gradients(mixed_bfloat16):
    # The gradient of the output bias is the number of rows: 4096. BiasAddGrad's bfloat16 sum
    # stops at 256; the hidden bias's gradient sums the second kernel's rows times GELU's slope.
    block = layers.MlpBlock(mlp_dim=16)
    block.build((1, ROWS, WIDTH))
    tokens = tf.constant(np.random.default_rng(0).normal(size=(1, ROWS, WIDTH)), tf.float32)
    _, gradients = _bias_gradients(block, tokens, training=True)
    np.testing.assert_array_equal(gradients[block.dense_1.bias.path], np.full(WIDTH, ROWS, np.float32))
    # The hidden bias in float32 arithmetic throughout, against the trace's bfloat16 sum of rows:
    # off by bfloat16's roundings of the products, not by a sum stuck at 256 ones.
    x = tf.cast(tf.cast(tokens, tf.bfloat16), tf.float32)
    kernel_0 = tf.cast(tf.cast(block.dense_0.kernel, tf.bfloat16), tf.float32)
    kernel_1 = tf.cast(tf.cast(block.dense_1.kernel, tf.bfloat16), tf.float32)
    hidden = tf.matmul(x[0], kernel_0) + tf.cast(tf.cast(block.dense_0.bias, tf.bfloat16), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(hidden)
        total = tf.reduce_sum(tf.matmul(tf.nn.gelu(hidden, approximate=block.gelu_approximate), kernel_1))
    want = tf.reduce_sum(tape.gradient(total, hidden), axis=0).numpy()
    np.testing.assert_allclose(
        gradients[block.dense_0.bias.path], want, rtol=0.02, atol=0.02 * np.abs(want).max()
    )


def test_a_bfloat16_training_call_counts_every_row_into_the_attention_output_bias(mixed_bfloat16):
    attention = layers.MultiHeadSelfAttention(2)
    attention.build((1, ROWS, WIDTH))
    tokens = tf.constant(np.random.default_rng(1).normal(size=(1, ROWS, WIDTH)), tf.float32)
    _, gradients = _bias_gradients(attention, tokens, training=True)
    np.testing.assert_array_equal(gradients[attention.out.bias.path], np.full(WIDTH, ROWS, np.float32))


class _Calling(keras.layers.Layer):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def call(self, x, training=None):
        return bias_add.call(self.inner, x, training)


def test_the_layers_outputs_are_their_own_calls(mixed_bfloat16):
    # The same products and bias, so the same bfloat16 values as the layers' own calls.
    rng = np.random.default_rng(2)
    tokens = tf.constant(rng.normal(size=(2, 5, WIDTH)), tf.bfloat16)
    dense = keras.layers.Dense(3, bias_initializer="random_normal")
    # The attention's output projection: heads and their width in, a vector bias.
    heads = tf.reshape(tokens, (2, 5, 2, WIDTH // 2))
    einsum = keras.layers.EinsumDense(
        "bthk,hkd->btd", output_shape=(None, 3), bias_axes="d", bias_initializer="random_normal"
    )
    for layer, x in ((dense, tokens), (einsum, heads)):
        layer.build(x.shape)
        ours = _Calling(layer)(x, training=True)  # read under the enclosing layer's policy
        assert ours.dtype == tf.bfloat16
        np.testing.assert_array_equal(ours.numpy(), layer(x).numpy())
    # The pre-logits layer's own training call against Dense's call of the same weights.
    summed = bias_add.SummedBiasDense(3, activation="tanh", bias_initializer="random_normal")
    summed.build(tokens.shape)
    ours = summed(tokens, training=True)
    assert ours.dtype == tf.bfloat16
    np.testing.assert_array_equal(ours.numpy(), summed(tokens, training=False).numpy())


def test_only_bfloat16_training_calls_on_a_cpu_add_the_bias_themselves(monkeypatch):
    x16, x32 = tf.zeros((2, 3), tf.bfloat16), tf.zeros((2, 3), tf.float32)
    monkeypatch.setattr(onednn_graph, "has_gpu", lambda: False)
    assert bias_add.applies(x16, training=True)
    assert not bias_add.applies(x16, training=False)  # inference: the add TensorFlow fuses
    assert not bias_add.applies(x16, training=None)
    assert not bias_add.applies(x32, training=True)  # float32 keeps Keras' ops and their bits
    monkeypatch.setattr(onednn_graph, "has_gpu", lambda: True)  # its kernel sums in float32
    assert not bias_add.applies(x16, training=True)


def _gradient_op_types(block, tokens):
    """The op types of a training step's graph: the block's call and the gradient of its sum."""

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(block(x, training=True), tf.float32))
        return tape.gradient(loss, block.trainable_weights)

    return {op.type for op in step.get_concrete_function(tokens).graph.get_operations()}


def test_the_bfloat16_training_graph_keeps_the_bias_add_but_not_its_bfloat16_sum(mixed_bfloat16, monkeypatch):
    monkeypatch.setattr(onednn_graph, "has_gpu", lambda: False)
    block = layers.MlpBlock(mlp_dim=16)
    block.build((1, 4, WIDTH))
    ops = _gradient_op_types(block, tf.zeros((1, 4, WIDTH)))
    assert "BiasAdd" in ops and "BiasAddGrad" not in ops


def test_the_float32_training_graph_is_keras_own():
    block = layers.MlpBlock(mlp_dim=16)
    block.build((1, 4, WIDTH))
    assert {"BiasAdd", "BiasAddGrad"} <= _gradient_op_types(block, tf.zeros((1, 4, WIDTH)))


def test_a_bfloat16_training_call_counts_every_example_into_the_pre_logits_bias_gradient(
    mixed_bfloat16, monkeypatch
):
    # The pre-logits layer of pre-training sums its bias gradient over the batch's examples. With
    # its weights at zero, tanh's slope is 1 at every example, so the gradient of the features'
    # sum is the number of examples: 4096, where BiasAddGrad's bfloat16 sum stops at 256.
    monkeypatch.setattr(onednn_graph, "has_gpu", lambda: False)
    model = fixtures.tiny_vit(representation_size=WIDTH, include_top=False, pooling="token")
    pre_logits = model.get_layer("pre_logits")
    assert isinstance(pre_logits, bias_add.SummedBiasDense)
    for weight in pre_logits.weights:
        weight.assign(np.zeros(weight.shape, np.float32))
    images = tf.constant(np.random.default_rng(3).uniform(-1, 1, (ROWS, 32, 32, 3)), tf.float32)

    @tf.function
    def bias_gradient(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True))
        return tape.gradient(loss, pre_logits.bias)

    np.testing.assert_array_equal(bias_gradient(images).numpy(), np.full(WIDTH, ROWS, np.float32))
