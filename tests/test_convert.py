"""python -m keras_vit.convert: official .npz <-> Keras weight files, both ways."""

import errno
import os

import numpy as np
import pytest
import synthetic_checkpoints as synth
from fixtures import TINY_SHAPE
from trainer_cli import run_main

import keras_vit
from keras_vit import convert, fileio, npz_layout, weights

# tests/fixtures.py's tiny ViT with 16 px patches and two blocks (each block's files map to its own).
SMALL = dict(TINY_SHAPE, patch_size=16, num_layers=2)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_round_trip_through_weights_h5(tmp_path, monkeypatch):
    monkeypatch.setitem(keras_vit.VARIANTS, "Test-S_16", SMALL)
    params = synth.vit_jax_params(0, image_size=64, num_classes=7, representation_size=64, **SMALL)
    src = synth.save(tmp_path / "src.npz", synth.to_big_vision(params))
    h5 = str(tmp_path / "model.weights.h5")
    assert convert.main([src, h5, "--model=Test-S_16"]) == 0
    assert weights.describe(h5) == dict(
        image_size=(64, 64), num_classes=7, representation_size=64, classifier="token"
    )
    from_h5 = keras_vit.create_model("Test-S_16", weights=h5, classifier_activation=None)
    from_npz = keras_vit.create_model("Test-S_16", weights=src, classifier_activation=None)
    x = np.random.default_rng(0).uniform(0, 255, (2, 64, 64, 3)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(from_h5(x)), np.asarray(from_npz(x)))

    back = str(tmp_path / "back.npz")
    assert convert.main([h5, back, "--model=Test-S_16"]) == 0
    exported = np.load(back, allow_pickle=False)
    assert sorted(exported.files) == sorted(params)  # the original vit_jax layout
    for key, value in params.items():
        np.testing.assert_array_equal(exported[key], value, err_msg=key)
    assert sorted(os.listdir(tmp_path)) == ["back.npz", "model.weights.h5", "src.npz"]


def test_big_vision_npz_to_vit_jax_npz(tmp_path):
    params = synth.vit_jax_params(1, image_size=32, **dict(SMALL, patch_size=8))
    src = synth.save(tmp_path / "bv.npz", synth.to_big_vision(params, stacked=True))
    dst = str(tmp_path / "vit_jax.npz")
    assert convert.main([src, dst]) == 0
    assert npz_layout.read_npz(dst).keys() == params.keys()


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    assert (
        convert.main([str(tmp_path / "missing.npz"), str(tmp_path / "x.weights.h5"), "--model=ViT-B_16"]) == 2
    )
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path}/missing.npz: no such file; pass an existing checkpoint\n"
    src = synth.save(tmp_path / "c.npz", synth.vit_jax_params(2, image_size=32, **dict(SMALL, patch_size=8)))
    assert convert.main([src, str(tmp_path / "x.weights.h5")]) == 2
    assert "--model is required" in capsys.readouterr().err
    assert convert.main([src, str(tmp_path / "x.weights.h5"), "--model=ViT-B_16"]) == 2
    assert "does not fit this model: 'embedding/kernel'" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x.weights.h5")


