"""Damaged data: a TFDS data_dir made by ../shared/tools/fake_tfds.py with a truncated, corrupt or
missing shard gives one line naming the file (exit code 2), never a hang or a traceback; an image
folder's unreadable files are skipped and counted."""

import os
import shutil

import numpy as np
import pytest
from trainer_cli import TINY_MODEL, run_cli

from trainers.data import get_spec
from trainers.data.folders import folder_spec
from trainers.errors import DatasetError

SHARD = os.path.join("cifar10", "3.0.2", "cifar10-{}.tfrecord-00000-of-00001")
RUN = TINY_MODEL + [
    "--dataset=cifar10",
    "--batch_size=16",
    "--total_steps=10",
    "--warmup_steps=2",
    "--steps_per_loop=5",
    "--eval_every=0",
    "--checkpoint_every=0",
]


@pytest.fixture(scope="module")
def good_data_dir(cifar10_data_dir):
    return cifar10_data_dir  # tests/session_data.py's, shared; _copy() below before any damage


def _copy(good_data_dir, tmp_path):
    data_dir = str(tmp_path / "tfds")
    shutil.copytree(good_data_dir, data_dir)
    return data_dir


def _one_error_line(proc):
    lines = [line for line in proc.stderr.splitlines() if line.startswith("finetune: error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def test_a_truncated_shard_is_named_when_the_dataset_opens_before_anything_is_written(
    good_data_dir, tmp_path
):
    data_dir = _copy(good_data_dir, tmp_path)
    shard = os.path.join(data_dir, SHARD.format("train"))
    with open(shard, "r+b") as f:  # a copy cut short
        f.truncate(os.path.getsize(shard) * 2 // 3)
    workdir = str(tmp_path / "run")
    proc = run_cli("finetune", RUN + [f"--data_dir={data_dir}", f"--workdir={workdir}"])
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert shard in line and "truncated" in line and "trainers.prepare" in line, line
    assert not os.path.exists(workdir)


@pytest.mark.slow
def test_a_corrupt_record_found_while_training_is_named_with_its_file(good_data_dir, tmp_path):
    """A flipped byte keeps the file's size, so only reading the record finds it (its checksum)."""
    data_dir = _copy(good_data_dir, tmp_path)
    shard = os.path.join(data_dir, SHARD.format("train"))
    with open(shard, "r+b") as f:
        f.seek(os.path.getsize(shard) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    get_spec("cifar10", data_dir=data_dir)  # opens: the sizes add up
    proc = run_cli("finetune", RUN + [f"--data_dir={data_dir}", f"--workdir={tmp_path / 'run'}"])
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert shard in line and "corrupted record" in line, line


def test_a_missing_test_shard_is_named(good_data_dir, tmp_path):
    data_dir = _copy(good_data_dir, tmp_path)
    shard = os.path.join(data_dir, SHARD.format("test"))
    os.remove(shard)
    with pytest.raises(DatasetError, match="missing") as caught:
        get_spec("cifar10", data_dir=data_dir)
    assert shard in str(caught.value) and "\n" not in str(caught.value)


def test_an_intact_data_dir_reports_no_damaged_file(good_data_dir):
    spec = get_spec("cifar10", data_dir=good_data_dir)
    assert spec.reader.damaged_files() == []


def test_unreadable_files_of_an_image_folder_are_skipped_and_counted(tmp_path):
    from PIL import Image

    for shade, label in enumerate(("a", "b")):
        folder = tmp_path / "train" / label
        folder.mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((8, 8, 3), 60 * i + shade, np.uint8)).save(folder / f"{i}.png")
    (tmp_path / "train" / "a" / "empty.jpg").write_bytes(b"")
    (tmp_path / "train" / "b" / "text.png").write_bytes(b"not an image at all")
    good = tmp_path / "train" / "b" / "0.png"
    (tmp_path / "train" / "b" / "cut.png").write_bytes(good.read_bytes()[:40])
    spec = folder_spec("folder:x", str(tmp_path))
    assert spec.skipped == 3
    assert spec.num_examples["train"] == 6
