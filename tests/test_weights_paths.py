"""Checkpoints on any file system (ram:// standing in for gs://), and convert's paths."""

import io
import os
import uuid

import numpy as np
import pytest
import synthetic_checkpoints as synth
import tensorflow as tf
from fixtures import TINY_SHAPE

import keras_vit
from keras_vit import convert, fileio, run_dir, weights

# tests/fixtures.py's tiny ViT with a second block.
SMALL = dict(TINY_SHAPE, num_layers=2)


@pytest.fixture
def ram_dir():
    path = f"ram://weights-{uuid.uuid4().hex}"
    yield path
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)


@pytest.fixture
def params():
    return synth.vit_jax_params(5, image_size=32, num_classes=4, **SMALL)


def _npz_bytes(params):
    buffer = io.BytesIO()
    np.savez(buffer, **params)
    return buffer.getvalue()


def _outputs(model):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    return np.asarray(model(x))


def test_constructor_reads_a_remote_npz(ram_dir, params, monkeypatch):
    monkeypatch.setitem(keras_vit.VARIANTS, "Test-Ti_8", SMALL)
    remote = fileio.join(ram_dir, "run", "model.npz")
    fileio.write_atomic(remote, _npz_bytes(params))
    model = keras_vit.create_model("Test-Ti_8", weights=remote, classifier_activation=None)
    assert model.image_size == (32, 32) and model.num_classes == 4  # read from the remote file
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), params["head/kernel"])


def test_keras_weight_files_save_to_and_load_from_a_remote_path(ram_dir, params, tmp_path):
    model = keras_vit.ViT(image_size=32, num_classes=4, include_preprocessing=False, **SMALL)
    weights.load_weights(model, synth.save(tmp_path / "local.npz", params))
    weights.save_weights(model, fileio.join(ram_dir, "m.weights.h5"))
    model.save(tmp_path / "m.keras")
    tf.io.gfile.copy(str(tmp_path / "m.keras"), fileio.join(ram_dir, "m.keras"))
    for name in ("m.weights.h5", "m.keras"):
        remote = fileio.join(ram_dir, name)
        assert weights.describe(remote)["num_classes"] == 4
        same = keras_vit.ViT(image_size=32, num_classes=4, include_preprocessing=False, **SMALL)
        weights.load_weights(same, remote)
        np.testing.assert_array_equal(_outputs(same), _outputs(model))
    assert fileio.listdir(ram_dir) == ["m.keras", "m.weights.h5"]  # no temporary files left


def test_missing_remote_checkpoint_is_one_line(ram_dir):
    model = keras_vit.ViT(image_size=32, num_classes=4, **SMALL)
    missing = fileio.join(ram_dir, "nowhere.npz")
    with pytest.raises(ValueError) as err:
        weights.load_weights(model, missing)
    assert str(err.value).startswith(f"{missing}: no such checkpoint file; check the path")


def test_convert_reads_and_writes_remote_paths(ram_dir, params, capsys):
    src = fileio.join(ram_dir, "in", "big_vision.npz")
    fileio.write_atomic(src, _npz_bytes(synth.to_big_vision(params)))
    dst = fileio.join(ram_dir, "out", "vit_jax.npz")
    assert convert.main([src, dst]) == 0
    with fileio.open(dst, "rb") as f, np.load(f, allow_pickle=False) as written:
        assert sorted(written.files) == sorted(params)
    assert convert.main([src, f"{ram_dir}/in/../in/big_vision.npz"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {ram_dir}/in/../in/big_vision.npz is the input")


def test_convert_onto_its_own_input_refuses_and_leaves_it_untouched(tmp_path, params, capsys):
    src = synth.save(tmp_path / "ckpt.npz", params)
    before = (open(src, "rb").read(), os.stat(src).st_mtime_ns)
    os.link(src, tmp_path / "hard_link.npz")
    for dst in (src, str(tmp_path / "sub" / ".." / "ckpt.npz"), str(tmp_path / "hard_link.npz")):
        assert convert.main([src, dst]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"error: {dst} is the input file; write the output to another path "
            "(the input was left as it is)\n"
        )
    assert (open(src, "rb").read(), os.stat(src).st_mtime_ns) == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt.npz", "hard_link.npz"]


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_trainers_workdir_stands_for_its_model_npz(where, tmp_path, ram_dir, params, monkeypatch):
    """Catches a run's folder read as a timm or transformers checkpoint (refused for holding no
    model.safetensors) or as something other than the model.npz the run wrote."""
    monkeypatch.setitem(keras_vit.VARIANTS, "Test-Ti_8", SMALL)
    workdir = str(tmp_path / "run") if where == "local" else fileio.join(ram_dir, "run")
    fileio.write_atomic(fileio.join(workdir, "model.npz"), _npz_bytes(params))
    fileio.write_atomic(fileio.join(workdir, "config.json"), "{}\n")
    assert not weights.is_hugging_face(workdir) and run_dir.is_finished_run(workdir)
    assert weights.describe(workdir)["num_classes"] == 4
    assert sorted(weights.read_params(workdir)) == sorted(params)
    raw = dict(classifier_activation=None, include_preprocessing=False)
    model = keras_vit.create_model("Test-Ti_8", weights=workdir, **raw)
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), params["head/kernel"])
    same = keras_vit.ViT(image_size=32, num_classes=4, **raw, **SMALL)
    weights.load_weights(same, workdir)
    np.testing.assert_array_equal(_outputs(same), _outputs(model))


def test_a_folder_with_a_safetensors_file_stays_a_hugging_face_checkpoint(tmp_path, params):
    """Catches model.npz taking over a timm or transformers folder that also holds one, convert
    and predict taking for a run a folder that weights= reads as a Hugging Face checkpoint, and
    an empty folder's error that names only one of the two things it looked for."""
    folder = tmp_path / "both"
    folder.mkdir()
    (folder / "model.npz").write_bytes(_npz_bytes(params))
    (folder / "config.json").write_text("{}\n")
    (folder / "model.safetensors").write_bytes(b"")
    assert weights.is_hugging_face(str(folder)) and weights.run_weights_file(folder) is None
    assert not run_dir.is_finished_run(str(folder))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError) as err:
        weights.read_params(str(empty))
    assert str(err.value) == (
        f"{empty}: holds no model.safetensors and no model.npz; pass a folder of a timm or "
        "transformers checkpoint, or the workdir of a finished trainer run"
    )
    # A few-shot command's workdir (config.json with its shots, no model): said as such.
    (empty / "config.json").write_text('{"model": "ViT-Ti_16", "shots": "1,5"}\n')
    with pytest.raises(
        ValueError, match=f"^{empty} holds few-shot probes .trainers.fewshot., which leave no model"
    ):
        weights.read_params(str(empty))
    (empty / "config.json").write_text("{not json")  # no command's: the error stays the folder's
    with pytest.raises(ValueError, match="holds no model.safetensors and no model.npz"):
        weights.read_params(str(empty))


def test_a_hub_name_is_no_workdir_and_asks_no_file_system(monkeypatch):
    """Catches a Hub name (hf://owner/repo) sent to TensorFlow's file systems to ask whether it is
    a run's folder: an install without TensorFlow could then not load Hub weights at all."""

    def no_file_system(path):
        raise AssertionError(f"asked a file system about {path}")

    monkeypatch.setattr(fileio, "isdir", no_file_system)
    for name in ("hf://google/vit-base-patch16-224", "hf-hub:timm/vit_tiny_patch16_224.augreg_in21k"):
        assert weights.run_weights_file(name) is None
        assert not run_dir.is_finished_run(name)
