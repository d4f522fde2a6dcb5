"""Multi-label data: --loss=sigmoid, multi-hot targets from folders and TFDS, the -10 head bias,
precision@1, and the one-line refusals of what needs one label per image."""

import os
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from fixtures import MULTI_LABEL_CLASSES, MULTI_LABEL_TFDS, MULTI_LABEL_TFDS_LABELS, TINY_CONFIG
from PIL import Image
from test_data import assert_same_batches, global_batches, take
from trainer_cli import TINY_MODEL, read_results, scalar_tags

from trainers import (
    data,
    distribute,
    features,
    fewshot,
    finetune,
    loop,
    model_builder,
    numerics,
    optimizers,
    plan_pieces,
)

# ------------------------------------------------------------------------------------------- the loss


def test_sigmoid_loss_matches_the_formula_and_stays_finite_for_huge_logits():
    logits = tf.constant([[2.0, -1.0, 0.0], [200.0, -200.0, 3.0]])
    targets = tf.constant([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    got = numerics.per_example_loss("sigmoid", targets, logits).numpy()
    # sum_k -[z log s(x) + (1 - z) log(1 - s(x))] = sum_k softplus(x) - z x, in float64.
    x, z = logits.numpy().astype(np.float64), targets.numpy()
    np.testing.assert_allclose(got, (np.logaddexp(0.0, x) - z * x).sum(-1), rtol=1e-6)
    # By hand: row 1 = log(1 + e^-2) + log(1 + e^-1) + log 2; row 2 = 200 + 200 + log(1 + e^-3).
    np.testing.assert_allclose(got, [0.126928 + 0.313262 + 0.693147, 400.048587], rtol=1e-5)
    # One label per image (int labels) means one-hot targets.
    one_hot = numerics.per_example_loss("sigmoid", tf.constant([2, 0]), logits).numpy()
    expected = numerics.per_example_loss("sigmoid", tf.constant([[0.0, 0, 1], [1, 0, 0]]), logits).numpy()
    np.testing.assert_allclose(one_hot, expected)
    assert one_hot[1] == pytest.approx(3.048587, rel=1e-5)  # ~0 + ~0 + log(1 + e^3)


def test_softmax_loss_is_the_cross_entropy_of_the_class_index():
    logits = np.array([[2.0, -1.0, 0.0], [200.0, -200.0, 3.0]], np.float32)
    got = numerics.per_example_loss("softmax", tf.constant([2, 0]), tf.constant(logits)).numpy()
    x = logits.astype(np.float64)
    top = x.max(-1, keepdims=True)
    log_softmax = x - top - np.log(np.exp(x - top).sum(-1, keepdims=True))
    np.testing.assert_allclose(got, [-log_softmax[0, 2], -log_softmax[1, 0]], rtol=1e-6, atol=1e-6)


def test_precision_at_1_by_hand():
    logits = tf.constant([[0.1, 2.0, -1.0], [3.0, 1.0, 0.0], [0.0, 0.0, 5.0], [1.0, 2.0, 3.0]])
    multi_hot = tf.constant([[1.0, 1, 0], [0, 1, 1], [0, 0, 1], [1, 1, 0]])
    # tops are classes 1, 0, 2, 2: among the labels, not, among, not.
    np.testing.assert_array_equal(numerics.top1_hits(multi_hot, logits).numpy(), [1, 0, 1, 0])
    np.testing.assert_array_equal(numerics.top1_hits(tf.constant([1, 1, 2, 0]), logits).numpy(), [1, 0, 1, 0])


def test_sigmoid_trainer_reports_prec_at_1_over_real_examples_on_two_replicas():
    strategy = distribute.create_strategy("cpu", cpu_devices=2)
    with strategy.scope():
        # The model's logits are its inputs, so the metrics can be worked out by hand.
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(3, use_bias=False, kernel_initializer="identity")]
        )
        trainer = loop.TensorFlowTrainer(
            strategy=strategy,
            model=model,
            global_batch_size=4,
            loss="sigmoid",
            optimizer=optimizers.make_optimizer("sgd", 0.1),
        )
    logits = np.array(
        [[0.1, 2, -1], [3, 1, 0], [0, 0, 5], [1, 2, 3], [0, 0, 9], [9, 0, 0], [9, 0, 0], [9, 0, 0]],
        np.float32,
    )
    targets = np.array(
        [[1, 1, 0], [0, 1, 1], [0, 0, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 0, 0], [1, 0, 0]], np.float32
    )
    weights = np.array([1, 1, 1, 1, 1, 0, 0, 0], np.float32)  # the last 3 rows: padding that would be hits
    evaluation = tf.data.Dataset.from_tensor_slices((logits, targets, weights)).batch(4)
    metrics = trainer.evaluate(strategy.experimental_distribute_dataset(evaluation))
    assert trainer.metric_name == "prec@1" and set(metrics) == {"loss", "prec@1", "examples"}
    assert metrics["examples"] == 5
    assert metrics["prec@1"] == pytest.approx(2 / 5)  # rows 0 and 2; row 4's top (class 2) is not a label
    x, z = logits[:5].astype(np.float64), targets[:5]
    assert metrics["loss"] == pytest.approx((np.logaddexp(0, x) - z * x).sum(-1).mean(), rel=1e-5)


