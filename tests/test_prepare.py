"""python -m trainers.prepare: a TFDS data_dir prepared by the real builder, without `tfds build`."""

import importlib.util
import os

import numpy as np
import pytest
from trainer_cli import FAKE_TFDS, run_as_a_user, run_cli

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
    proc = run_cli("prepare", args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "imagenet2012 is now prepared in" in proc.stdout
    spec = data.get_spec("imagenet2012", data_dir=str(data_dir))
    assert spec.num_classes == 1000 and spec.num_examples["validation"] == 6
    assert spec.num_examples["train"] == 1000
    again = run_cli("prepare", args)
    assert again.returncode == 0 and "was already prepared" in again.stdout


def test_no_network_is_one_line_saying_what_to_do(capsys, tmp_path):
    code = prepare.main(["prepare", "--dataset=cifar10", f"--data_dir={tmp_path / 'tfds'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("prepare: error: cifar10 is not prepared")
    # Not "run python -m trainers.prepare": that is the command that just failed.
    assert "trainers.prepare" not in err[0]
    assert "run this command on a machine with network (with --data_dir=DIR there), then copy " in err[0]
    assert f"DIR/cifar10 into {tmp_path / 'tfds'}" in err[0]
    assert not os.path.exists(tmp_path / "tfds")  # nothing half-prepared left behind


@pytest.mark.parametrize(
    "module, args, advice",
    [
        ("prepare", ["--dataset=cifar10"], "run this command on a machine with network"),
        (
            "finetune",
            ["--dataset=cifar10", "--workdir=WORKDIR"],
            "python -m trainers.prepare --dataset=cifar10",
        ),
    ],
)
def test_a_data_dir_without_the_dataset_prints_the_error_alone(tmp_path, module, args, advice):
    # TFDS warns "Variant folder ... has no dataset_info.json" looking into such a data_dir; a
    # user must see the one line that says what to do, nothing above it.
    args = [a.replace("WORKDIR", str(tmp_path / "run")) for a in args]
    # As a user runs it (TF_CPP_MIN_LOG_LEVEL and KERAS_BACKEND left to the trainers), forked:
    # what TFDS prints comes after the start, which test_console's fresh banner test sees.
    proc = run_as_a_user(f"trainers.{module}", [*args, f"--data_dir={tmp_path / 'tfds'}"])
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"{module}: error: cifar10 is not prepared in {tmp_path / 'tfds'}")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert advice in proc.stderr


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