def test_a_finished_runs_workdir_converts_as_its_model_npz_and_another_folder_is_one_line(tmp_path, capsys):
    """As weights=WORKDIR takes a run's folder; before, any folder was "no such file"."""
    params = synth.vit_jax_params(5, image_size=32, **dict(SMALL, patch_size=8))
    run = tmp_path / "run"
    run.mkdir()
    synth.save(run / "model.npz", params)  # what a finished run leaves, as far as its weights go
    assert convert.main([str(run), str(tmp_path / "out.npz")]) == 0
    written = npz_layout.read_npz(str(tmp_path / "out.npz"))
    assert written.keys() == params.keys()
    np.testing.assert_array_equal(written["head/kernel"], params["head/kernel"])
    capsys.readouterr()
    (run / "model.npz").unlink()  # a run still training: checkpoints only
    assert convert.main([str(run), str(tmp_path / "other.npz")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {run} is a folder, not a checkpoint: pass a")
    assert not os.path.exists(tmp_path / "other.npz")
    # The few-shot command's workdir (its config.json and results.json, no model) was "a folder,
    # not a checkpoint ... a finished run's workdir": it names what the folder is.
    (run / "config.json").write_text('{"model": "ViT-Ti_16", "shots": "1,5"}\n')
    assert convert.main([str(run), str(tmp_path / "other.npz")]) == 2
    assert capsys.readouterr().err == (
        f"error: {run} holds few-shot probes (trainers.fewshot), which leave no model: pass the "
        "--workdir of a trainers.finetune or trainers.pretrain run\n"
    )


def test_an_output_that_cannot_be_written_is_one_line(tmp_path, capsys, monkeypatch):
    """Under a file: said before any work. Refused by the disk: the system's words for the file
    asked for, not for write_atomic's temporary one. Both were tracebacks."""
    src = synth.save(tmp_path / "c.npz", synth.vit_jax_params(4, image_size=32, **dict(SMALL, patch_size=8)))
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    assert convert.main([src, str(notes / "out.npz")]) == 2
    assert capsys.readouterr().err == (
        f"error: {notes}/out.npz cannot be written: {notes} is a file, not a folder; "
        "choose another output path\n"
    )

    def refuse(path):
        temporary = os.path.join(os.path.dirname(path), ".tmp-0a1b2c3d-out.npz")
        raise PermissionError(errno.EACCES, "Permission denied", temporary)

    monkeypatch.setattr(fileio, "_create_local_temp", refuse)
    assert convert.main([src, str(tmp_path / "out.npz")]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path}/out.npz: permission denied; check that path and its permissions\n"
    )
    assert notes.read_text() == "mine\n" and not os.path.exists(tmp_path / "out.npz")


def test_an_existing_output_is_replaced_only_with_overwrite(tmp_path, capsys):
    """An output already on disk (a file, or with --to the checkpoint files of a folder) is
    refused in one line and kept, as keras_vit.export refuses OUT; --overwrite replaces it. Both
    forms replaced what was there unasked."""
    src = synth.save(tmp_path / "c.npz", synth.vit_jax_params(6, image_size=32, **dict(SMALL, patch_size=8)))
    dst = tmp_path / "out.npz"
    dst.write_bytes(b"an earlier conversion")
    assert convert.main([src, str(dst)]) == 2
    assert capsys.readouterr().err == (
        f"error: {dst} exists; pass --overwrite to replace it, or another output path\n"
    )
    assert dst.read_bytes() == b"an earlier conversion"
    assert convert.main([src, str(dst), "--overwrite"]) == 0
    assert npz_layout.read_npz(str(dst)).keys() == npz_layout.read_npz(src).keys()
    assert sorted(os.listdir(tmp_path)) == ["c.npz", "out.npz"]

    # --to: a folder may exist and hold other files; the checkpoint's own files are what is refused.
    folder = tmp_path / "vit_timm"
    folder.mkdir()
    (folder / "README.md").write_text("my notes\n")
    assert convert.main([src, str(folder), "--to=timm"]) == 0
    # The summary names the file's shape, not the variant the model was first built as (ViT-B_16).
    shape = ", ".join(f"{k}={v}" for k, v in dict(SMALL, patch_size=8).items() if k in convert._SHAPE)
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .startswith(f"wrote {folder}: timm checkpoint of a ViT of {shape} at 32x32")
    )
    config = (folder / "config.json").read_text()
    assert convert.main([src, str(folder), "--to=timm"]) == 2
    assert capsys.readouterr().err == (
        f"error: {folder}/model.safetensors exists; pass --overwrite to replace it, or another output path\n"
    )
    (folder / "model.safetensors").unlink()  # the config alone is refused too
    (folder / "config.json").write_text("{}\n")
    assert convert.main([src, str(folder), "--to=timm"]) == 2
    assert f"{folder}/config.json exists" in capsys.readouterr().err
    assert (folder / "config.json").read_text() == "{}\n"
    assert convert.main([src, str(folder), "--to=timm", "--overwrite"]) == 0
    assert (folder / "config.json").read_text() == config
    assert sorted(os.listdir(folder)) == ["README.md", "config.json", "model.safetensors"]


@pytest.mark.slow
def test_command_line(tmp_path):
    """`python -m keras_vit.convert` through its main(argv), in this process: the summary line, and
    one-line errors with status 2 for a bad output name and a variant the file does not fit.
    (tests/test_startup.py runs the command in a process of its own, where nothing else is printed.)"""
    src = synth.save(tmp_path / "c.npz", synth.vit_jax_params(3, image_size=32, num_classes=3, **synth.TI16))
    run = run_main("keras_vit.convert", [src, str(tmp_path / "ti.weights.h5"), "--model=ViT-Ti_16"])
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"wrote {tmp_path}/ti.weights.h5: ViT-Ti_16 at 32x32, 3 classes"
    bad = run_main("keras_vit.convert", [src, str(tmp_path / "x.txt")])
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        f"error: {tmp_path}/x.txt: the output must end in .weights.h5 or .npz"
    ]
    mismatch = run_main("keras_vit.convert", [src, str(tmp_path / "b.weights.h5"), "--model=ViT-B_16"])
    assert mismatch.returncode == 2 and "Traceback" not in mismatch.stderr
    assert mismatch.stderr.strip().splitlines()[-1].startswith(f"error: {src}: does not fit")