# --------------------------------------------------------------------------------------- the head bias


def _tiny_config(**changes):
    config = finetune.get_config("digits")
    config.update(TINY_CONFIG, **changes)
    return config


def _tiny_settings(**changes):
    return plan_pieces.model_settings(_tiny_config(**changes))


def _head(model):
    head = model.get_layer("head")
    return head.kernel.numpy(), head.bias.numpy()


def test_a_new_sigmoid_head_starts_at_bias_minus_10_and_softmax_at_zero(tmp_path):
    from keras_vit import weights as weights_lib

    kernel, bias = _head(model_builder.build_model(_tiny_settings(loss="sigmoid"), 7))
    np.testing.assert_array_equal(bias, np.full(7, -10.0))
    np.testing.assert_array_equal(kernel, 0.0)
    kernel, bias = _head(model_builder.build_model(_tiny_settings(loss="softmax"), 7))
    np.testing.assert_array_equal(bias, 0.0)
    np.testing.assert_array_equal(kernel, 0.0)

    # A trained head of the right size is kept; a new one (--new_head, another class count) is not.
    trained = model_builder.build_model(_tiny_settings(), 7)
    trained.get_layer("head").bias.assign(np.linspace(-1, 1, 7).astype("float32"))
    path = str(tmp_path / "trained.npz")
    weights_lib.save_npz(trained, path)
    kept = _head(model_builder.build_model(_tiny_settings(loss="sigmoid", weights=path, new_head=False), 7))[
        1
    ]
    np.testing.assert_allclose(kept, np.linspace(-1, 1, 7), rtol=1e-6)
    replaced = _head(
        model_builder.build_model(_tiny_settings(loss="sigmoid", weights=path, new_head=True), 7)
    )[1]
    np.testing.assert_array_equal(replaced, np.full(7, -10.0))
    resized = _head(
        model_builder.build_model(_tiny_settings(loss="sigmoid", weights=path, new_head=False), 4)
    )[1]
    np.testing.assert_array_equal(resized, np.full(4, -10.0))


# ---------------------------------------------------------------------------------- a multi-label folder

CLASSES = ["cat", "dog", "outdoor"]
# file -> the class folders holding it; every name is one image, so these are its labels.
TRAIN = {
    "x.png": ["cat", "outdoor"],
    "y.png": ["dog", "outdoor"],
    "s.png": ["cat", "outdoor"],
    "a.png": ["cat"],
    "b.png": ["dog"],
    "c.png": ["outdoor"],
    "d.png": ["cat", "dog", "outdoor"],
}
TEST = {"t.png": ["cat", "outdoor"], "u.png": ["dog"], "v.png": ["dog", "outdoor"]}


def _save(path, seed, image_format="PNG"):
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, format=image_format)


@pytest.fixture(scope="module")
def multi_label_folder(tmp_path_factory):
    """Images in several class folders: copies, a hard link (y.png) and a symbolic link (s.png)."""
    root = tmp_path_factory.mktemp("multi_label")
    for split, files in (("train", TRAIN), ("test", TEST)):
        for seed, (name, classes) in enumerate(files.items()):
            first = root / split / classes[0] / name
            _save(first, seed + 100 * (split == "test"))
            for other in classes[1:]:
                copy = root / split / other / name
                copy.parent.mkdir(parents=True, exist_ok=True)
                if name == "y.png":
                    os.link(first, copy)
                elif name == "s.png":
                    os.symlink(os.path.relpath(first, copy.parent), copy)
                else:
                    shutil.copy(first, copy)
    # Same name and size, other pixels (uncompressed BMP): two different images, one label each.
    _save(root / "train" / "cat" / "1.bmp", 7, "BMP")
    _save(root / "train" / "dog" / "1.bmp", 8, "BMP")
    return root


