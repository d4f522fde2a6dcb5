"""trainers.objectives: masked patch pre-training through trainers.pretrain, end to end on digits."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from fixtures import TINY_DIGITS, TINY_DIGITS_FLAGS, tiny_vit
from trainer_cli import scalar_tags

from keras_vit import masked_patches
from trainers import data, objectives, pretrain

STEPS = 160
# tests/fixtures.py's digits shape with two blocks (the depth this run's learning checks below were
# set on); checkpoints at 80 and 160.
RUN = [
    "--dataset=digits",
    "--objective=masked_patch",
    *TINY_DIGITS_FLAGS,
    "--num_layers=2",
    f"--total_steps={STEPS}",
    "--warmup_steps=15",
    "--base_lr=0.007",
    f"--steps_per_loop={STEPS // 2}",
    "--eval_every=0",
    f"--checkpoint_every={STEPS // 2}",
]


def test_pretraining_defaults_to_classification():
    assert pretrain.get_config("digits").objective == "classification"


def _objective(target):
    vit = tiny_vit(**TINY_DIGITS, num_classes=3, include_preprocessing=False)
    return objectives.MaskedPatch(vit, target)


def test_loss_and_accuracy_are_means_over_each_images_corrupted_patches():
    rng = np.random.default_rng(0)
    images = tf.constant(rng.uniform(-1, 1, (4, 16, 16, 3)), tf.float32)
    noise = tf.constant(rng.uniform(0, 1, (4, 2, 16)), tf.float32)  # mask_patches' draw
    # A new head is zero: every logit equal (cross-entropy log 512, argmax class 0), and every
    # regressed pixel 0 (squared error = the target's square).
    loss, accuracy = (v.numpy() for v in _objective("mean_color").per_example(images, noise, False))
    np.testing.assert_allclose(loss, np.log(512), rtol=1e-5)
    classes = masked_patches.targets(images, 4, "mean_color").numpy()
    # The draw's first row chooses the corrupted patches: the 8 of lowest noise in each image.
    corrupted = np.argsort(np.argsort(noise[:, 0].numpy(), axis=-1), axis=-1) < 8
    np.testing.assert_allclose(accuracy, [(classes[i][corrupted[i]] == 0).mean() for i in range(4)])
    loss = _objective("l2").per_example(images, noise, False)[0].numpy()
    squares = (masked_patches.targets(images, 4, "l2").numpy() ** 2).mean(axis=-1)
    np.testing.assert_allclose(loss, [squares[i][corrupted[i]].mean() for i in range(4)], rtol=1e-5)
    assert not np.allclose(loss, squares.mean(axis=-1), rtol=1e-5)  # the clean patches do not count


def test_a_draw_for_another_patch_grid_is_refused():
    images = tf.zeros((2, 16, 16, 3))
    with pytest.raises(ValueError, match=r"covers 64 patches, but the model cuts 16x16 px images into 16: "):
        _objective("mean_color").per_example(images, tf.zeros((2, 2, 64)), False)


def _majority_share():
    """How often the commonest mean-colour class occurs among the digits test split's patches."""
    spec = data.get_spec("digits")
    input_fn = data.make_input_fn(
        spec, "test", ops=data.eval_ops(16), global_batch_size=128, training=False, seed=0
    )
    counts = np.zeros(512)
    for images, _, weights in input_fn(tf.distribute.InputContext()):
        classes = masked_patches.targets(tf.cast(images, tf.float32), 4, "mean_color").numpy()
        counts += np.bincount(classes[weights.numpy() > 0].ravel(), minlength=512)
    return counts.max() / counts.sum()


@pytest.mark.slow
def test_masked_patch_pretraining_learns_and_resumes(tmp_path, capsys):
    workdir = tmp_path / "mpp"
    assert pretrain.main(["pretrain", f"--workdir={workdir}", *RUN]) == 0
    out = capsys.readouterr().out
    results = json.loads((workdir / "results.json").read_text())
    accuracy = results["eval"]["test"]["masked_patch_accuracy"]
    # Predicting the background everywhere scores the majority share; the run learned more.
    assert accuracy > _majority_share() + 0.05, (accuracy, out[-2000:])
    assert "masked_patch_accuracy" in out and "final test: masked_patch_accuracy" in out
    assert "masked_patch_accuracy" in scalar_tags(workdir / "train")
    assert {"test/masked_patch_accuracy", "test/loss"} <= set(scalar_tags(workdir / "eval"))

    # The export is the ViT alone, in the official layout, without a pre-logits layer.
    with np.load(workdir / "model.npz", allow_pickle=False) as npz:
        keys = set(npz.files)
    assert "embedding/kernel" in keys and "Transformer/encoder_norm/scale" in keys
    assert not any("mask" in k or "pre_logits" in k for k in keys), sorted(keys)

    # Resume: from the checkpoint at the half, the run ends with the same weights. The mask
    # embedding and the prediction head come back from the checkpoint too, or this differs.
    resumed = tmp_path / "resumed"
    shutil.copytree(workdir, resumed)
    for path in (resumed / "checkpoints").glob(f"ckpt-{STEPS}.*"):
        path.unlink()
    os.remove(resumed / "model.npz")
    assert pretrain.main(["pretrain", f"--workdir={resumed}", *RUN]) == 0
    assert f"at step {STEPS // 2}" in capsys.readouterr().out
    with np.load(workdir / "model.npz") as a, np.load(resumed / "model.npz") as b:
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # Fine-tuning from it: tests/test_demo.py (the finetune_masked_patch stages).


def test_a_target_the_patches_cannot_give_is_one_line_before_anything_is_written(tmp_path, capsys):
    argv = ["pretrain", f"--workdir={tmp_path / 'w'}", "--dataset=digits", "--objective=masked_patch"]
    code = pretrain.main([*argv, "--masked_target=downsampled", "--patch_size=2", "--num_layers=1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--objective=masked_patch: " in err and "patch size 2 is not a multiple of 4" in err
    assert not (tmp_path / "w").exists()
