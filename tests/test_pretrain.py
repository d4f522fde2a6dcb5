"""python -m trainers.pretrain on the bundled digits with a tiny ViT (subprocesses).

Pre-training differs from fine-tuning in what the loop must carry: Adam with decoupled weight
decay, dropout (whose random state must survive a resume), the pre-logits layer, few-shot
probes during training, and an exported model.npz that fine-tuning loads.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from fixtures import TINY_DIGITS_FLAGS
from trainer_cli import checkpoint_steps, read_results, run_cli, scalar_tags

RUN = [
    "--dataset=digits",
    *TINY_DIGITS_FLAGS,
    "--batch_size=32",
    "--total_steps=20",
    "--warmup_steps=5",
    "--base_lr=0.003",
    "--steps_per_loop=5",
    "--eval_every=10",
    "--checkpoint_every=10",
    "--dropout_rate=0.1",
    "--seed=3",
]


FEWSHOT = ["--fewshot_datasets=digits", "--fewshot_shots=1,5", "--fewshot_every=10"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("pretrain") / "run")
    proc = run_cli("pretrain", RUN + FEWSHOT + [f"--workdir={workdir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return workdir


@pytest.mark.slow
def test_pretrain_logs_fewshot_and_exports_weights(pretrained):
    results = read_results(pretrained)
    assert results["steps"] == 20 and results["eval"]["test"]["examples"] == 360
    assert 0.0 <= results["fewshot/digits/5shot_accuracy"] <= 1.0
    evals = scalar_tags(os.path.join(pretrained, "eval"))
    assert [s for s, _ in evals["fewshot/digits/5shot_accuracy"]] == [10, 20]
    with np.load(os.path.join(pretrained, "model.npz"), allow_pickle=False) as params:
        assert params["pre_logits/kernel"].shape == (32, 32)  # representation size = hidden size
        assert params["head/kernel"].shape == (32, 10)
    assert checkpoint_steps(pretrained) == [10, 20]
    config = open(os.path.join(pretrained, "config.json")).read()
    assert '"optimizer": "adam"' in config and '"weight_decay": 0.1' in config


@pytest.mark.slow
def test_resume_with_dropout_is_exact(pretrained, tmp_path):
    """Resuming from step 10 redraws the same dropout masks: same results as the full run."""
    import shutil

    workdir = str(tmp_path / "run")
    shutil.copytree(pretrained, workdir)
    directory = os.path.join(workdir, "checkpoints")
    for name in os.listdir(directory):
        if name.startswith("ckpt-20"):
            os.remove(os.path.join(directory, name))
    tf.compat.v1.train.update_checkpoint_state(directory, os.path.join(directory, "ckpt-10"))
    os.remove(os.path.join(workdir, "results.json"))
    proc = run_cli("pretrain", RUN + FEWSHOT + [f"--workdir={workdir}"])  # the same command
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "at step 10" in proc.stdout
    resumed, full = read_results(workdir), read_results(pretrained)
    assert resumed["train_loss"] == pytest.approx(full["train_loss"], rel=1e-6)
    assert resumed["eval"]["test"]["loss"] == pytest.approx(full["eval"]["test"]["loss"], rel=1e-6)


@pytest.mark.slow
def test_finetune_loads_the_pretrained_weights(pretrained, tmp_path):
    workdir = str(tmp_path / "ft")
    # A zero learning rate leaves the loaded encoder as it was, so the export must equal the input.
    # --weights names the pre-training run's workdir, which stands for its model.npz.
    proc = run_cli(
        "finetune",
        [
            "--dataset=digits",
            *TINY_DIGITS_FLAGS,
            "--batch_size=32",
            "--total_steps=2",
            "--warmup_steps=0",
            "--base_lr=0",
            "--steps_per_loop=1",
            f"--weights={pretrained}",
            f"--workdir={workdir}",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with (
        np.load(os.path.join(pretrained, "model.npz")) as before,
        np.load(os.path.join(workdir, "model.npz")) as after,
    ):
        for key in ("embedding/kernel", "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"):
            np.testing.assert_array_equal(before[key], after[key])
        assert "pre_logits/kernel" not in after  # fine-tuning drops the pre-logits layer, as vit_jax does
        assert not after["head/kernel"].any()  # a new zero head, untouched at learning rate 0