def _expected_multi_hot(spec, split, files):
    """The multi-hot row of every example of `split`, in the split's natural order."""
    rows = []
    for path in spec.records(split).payloads:
        name, folder = os.path.basename(path), os.path.basename(os.path.dirname(path))
        classes = files.get(name, [folder])  # the 1.bmp files: their own folder only
        rows.append([float(c in classes) for c in CLASSES])
    return np.array(rows, np.float32)


def test_folder_images_in_several_class_folders_are_one_multi_hot_example(multi_label_folder):
    spec = data.get_spec(f"folder:{multi_label_folder}")
    assert spec.multi_label and spec.class_names == CLASSES
    assert spec.num_examples["train"] == len(TRAIN) + 2 and spec.num_examples["test"] == len(TEST)
    expected = _expected_multi_hot(spec, "train", TRAIN)
    assert sorted(map(tuple, expected)) == sorted(
        [tuple(float(c in classes) for c in CLASSES) for classes in TRAIN.values()] + [(1, 0, 0), (0, 1, 0)]
    )
    # Evaluation: exact multi-hot rows, then weight-0 padding with an all-zero target.
    fn = data.make_input_fn(spec, "test", image_size=8, global_batch_size=4, training=False)
    ((_, labels, weights),) = take(fn, 10)
    assert labels.dtype == np.float32 and labels.shape == (4, 3)
    np.testing.assert_array_equal(labels[:3], _expected_multi_hot(spec, "test", TEST))
    np.testing.assert_array_equal(labels[3], 0.0)
    np.testing.assert_array_equal(weights, [1, 1, 1, 0])
    # Training: one epoch (9 examples) holds every example's row once.
    fn = data.make_input_fn(spec, "train", image_size=8, global_batch_size=9, training=True, seed=1)
    ((_, epoch),) = take(fn, 1)
    assert sorted(map(tuple, epoch)) == sorted(map(tuple, expected))


def test_multi_label_stream_resumes_exactly_and_ignores_replica_count(multi_label_folder):
    spec = data.get_spec(f"folder:{multi_label_folder}")

    def input_fn(start_step=0):
        return data.make_input_fn(
            spec, "train", image_size=8, global_batch_size=4, training=True, seed=3, start_step=start_step
        )

    fresh = take(input_fn(), 6)  # 24 examples: crosses two epochs of 9
    assert_same_batches(take(input_fn(start_step=4), 2), fresh[4:])
    assert_same_batches(global_batches(input_fn(), 6, 2, 4), fresh)


@pytest.mark.slow  # 19 s: a training run
def test_multi_label_folder_trains_with_sigmoid_and_reports_prec_at_1(multi_label_folder, tmp_path, capsys):
    workdir = tmp_path / "run"
    argv = [
        "finetune",
        *TINY_MODEL,
        f"--dataset=folder:{multi_label_folder}",
        f"--workdir={workdir}",
        "--loss=sigmoid",
        "--train_split=train",
        "--eval_splits=test=test",
        "--batch_size=4",
        "--cpu_devices=2",
        "--total_steps=8",
        "--warmup_steps=1",
        "--base_lr=0.1",
        "--steps_per_loop=4",
        "--eval_every=4",
        "--checkpoint_every=0",
        "--crop_min_area=1.0",
    ]
    assert finetune.main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    results = read_results(workdir)
    metrics = results["eval"]["test"]
    assert set(metrics) == {"loss", "prec@1", "examples"} and metrics["examples"] == len(TEST)
    assert metrics["prec@1"] * 3 == pytest.approx(round(metrics["prec@1"] * 3))  # hits of 3 images
    # The head starts at sigmoid(-10): 10 nats per true label (14/9 per image), ~0 for the others;
    # from zero it would start at 3 log 2 = 2.1. Training brings the loss down from there.
    first_loss = float(re.search(r"step 4/8  loss ([0-9.]+)", out).group(1))
    assert first_loss > 10.0 and results["train_loss"] < first_loss - 1.0
    tags = scalar_tags(workdir / "eval")
    assert [step for step, _ in tags["test/prec@1"]] == [4, 8] and "test/accuracy" not in tags
    assert tags["test/prec@1"][-1][1] == pytest.approx(metrics["prec@1"])
    assert "test: prec@1" in out and "final test: prec@1" in out


