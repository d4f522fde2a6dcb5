"""The pictures the trainers log to TensorBoard (trainers/image_summaries.py)."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf
from fixtures import TINY_DIGITS_FLAGS, tiny_vit
from trainer_cli import run_cli

from trainers import image_summaries

RUN = [
    "--dataset=digits",
    *TINY_DIGITS_FLAGS,
    "--batch_size=32",
    "--total_steps=10",
    "--warmup_steps=2",
    "--steps_per_loop=5",
    "--eval_every=5",
    "--fewshot_datasets=digits:5-9",
    "--fewshot_shots=1,2,5",
    "--fewshot_every=5",
]
PICTURES = [
    "pictures/test/attention_rollout",
    "pictures/mean_attention_distance",
    "pictures/position_embedding_similarity",
    "fewshot/accuracy_by_shots_plot",
]


def _images(logdir):
    """{tag: [(step, decoded uint8 image), ...]} of the image summaries under logdir."""
    found = {}
    for path in glob.glob(os.path.join(str(logdir), "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name != "images":
                    continue
                width, height, *encoded = tf.make_ndarray(value.tensor)
                for png in encoded:
                    image = tf.io.decode_png(png).numpy()
                    assert image.shape[:2] == (int(height), int(width))
                    found.setdefault(value.tag, []).append((event.step, image))
    return found


@pytest.mark.slow
def test_a_pretraining_run_logs_the_pictures_at_each_evaluation(tmp_path):
    workdir = str(tmp_path / "run")
    proc = run_cli("pretrain", RUN + [f"--workdir={workdir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    images = _images(os.path.join(workdir, "eval"))
    for tag in PICTURES:
        assert [step for step, _ in images[tag]] == [5, 10], tag
        for _, image in images[tag]:
            assert image.shape[2] == 3 and min(image.shape[:2]) > 200
            assert image.std() > 10  # drawn on, not blank
    rollout = images["pictures/test/attention_rollout"]
    assert not np.array_equal(rollout[0][1], rollout[1][1])  # the model changed between them


def test_pictures_of_a_model_name_true_and_predicted_classes():
    # Two blocks for the rollout, 4 x 4 patches for the attention distances.
    model = tiny_vit(image_size=16, patch_size=4, num_layers=2, num_classes=3, include_preprocessing=False)
    images = np.random.default_rng(0).uniform(-1, 1, (6, 16, 16, 3))
    writer = tf.summary.create_noop_writer()
    pictures = image_summaries.Pictures(model, writer, images, [2, 0, 1, 1, 0, 2], ["a", "b", "c"], 5, "val")
    figures = pictures.figures()
    assert sorted(figures) == [
        "mean_attention_distance",
        "position_embedding_similarity",
        "val/attention_rollout",
    ]
    titles = [axes.get_title() for axes in figures["val/attention_rollout"].axes]
    assert len(titles) == image_summaries.NUM_IMAGES
    assert titles[0].startswith("true c\npredicted ") and titles[0].split()[-1] in "abc"
    assert image_summaries.rendered(figures["mean_attention_distance"]).shape == (1, 360, 480, 3)


def test_fewshot_tags_become_curves_by_dataset():
    tags = {
        "fewshot/cifar10/1shot_accuracy": 0.3,
        "fewshot/cifar10/5shot_accuracy": 0.5,
        "fewshot/cifar10/5shot_accuracy_std": 0.02,
        "fewshot/pets/10shot_accuracy": 0.4,
        "test/accuracy": 0.9,
    }
    accuracy, std = image_summaries.accuracy_by_shots(tags, rename={"pets": "oxford_iiit_pet"})
    assert accuracy == {"cifar10": {1: 0.3, 5: 0.5}, "oxford_iiit_pet": {10: 0.4}}
    assert std == {"cifar10": {5: 0.02}}
    assert image_summaries.accuracy_by_shots({"fewshot/2shot_accuracy": 0.7}) == ({"accuracy": {2: 0.7}}, {})
