"""python -m trainers.prepare: a TFDS data_dir prepared by the real builder, without `tfds build`."""

import importlib.util
import os

import numpy as np
import pytest
from trainer_cli import FAKE_TFDS, run_cli

from trainers import data, prepare


def _fake_tfds():
    spec = importlib.util.spec_from_file_location("fake_tfds", FAKE_TFDS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_imagenet2012_from_a_manual_dir(tmp_path):
    manual, data_dir = tmp_path / "tars", tmp_path / "tfds"
    # Stand-ins of the official ILSVRC2012 tars, written where a user would put the real ones.
    _fake_tfds().write_imagenet2012(str(manual), np.random.default_rng(0), per_class=1, val_images=6)
    args = ["--dataset=imagenet2012", f"--data_dir={data_dir}", f"--manual_dir={manual}"]
    proc = run_cli("prepare", args, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "imagenet2012 is now prepared in" in proc.stdout
    spec = data.get_spec("imagenet2012", data_dir=str(data_dir))
    assert spec.num_classes == 1000 and spec.num_examples["validation"] == 6
    assert spec.num_examples["train"] == 1000
    again = run_cli("prepare", args)
    assert again.returncode == 0 and "was already prepared" in again.stdout


def test_no_network_is_one_line_naming_the_command(capsys, tmp_path):
    code = prepare.main(["prepare", "--dataset=cifar10", f"--data_dir={tmp_path / 'tfds'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("prepare: error: cifar10 is not prepared")
    assert "python -m trainers.prepare --dataset=cifar10 --data_dir=DIR" in err[0]
    assert not os.path.exists(tmp_path / "tfds")  # nothing half-prepared left behind


@pytest.mark.parametrize(
    "args, expect",
    [
        (["--dataset=no_such_dataset_xyz"], "unknown dataset 'no_such_dataset_xyz'"),
        ([], "--dataset is required"),
        (["--datset=cifar10"], "Did you mean: dataset"),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, args, expect):
    assert prepare.main(["prepare", f"--data_dir={tmp_path}", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expect in err[0], err