@pytest.mark.parametrize(
    "flags,message",
    [
        ([], "has images with several labels: train it with --loss=sigmoid"),  # softmax is the default
        (["--loss=softmax"], "train it with --loss=sigmoid"),
        (["--loss=sigmoid", "--examples_per_class=1"], "--examples_per_class needs one label per image"),
    ],
)
def test_what_needs_one_label_per_image_is_refused_in_one_line(
    multi_label_folder, tmp_path, capsys, flags, message
):
    workdir = tmp_path / "run"
    argv = [
        "finetune",
        *TINY_MODEL,
        f"--dataset=folder:{multi_label_folder}",
        f"--workdir={workdir}",
        "--train_split=train",
        "--eval_splits=test=test",
        "--batch_size=4",
        *flags,
    ]
    assert finetune.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not workdir.exists()


def test_few_shot_probes_refuse_multi_label_data(multi_label_folder, tmp_path, capsys):
    argv = [
        "fewshot",
        f"--dataset=folder:{multi_label_folder}",
        "--model=pixels",
        "--image_size=8",
        "--shots=1",
        f"--workdir={tmp_path / 'probe'}",
    ]
    assert fewshot.main(argv) == 2
    err = capsys.readouterr().err
    assert "a few-shot probe needs one label per image" in err and err.count("\n") == 1
    spec = data.get_spec(f"folder:{multi_label_folder}")
    with pytest.raises(data.DatasetError, match="a linear probe needs one label per image"):
        features.extract_features(features.PIXELS, spec, "test", image_size=8, batch_size=4)


# ------------------------------------------------------------------------- TFDS Sequence(ClassLabel)


@pytest.fixture(scope="module")
def squares(multi_label_tfds_dir):
    """The shared fake dataset shaped like voc (tests/multi_label_tfds.py): an image and a
    Sequence(ClassLabel) `labels`, one image with no label (an all-zero target)."""
    return data.get_spec(MULTI_LABEL_TFDS, data_dir=multi_label_tfds_dir)


def _multi_hot_rows(label_lists):
    return np.array(
        [[float(c in labels) for c in range(len(MULTI_LABEL_CLASSES))] for labels in label_lists], np.float32
    )


def test_tfds_sequence_of_class_label_is_read_as_multi_hot(squares, monkeypatch):
    assert squares.multi_label and squares.class_names == MULTI_LABEL_CLASSES
    index_rows = squares.records("test").read_labels()
    assert sorted(sorted(int(c) for c in row if c >= 0) for row in index_rows) == sorted(
        sorted(labels) for labels in MULTI_LABEL_TFDS_LABELS
    )
    expected = _multi_hot_rows([[c for c in row if c >= 0] for row in index_rows])
    fn = data.make_input_fn(squares, "test", image_size=8, global_batch_size=4, training=False)
    batches = take(fn, 10)
    labels = np.concatenate([b[1] for b in batches])
    np.testing.assert_array_equal(labels[:7], expected)
    np.testing.assert_array_equal(labels[7:], 0.0)
    # Streamed in shuffle windows of 3 records, whose label lists are padded to different widths.
    monkeypatch.setattr(data.pipeline, "SHUFFLE_BUFFER", 3)

    def input_fn(start_step=0):
        return data.make_input_fn(
            squares, "train", image_size=8, global_batch_size=7, training=True, seed=2, start_step=start_step
        )

    fresh = take(input_fn(), 3)
    for _, epoch in fresh:
        assert sorted(map(tuple, epoch)) == sorted(map(tuple, _multi_hot_rows(MULTI_LABEL_TFDS_LABELS)))
    assert_same_batches(take(input_fn(start_step=2), 1), fresh[2:])
    with pytest.raises(data.DatasetError, match="--examples_per_class needs one label per image"):
        data.make_input_fn(
            squares, "train", image_size=8, global_batch_size=4, training=True, examples_per_class=1
        )
