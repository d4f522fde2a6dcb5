"""keras_vit.row_parts: inference on a CPU in halves of the token rows, where TensorFlow's oneDNN
would run the products on one thread; the same outputs as the whole rows."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from fixtures import pretend_onednn_cpu

from keras_vit import cpu_info, layers, onednn_graph, part_attention, row_parts
from keras_vit.posembs import relative

L2_OF_THE_EPYC = 1024 * 1024  # one core's L2 on the CPU the split was measured on
L2_OF_THE_XEON = 2 * 1024 * 1024  # the Intel Xeon with AMX, where larger products ran slower in parts


@pytest.mark.parametrize(
    "rows, width, itemsize, expected",
    [
        (197, 192, 2, True),  # ViT-Ti/16 at batch 1 in bfloat16: 224 KB, one thread
        (4 * 197, 192, 2, True),  # batch 4: 679 KB
        (8 * 197, 192, 2, False),  # batch 8: 1.28 MB, oneDNN's threads
        (197, 768, 2, False),  # ViT-B/16 at batch 1: 1.78 MB
        (4 * 197, 192, 4, False),  # float32 doubles the bytes: batch 4 is 1.36 MB
        (197, 192, 4, True),  # float32 at batch 1: 449 KB
    ],
)
def test_the_size_rule_is_tensorflows_for_a_one_thread_product(rows, width, itemsize, expected):
    # Operands and result together against L2: a rule missing the result or an operand
    # would give batch 8 at ViT-Ti's width one thread, or batch 4 several.
    assert row_parts.single_threaded(rows, width, width, itemsize, L2_OF_THE_EPYC) is expected


@pytest.fixture
def two_core_epyc(monkeypatch):
    """The conditions the split was measured under, whatever this machine is."""
    monkeypatch.setattr(cpu_info, "l2_bytes", lambda: L2_OF_THE_EPYC)
    monkeypatch.setattr(row_parts, "available_threads", lambda: 2)
    pretend_onednn_cpu(monkeypatch)
    monkeypatch.setattr(onednn_graph, "onednn_has_bfloat16", lambda: True)  # its AVX-512 BF16


def _count_traced(shape, dtype="bfloat16", jit_compile=False):
    seen = []

    def trace(tokens):
        seen.append(row_parts.count(tokens, dtype))
        return tokens

    tf.function(trace, jit_compile=jit_compile).get_concrete_function(tf.TensorSpec(shape, tf.float32))
    return seen[0]


def test_a_small_traced_call_takes_its_rows_in_two_parts(two_core_epyc):
    assert _count_traced((1, 197, 192)) == 2
    assert _count_traced((2, 197, 192), dtype="float32") == 2
    assert _count_traced((16, 17, 64), dtype="float32") == 2  # 1.1 million multiply-adds


@pytest.mark.parametrize(
    "why, shape, kwargs",
    [
        ("products with oneDNN's threads already", (8, 197, 192), {}),
        ("products too small to pay for the extra ops", (8, 17, 64), {}),
        ("a batch known only at run time", (None, 197, 192), {}),
        ("XLA, which ran the halves slower", (1, 197, 192), {"jit_compile": True}),
    ],
)
def test_whole_rows_where_parts_would_not_help(two_core_epyc, why, shape, kwargs):
    assert _count_traced(shape, **kwargs) == 1, why


@pytest.mark.parametrize(
    "shape, expected",
    [
        ((4, 197, 192), 2),  # 29 million multiply-adds: 1.15x in parts
        ((6, 197, 192), 1),  # 44 million: 0.90x
        ((8, 197, 192), 1),  # 0.91x
        ((1, 197, 768), 1),  # ViT-B/16 at batch 1, 116 million: 0.87x
    ],
)
def test_on_a_2_mb_l2_larger_products_keep_whole_rows(two_core_epyc, monkeypatch, shape, expected):
    # Each of these fits a 2 MB L2 by TensorFlow's one-thread rule; above MAX_MULTIPLY_ADDS the
    # parts measured slower on the Xeon, so the rule alone would have split them.
    monkeypatch.setattr(cpu_info, "l2_bytes", lambda: L2_OF_THE_XEON)
    assert _count_traced(shape) == expected


def test_bfloat16_rows_stay_whole_where_onednn_has_no_bfloat16_kernels(two_core_epyc, monkeypatch):
    # Without AVX-512 oneDNN runs no bfloat16 kernel (the AVX2 EPYC): the halves, made for its
    # kernels, gave other outputs than the whole rows there (beyond two roundings).
    monkeypatch.setattr(onednn_graph, "onednn_has_bfloat16", lambda: False)
    assert _count_traced((1, 197, 192)) == 1
    assert _count_traced((1, 197, 192), dtype="float32") == 2


def test_whole_rows_eager_on_one_thread_without_onednn_on_a_gpu_or_switched_off(two_core_epyc, monkeypatch):
    # Eager ops run one after another, so halves only add ops.
    assert row_parts.count(tf.zeros((1, 197, 192)), "bfloat16") == 1
    with monkeypatch.context() as patch:
        patch.setattr(row_parts, "available_threads", lambda: 1)
        assert _count_traced((1, 197, 192)) == 1
    with monkeypatch.context() as patch:
        patch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
        assert _count_traced((1, 197, 192)) == 1
    with monkeypatch.context() as patch:
        patch.setattr(onednn_graph, "has_gpu", lambda: True)
        assert _count_traced((1, 197, 192)) == 1
    with monkeypatch.context() as patch:
        patch.setenv(row_parts.SWITCH, "0")
        assert _count_traced((1, 197, 192)) == 1


def test_split_keeps_the_rows_in_order_with_the_longer_part_first():
    tokens = np.arange(2 * 7 * 3, dtype="float32").reshape(2, 7, 3)
    parts = row_parts.split(tf.constant(tokens), 2)
    assert [p.shape[1] for p in parts] == [4, 3]
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), tokens)


def _block(dtype, attention_layer=None):
    block = layers.EncoderBlock(2, 48, attention_layer=attention_layer, dtype=dtype)
    block.build((1, 17, 32))
    rng = np.random.default_rng(0)
    for weight in block.weights:  # random biases and norms: a dropped bias or norm shows
        weight.assign(rng.normal(scale=0.3, size=weight.shape).astype(weight.dtype))
    return block


def _traced_outputs(block, tokens, parts, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(row_parts, "count", lambda *args: parts)
        traced = tf.function(lambda x: block(x, training=False))
        graph = traced.get_concrete_function(tokens).graph
        concats = sum(op.type == "ConcatV2" for op in graph.get_operations())
        return np.float32(traced(tokens)), concats


# float32 to its rounding; bfloat16 to about two roundings (oneDNN may block a half's product
# otherwise than the whole one's; the differences measured here were 0 or one rounding).
@pytest.mark.parametrize("dtype, atol", [("float32", 1e-5), ("bfloat16", 2e-2), ("mixed_bfloat16", 2e-2)])
def test_an_encoder_block_in_parts_gives_the_whole_rows_outputs(monkeypatch, dtype, atol):
    # 17 tokens split 9 + 8. Attention within each half only, halves joined in the wrong
    # order, or a residual or norm left out in one path would each change the outputs by far
    # more than that.
    if dtype != "float32" and not onednn_graph.onednn_has_bfloat16():
        return  # no bfloat16 rows in parts on this CPU (the test above)
    block = _block(dtype)
    tokens = tf.constant(np.random.default_rng(1).normal(size=(1, 17, 32)), block.compute_dtype)
    whole, whole_concats = _traced_outputs(block, tokens, 1, monkeypatch)
    parts, part_concats = _traced_outputs(block, tokens, 2, monkeypatch)
    assert part_concats == whole_concats + 3  # keys, values and the block's output
    np.testing.assert_allclose(parts, whole, atol=atol, rtol=atol)
    # The rows do attend to each other: the whole block is not the per-half block.
    halves = [np.float32(block(tokens[:, s], training=False)) for s in (slice(0, 9), slice(9, 17))]
    assert not np.allclose(np.concatenate(halves, axis=1), whole, atol=0.1)


def test_training_and_attention_scores_keep_the_whole_rows(monkeypatch):
    def must_not_be_asked(*args):
        raise AssertionError("row_parts.count asked")

    block = _block("float32")
    monkeypatch.setattr(row_parts, "count", must_not_be_asked)
    tokens = tf.constant(np.ones((1, 17, 32), "float32"))
    tf.function(lambda x: block(x, training=True))(tokens)
    tf.function(lambda x: block(x, return_attention_scores=True))(tokens)


def test_relative_position_attention_keeps_the_whole_rows(monkeypatch):
    # Its per-call grid reaches the bias through its own call, which the parts would bypass.
    attention = {"class_name": "keras_vit>RelativePositionAttention", "config": {"grid_size": 4}}
    assert keras.saving.get_registered_object(attention["class_name"]) is relative.RelativePositionAttention
    block = layers.EncoderBlock(2, 48, attention_layer=attention)
    monkeypatch.setattr(row_parts, "count", lambda *args: 2)
    tokens = tf.constant(np.random.default_rng(2).normal(size=(1, 17, 32)), "float32")
    traced = tf.function(lambda x: block(x, training=False))
    ops = traced.get_concrete_function(tokens).graph.get_operations()
    assert sum(op.type == "ConcatV2" for op in ops) < 4


class _CausalAttention(layers.MultiHeadSelfAttention):
    """A position bias of its own that is not symmetric: each token attends to itself and the
    tokens before it."""

    def position_bias(self, query):
        length = query.shape[1]
        return np.triu(np.full((length, length), -1e4, "float32"), k=1)[None, None]


@pytest.mark.parametrize(
    "attention_class, batch",
    [(layers.MultiHeadSelfAttention, 2), (layers.MultiHeadSelfAttention, 4), (_CausalAttention, 2)],
)
def test_attention_in_parts_gives_the_whole_rows_outputs_for_each_example(
    attention_class, batch, monkeypatch
):
    # Two examples: a part's queries attending to another example's keys shows (four examples of
    # 4 heads are more pairs than part_attention.MAX_PAIRS: one joined attention). The causal
    # bias is one a subclass adds from all the queries: a part given the first part's rows of
    # it, or none, would let tokens see later ones.
    calls = []
    attend = part_attention.attend
    monkeypatch.setattr(part_attention, "attend", lambda *args: calls.append(1) or attend(*args))
    heads = 4
    layer = attention_class(heads)
    tokens = tf.constant(np.random.default_rng(3).normal(size=(batch, 9, 16)), "float32")
    whole = layer(tokens, training=False)
    traced = tf.function(lambda x: tf.concat(layer.call_in_parts(row_parts.split(x, 2)), axis=1))
    np.testing.assert_allclose(traced(tokens), whole, atol=1e-5, rtol=1e-5)
    # The parts attend on their own only for the plain attention within the limit (8 pairs).
    on_their_own = (
        attention_class is layers.MultiHeadSelfAttention and batch * heads <= part_attention.MAX_PAIRS
    )
    assert calls == ([1] if on_their_own else [])
    if attention_class is _CausalAttention:  # the bias did change the outputs
        plain = layers.MultiHeadSelfAttention(heads)
        plain.build(tokens.shape)
        plain.set_weights(layer.get_weights())
        assert not np.allclose(plain(tokens), whole, atol=0.1)
