"""keras_vit.part_attention: parts of the query rows attending to all the keys."""

import numpy as np
import pytest
import tensorflow as tf

from keras_vit import part_attention


def _reference(query, key, value):
    """softmax(Q K^T / sqrt(d)) V per example and head, in float64 NumPy."""
    logits = np.einsum("bqhd,bkhd->bhqk", query, key) / np.sqrt(query.shape[-1])
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", probs, value)


def _attend_one(query, key, value):
    """part_attention.attend of a single part."""
    [context] = part_attention.attend([query], key, value)
    return context


def _inputs(batch, rows, length, heads, depth, seed=0):
    rng = np.random.default_rng(seed)
    # Logits up to about 10: a softmax over the wrong axis or without the scale shows.
    query = rng.normal(scale=1.5, size=(batch, rows, heads, depth))
    key = rng.normal(scale=1.5, size=(batch, length, heads, depth))
    value = rng.normal(size=(batch, length, heads, depth))
    return query, key, value


@pytest.mark.parametrize("batch", [1, 2])
def test_a_part_of_the_queries_attends_to_every_key_per_example_and_head(batch):
    # 5 query rows against 7 keys, 3 heads of 4: heads or examples mixed up, the keys' and
    # queries' roles swapped, another scale or a softmax over the wrong axis each miss by far.
    query, key, value = _inputs(batch, 5, 7, 3, 4)
    traced = tf.function(_attend_one)
    context = traced(*(tf.constant(x, "float32") for x in (query, key, value)))
    assert context.shape == (batch, 5, 3, 4)
    np.testing.assert_allclose(context, _reference(query, key, value), atol=1e-5, rtol=1e-5)


def test_each_part_gets_its_own_rows_contexts_in_order():
    # Two parts of 3 and 2 query rows (7 keys, 2 examples, 3 heads): parts swapped, one part's
    # queries used for both, or a part's contexts joined to the other's, each miss.
    query, key, value = _inputs(2, 5, 7, 3, 4, seed=3)
    queries = [tf.constant(query[:, :3], "float32"), tf.constant(query[:, 3:], "float32")]
    first, second = tf.function(part_attention.attend)(
        queries, *(tf.constant(x, "float32") for x in (key, value))
    )
    expected = _reference(query, key, value)
    assert first.shape == (2, 3, 3, 4) and second.shape == (2, 2, 3, 4)
    np.testing.assert_allclose(first, expected[:, :3], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(second, expected[:, 3:], atol=1e-5, rtol=1e-5)


def test_large_logits_do_not_overflow():
    # Logits near 1000: exp() of them overflows float32 unless the maximum is taken out first.
    query, key, value = _inputs(1, 3, 6, 2, 4, seed=1)
    query, key = query * 20, key * 20
    context = _attend_one(*(tf.constant(x, "float32") for x in (query, key, value)))
    assert np.isfinite(context).all()
    np.testing.assert_allclose(context, _reference(query, key, value), atol=1e-4, rtol=1e-4)


def test_bfloat16_products_keep_the_logits_and_softmax_in_float32():
    query, key, value = _inputs(1, 5, 7, 2, 8, seed=2)
    inputs = [tf.constant(x, "bfloat16") for x in (query, key, value)]
    graph = tf.function(_attend_one).get_concrete_function(*inputs).graph
    exps = [op for op in graph.get_operations() if op.type == "Exp"]
    assert exps and all(op.outputs[0].dtype == tf.float32 for op in exps)
    context = _attend_one(*inputs)
    assert context.dtype == tf.bfloat16
    rounded = [np.float64(np.float32(x)) for x in inputs]  # the inputs as bfloat16 holds them
    np.testing.assert_allclose(np.float32(context), _reference(*rounded), atol=3e-2, rtol=3e-2)


def test_each_product_is_a_2d_matmul_and_the_softmax_is_written_out():
    # What makes a part's attention run on one core: TensorFlow runs a small 2-D MatMul on one
    # thread, but gives a batched product (an einsum) and its softmax kernel every thread.
    query, key, value = (tf.constant(x, "float32") for x in _inputs(2, 5, 7, 3, 4))
    queries = [query[:, :3], query[:, 3:]]
    graph = tf.function(part_attention.attend).get_concrete_function(queries, key, value).graph
    types = [op.type for op in graph.get_operations()]
    assert types.count("MatMul") == 2 * 2 * 2 * 3  # two per part, example and head
    assert not {"BatchMatMulV2", "Einsum", "Softmax"} & set(types)
    # The keys and values are sliced once per example and head, not once per part as well.
    placeholders = [op for op in graph.get_operations() if op.type == "Placeholder"]
    keys_and_values = [op for op in placeholders if op.outputs[0].shape[1] == 7]
    assert len(keys_and_values) == 2
    for placeholder in keys_and_values:
        slices = [op for op in placeholder.outputs[0].consumers() if op.type == "StridedSlice"]
        assert len(slices) == 2 * 3, placeholder.name


def test_a_part_attends_on_its_own_up_to_max_pairs_of_examples_and_heads():
    # ViT-Ti/16's 3 heads: up to batch 4, where it measured faster; from batch 5 it ran slower.
    assert part_attention.MAX_PAIRS == 12
    assert part_attention.applies(tf.zeros((4, 99, 3, 64)))
    assert not part_attention.applies(tf.zeros((5, 99, 3, 64)))
    assert part_attention.applies(tf.zeros((1, 99, 6, 64)))  # ViT-S/16 at batch 1
