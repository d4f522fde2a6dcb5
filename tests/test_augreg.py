"""AugReg: the official levels, RandAugment and Mixup seeded per (seed, step), soft-target losses, a run."""

import functools
import os
import re
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf
from fixtures import TINY_DIGITS_FLAGS

from configs.fields import DEFAULTS, TRAINING, fields
from keras_vit import checkpoints
from trainers import data, finetune, numerics
from trainers import plan as plan_lib
from trainers.data import augreg
from trainers.errors import UsageError

# The AugReg levels as published: big_vision/configs/vit_i1k.py and vit_i21k.py, RANDAUG_DEF
# ("randaug(N,M)") and MIXUP_DEF (dict(p=...)), the same values in both files.
OFFICIAL = {
    "none": (None, 0.0),
    "light1": ((2, 0), 0.0),
    "light2": ((2, 10), 0.2),
    "medium1": ((2, 15), 0.2),
    "medium2": ((2, 15), 0.5),
    "strong1": ((2, 20), 0.5),
    "strong2": ((2, 20), 0.8),
}


def _config(**values):
    fields = {name: DEFAULTS[name] for name in ("augreg", "randaug", "mixup")}
    return types.SimpleNamespace(**{**fields, **values})


@pytest.mark.parametrize("level", sorted(OFFICIAL))
def test_each_level_sets_the_official_randaugment_and_mixup(level):
    got = augreg.resolve(_config(augreg=level))
    assert (got.randaug, got.mixup) == OFFICIAL[level]


def test_an_explicit_flag_replaces_only_its_own_knob_of_the_level():
    assert augreg.resolve(_config(augreg="medium2", randaug="1,5")) == augreg.AugReg((1, 5), 0.5)
    assert augreg.resolve(_config(augreg="medium2", mixup=0)) == augreg.AugReg((2, 15), 0.0)
    assert augreg.resolve(_config(augreg="strong2", randaug="none", mixup="0.1")) == augreg.AugReg(None, 0.1)
    assert augreg.resolve(_config(randaug="2,9")) == augreg.AugReg((2, 9), 0.0)


@pytest.mark.parametrize(
    "values, flag",
    [({"randaug": "2"}, "--randaug"), ({"randaug": "2,x"}, "--randaug"), ({"mixup": "-1"}, "--mixup")],
)
def test_a_bad_value_is_one_line_naming_the_flag(values, flag):
    with pytest.raises(UsageError, match=f"^{flag}=.*give"):
        augreg.resolve(_config(**values))


def test_the_training_ops_place_randaugment_after_the_flip_and_before_the_value_range():
    config = types.SimpleNamespace(
        image_size=8, crop_min_area=0.05, random_flip=True, augreg="light2", randaug="level", mixup="level"
    )
    names = [name for name, _ in data.train_ops(config)]
    assert names == ["decode", "inception_crop", "resize", "flip_lr", "randaug", "value_range"]
    assert data.train_ops(config)[4][1] == {"num_ops": 2, "magnitude": 10}


@functools.cache
def _batches(mixup, start_step=0, steps=2, replicas=1):
    spec = data.get_spec("digits")
    ops = [("decode", {}), ("resize", {"size": 8}), ("value_range", {})]
    input_fn = data.make_input_fn(
        spec, "train", global_batch_size=8, training=True, ops=ops, seed=5, start_step=start_step, mixup=mixup
    )
    context = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=replicas
    )
    batches = list(input_fn(context).take(steps * replicas).as_numpy_iterator())
    # The replicas' batches of one step, joined: the global batch.
    return [
        tuple(np.concatenate([b[i] for b in batches[s * replicas : (s + 1) * replicas]]) for i in range(2))
        for s in range(steps)
    ]


def _partner(x):
    return x.reshape(-1, 2, *x.shape[1:])[:, ::-1].reshape(x.shape)


def test_mixup_mixes_pairs_with_the_weight_of_seed_and_step():
    plain = _batches(0.0)
    mixed = _batches(0.5)
    for step, ((images, labels), (mixed_images, targets)) in enumerate(zip(plain, mixed)):
        weight = float(augreg.mixup_weight(5, step, 0.5))
        assert 0.5 <= weight < 1.0
        np.testing.assert_allclose(targets.sum(-1), 1.0, rtol=1e-6)
        one_hot = np.eye(10, dtype=np.float32)[labels]
        np.testing.assert_allclose(targets, weight * one_hot + (1 - weight) * _partner(one_hot), atol=1e-6)
        expected = weight * images + (1 - weight) * _partner(images)
        np.testing.assert_allclose(mixed_images, expected, atol=1e-5)
    assert float(augreg.mixup_weight(5, 0, 0.5)) != float(augreg.mixup_weight(5, 1, 0.5))


