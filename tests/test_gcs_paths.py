"""Trainers with a workdir and weights on a TensorFlow file system (ram:// standing in for gs://).

In-process, on the bundled digits with a tiny ViT: pre-train into ram://, fine-tune from the
ram:// model.npz into another ram:// workdir, then rerun to resume. Nothing may land in the
local working directory (the old bug: a local folder named "gs:").
"""

import uuid

import numpy as np
import pytest
import tensorflow as tf
from fixtures import TINY_SHAPE

from keras_vit import fileio
from trainers import finetune, pretrain

# tests/fixtures.py's tiny ViT at the digits' 16 px, and a run of 6 steps.
TINY = dict(
    TINY_SHAPE,
    batch_size=32,
    total_steps=6,
    warmup_steps=1,
    steps_per_loop=3,
    eval_every=0,
    checkpoint_every=3,
    jit_compile="false",
)


@pytest.fixture
def bucket():
    path = f"ram://runs-{uuid.uuid4().hex}"
    yield path
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)


def _params(path):
    with fileio.open(path, "rb") as f, np.load(f, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def _assert_run_written(workdir):
    for name in ("config.json", "results.json", "model.npz", "checkpoints/checkpoint"):
        assert tf.io.gfile.exists(f"{workdir}/{name}"), name
    assert tf.io.gfile.glob(f"{workdir}/checkpoints/ckpt-6.index")
    assert tf.io.gfile.glob(f"{workdir}/train/events.out.tfevents.*")
    assert tf.io.gfile.glob(f"{workdir}/eval/events.out.tfevents.*")


@pytest.mark.slow  # 13 s on the 2-core Xeon: three trainer runs
def test_pretrain_then_finetune_then_resume_on_a_remote_file_system(bucket, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    upstream = pretrain.get_config("digits")
    upstream.update(TINY, workdir=f"{bucket}/pretrain")
    assert pretrain.run(upstream)["steps"] == 6
    _assert_run_written(upstream.workdir)

    downstream = finetune.get_config("digits")
    # A zero learning rate keeps the loaded encoder as it was: the export shows what was loaded.
    downstream.update(
        TINY, workdir=f"{bucket}/finetune", weights=f"{upstream.workdir}/model.npz", base_lr=0.0
    )
    first = finetune.run(downstream)
    _assert_run_written(downstream.workdir)
    loaded, exported = _params(f"{upstream.workdir}/model.npz"), _params(f"{downstream.workdir}/model.npz")
    for key in ("embedding/kernel", "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"):
        np.testing.assert_array_equal(exported[key], loaded[key], err_msg=key)
    assert "pre_logits/kernel" in loaded and "pre_logits/kernel" not in exported

    capsys.readouterr()
    again = finetune.run(downstream)  # the same workdir: resumes from the last checkpoint
    out = capsys.readouterr().out
    assert f"Resumed from {downstream.workdir}/checkpoints/ckpt-6 at step 6." in out
    assert "step 3/6" not in out and "step 6/6" not in out  # no step was trained again
    assert again["steps"] == 6 and again["eval"] == first["eval"]
    assert list(tmp_path.iterdir()) == []  # nothing written locally, no folder named "ram:"
