"""pp strings (--pp_train, --pp_eval): parsing into the registered ops, the flags' default
pipelines, Mixup as a batch op, the random_grayscale example op, and the one-line errors."""

import numpy as np
import pytest
import tensorflow as tf

from configs.fields import TRAINING, fields
from trainers import data
from trainers.data import ops, pp
from trainers.errors import DatasetError, UsageError

PAPER = "decode|inception_crop(0.05)|resize(224)|flip_lr|value_range(-1,1)"


def _config(**values):
    config = fields(TRAINING)
    config.update(values)
    return config


def _one_line(make, error=UsageError):
    with pytest.raises(error) as e:
        make()
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_pp_string_is_the_ops_the_flags_build():
    config = _config(image_size=224)
    assert pp.parse(PAPER) == ops.train_ops(config)
    assert pp.parse(" decode | resize(size=224) |value_range(low=-1, high=1)|") == ops.eval_ops(224)
    as_list = ["decode", "inception_crop(0.05)", "resize(224)", ("flip_lr", {}), ["value_range", {}]]
    assert pp.parse(as_list)[:4] == ops.train_ops(config)[:4]


def _check(config):
    pp.check(*pp.train_pipeline(config), pp.eval_pipeline(config))


def test_the_default_fields_give_todays_pipelines():
    config = _config(image_size=32, crop_min_area=0.5, random_flip=False)
    assert pp.train_pipeline(config) == (ops.train_ops(config), [])
    assert pp.eval_pipeline(config) == ops.eval_ops(32)
    medium2 = _config(image_size=32, augreg="medium2")
    assert pp.train_pipeline(medium2) == (ops.train_ops(medium2), [("mixup", {"p": 0.5})])


def test_pp_fields_replace_the_pipelines():
    config = _config(
        image_size=16, pp_train=PAPER.replace("224", "16") + "|mixup(0.2)", pp_eval="decode|resize(16)"
    )
    image_ops, batch_ops = pp.train_pipeline(config)
    assert image_ops == pp.parse(PAPER.replace("224", "16")) and batch_ops == [("mixup", {"p": 0.2})]
    assert pp.eval_pipeline(config) == [("decode", {}), ("resize", {"size": 16})]
    _check(config)


def _batches(**pipeline):
    spec = data.get_spec("digits")
    input_fn = data.make_input_fn(
        spec,
        "train",
        global_batch_size=8,
        training=True,
        seed=5,
        ops=pp.parse("decode|resize(8)|value_range"),
        **pipeline,
    )
    return list(input_fn(None).take(2).as_numpy_iterator())


def test_mixup_as_a_batch_op_gives_the_batches_of_the_mixup_flag():
    flag = _batches(mixup=0.5)
    named = _batches(batch_ops=pp.parse("mixup(0.5)"))
    for (a, b), (c, d) in zip(flag, named):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    assert flag[0][1].shape == (8, 10)  # soft targets


def test_random_grayscale_is_one_file_and_a_registered_random_op():
    assert "random_grayscale" in ops.registered()
    image = tf.constant(np.random.default_rng(0).integers(0, 256, (6, 5, 3)), tf.uint8)
    seed = tf.constant([1, 2], tf.int64)
    gray = ops.Chain(pp.parse("random_grayscale(1.0)"))(image, seed).numpy()
    assert (gray[..., 0] == gray[..., 1]).all() and (gray[..., 1] == gray[..., 2]).all()
    np.testing.assert_array_equal(ops.Chain(pp.parse("random_grayscale(0)"))(image, seed), image)
    assert ops.Chain(pp.parse("random_grayscale")).random_ops == ["random_grayscale"]


@pytest.mark.parametrize(
    "pp_train, expected",
    [
        (
            "decode|colour_jitter",
            "--pp_train: unknown op 'colour_jitter'; the registered ops are decode, flip_lr",
        ),
        ("decode|resize(", "--pp_train: cannot read op 'resize(' ("),
        ("decode|resize(x)", "--pp_train: cannot read op 'resize(x)' ('x' is not a literal; quote a text)"),
        ("decode|resize(1, 2, 3)", "--pp_train: op 'resize(1, 2, 3)': too many positional arguments"),
        ("decode|mixup(0.5)|resize(8)", "--pp_train: batch op mixup comes before image op resize"),
        ("|", "--pp_train names no op"),
    ],
)
def test_a_bad_pp_string_is_one_line(pp_train, expected):
    assert _one_line(lambda: pp.train_pipeline(_config(pp_train=pp_train))).startswith(expected)


def test_other_refusals():
    message = _one_line(lambda: pp.train_pipeline(_config(pp_train=PAPER, augreg="light1")))
    assert message.startswith("--pp_train names every training op") and "--augreg" in message
    assert _one_line(lambda: pp.eval_pipeline(_config(pp_eval="decode|resize(8)|mixup(0.5)"))).startswith(
        "--pp_eval: mixup is a batch op"
    )
    assert _one_line(lambda: _check(_config(pp_train="decode|resize(0)")), DatasetError).startswith(
        "image op resize(size=0)"
    )
    assert _one_line(lambda: _check(_config(pp_train="decode|resize(8)|mixup(-1)")), DatasetError).startswith(
        "image op mixup(p=-1): p must be a number > 0"
    )
    assert _one_line(lambda: ops.Chain([("mixup", {"p": 0.5})]), DatasetError) == (
        "mixup is a batch op: it goes after the image ops (batch_ops)"
    )
    with pytest.raises(TypeError, match="put it in the batch ops"):
        data.make_input_fn(
            data.get_spec("digits"),
            "train",
            global_batch_size=8,
            training=True,
            ops=ops.eval_ops(8),
            mixup=0.5,
            batch_ops=[],
        )