def test_a_mixed_batch_is_the_same_again_after_a_resume_and_on_two_replicas():
    first = _batches(0.5)
    again = _batches(0.5)
    for (a, b), (c, d) in zip(first, again):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    assert not np.array_equal(first[0][0], first[1][0])
    resumed = _batches(0.5, start_step=1, steps=1)
    np.testing.assert_array_equal(resumed[0][0], first[1][0])
    np.testing.assert_array_equal(resumed[0][1], first[1][1])
    split = _batches(0.5, replicas=2)
    for (a, b), (c, d) in zip(first, split):
        np.testing.assert_allclose(a, c, atol=1e-6)
        np.testing.assert_array_equal(b, d)


def test_softmax_loss_on_soft_targets_is_their_cross_entropy():
    logits = np.array([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]], np.float32)
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    soft = np.array([[0.7, 0.3, 0.0], [0.0, 0.4, 0.6]], np.float32)
    got = numerics.per_example_loss("softmax", tf.constant(soft), tf.constant(logits)).numpy()
    np.testing.assert_allclose(got, -(soft * log_softmax).sum(-1), rtol=1e-6)
    labels = np.array([2, 0])
    one_hot = numerics.per_example_loss(
        "softmax", tf.constant(np.eye(3, dtype=np.float32)[labels]), tf.constant(logits)
    )
    sparse = numerics.per_example_loss("softmax", tf.constant(labels), tf.constant(logits))
    np.testing.assert_allclose(one_hot.numpy(), sparse.numpy(), rtol=1e-6)


RUN = [
    "--dataset=digits",
    *TINY_DIGITS_FLAGS,
    "--num_layers=2",  # two blocks: two drop-path rates
    "--batch_size=16",
    "--total_steps=4",
    "--warmup_steps=1",
    "--steps_per_loop=2",
    "--eval_every=0",
    "--eval_splits=test=test[:16]",
    "--checkpoint_every=2",
    "--augreg=medium2",
    "--stochastic_depth=0.1",
    "--dropout_rate=0.1",
]


def _weights(workdir):
    with np.load(os.path.join(workdir, "model.npz"), allow_pickle=False) as f:
        return {name: f[name] for name in f.files}


@pytest.mark.slow
def test_a_medium2_run_resumed_from_its_middle_checkpoint_ends_with_the_same_weights(tmp_path, capsys):
    workdir = str(tmp_path / "run")
    assert finetune.main(["finetune", f"--workdir={workdir}", *RUN]) == 0
    reference = _weights(workdir)
    # The run as if killed after its step-2 checkpoint.
    folder = os.path.join(workdir, "checkpoints")
    for name in os.listdir(folder):
        if name.startswith("ckpt-4."):
            os.remove(os.path.join(folder, name))
    with open(os.path.join(folder, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-2"\n')
    for name in ("results.json", "model.npz"):
        os.remove(os.path.join(workdir, name))
    shutil.rmtree(os.path.join(workdir, "train"), ignore_errors=True)
    assert finetune.main(["finetune", f"--workdir={workdir}", *RUN]) == 0
    assert "resum" in capsys.readouterr().out.lower()
    resumed = _weights(workdir)
    assert reference.keys() == resumed.keys()
    for name, value in reference.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_the_training_guide_table_of_checkpoint_levels_is_what_their_file_names_say():
    guide = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "guides", "training.md")
    with open(guide, encoding="utf-8") as f:
        section = f.read().split("## AugReg:", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\S+) \| (\w+) \| ([\d.]+) \| ([\d.]+) \|$", section, re.MULTILINE)
    augreg_checkpoints = checkpoints.REGISTRY["augreg-imagenet21k"]
    assert {row[0] for row in rows} == set(augreg_checkpoints)
    for variant, level, dropout, depth in rows:
        name = augreg_checkpoints[variant].url.rsplit("/", 1)[1]
        assert f"-aug_{level}-" in name and f"-do_{dropout}-sd_{depth}." in name, (variant, name)
        assert level in augreg.LEVELS


def test_mixup_refuses_a_per_replica_batch_it_cannot_pair():
    config = fields(TRAINING)
    config.augreg, config.batch_size = "medium2", 6
    one, two = tf.distribute.get_strategy(), tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert plan_lib.resolve(config, one).mixes
    with pytest.raises(
        UsageError, match="Mixup mixes pairs of examples: --batch_size 6 must be a multiple of 2 x 2"
    ):
        plan_lib.resolve(config, two)
    config.mixup = "0"  # Mixup off: no pairs needed
    assert not plan_lib.resolve(config, two).mixes
