"""keras_vit.run_dir: a trainer's workdir read back as a model, its resolution and class names.

One workdir comes from a real `trainers.finetune` run on the bundled digits; the loaded model
must reproduce the test loss and accuracy the run reported. Others are written by hand to
check each piece and each error.
"""

import json
import os

import finetuned_runs
import numpy as np
import pytest
from fixtures import TINY

import keras_vit
from keras_vit import images, run_dir
from keras_vit.errors import CheckpointError
from trainers.data.digits import digits_spec

# tests/fixtures.py's tiny ViT with a second block.
SHAPE = dict(TINY, num_layers=2)


@pytest.fixture(scope="module")
def digits_workdir(tmp_path_factory):
    return finetuned_runs.digits_workdir(tmp_path_factory)


@pytest.mark.slow
def test_a_finetuned_run_loads_with_the_outputs_it_was_evaluated_with(digits_workdir):
    run = run_dir.load_run(digits_workdir)
    assert run.class_names == [str(d) for d in range(10)]
    assert run.image_size == (16, 16) and run.config["model"] == "ViT-Ti_16"
    assert run.weights_path == os.path.join(digits_workdir, "model.npz")

    # The run's own test split, decoded as predict decodes it (PNG: the same pixels as the
    # trainers' decode) and resized to the run's size.
    records = digits_spec("digits", "").reader.records("test")
    pixels = np.stack([images.resize(images.decode_image(p), run.model) for p in records.payloads])
    probs = run.model.predict(pixels, verbose=0)
    with open(os.path.join(digits_workdir, "results.json")) as f:
        reported = json.load(f)["eval"]["test"]
    loss = -np.mean(np.log(probs[np.arange(len(probs)), records.labels]))
    np.testing.assert_allclose(loss, reported["loss"], rtol=1e-4)
    assert np.mean(probs.argmax(-1) == records.labels) == pytest.approx(reported["accuracy"], abs=1.5 / 360)

    scaled = run_dir.load_run(digits_workdir, include_preprocessing=False).model
    np.testing.assert_allclose(scaled.predict(pixels / 127.5 - 1, verbose=0), probs, atol=1e-6)


def _workdir(path, model, config, class_names=None):
    os.makedirs(path, exist_ok=True)
    keras_vit.weights.save_npz(model, os.path.join(path, "model.npz"))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    if class_names is not None:
        with open(os.path.join(path, "class_names.json"), "w") as f:
            json.dump(class_names, f)
    return str(path)


@pytest.fixture(scope="module")
def tiny():
    model = keras_vit.create_model("ViT-Ti_16", num_classes=3, **SHAPE)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32"))
    return model


def test_a_workdir_written_by_hand_gives_the_same_model(tmp_path, tiny):
    workdir = _workdir(tmp_path / "w", tiny, {"model": "ViT-Ti_16", "image_size": 32}, ["cat", "dog", "emu"])
    run = run_dir.load_run(workdir)
    x = np.random.default_rng(1).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(run.model(x)), np.asarray(tiny(x)))
    assert run.class_names == ["cat", "dog", "emu"] and run.image_size == (32, 32)
    assert run.model.classifier_activation == "softmax"


def test_sigmoid_runs_load_with_a_sigmoid_and_no_names_file_is_none(tmp_path, tiny):
    run = run_dir.load_run(_workdir(tmp_path / "w", tiny, {"model": "ViT-Ti_16", "loss": "sigmoid"}))
    assert run.model.classifier_activation == "sigmoid" and run.class_names is None
    assert run.image_size == (32, 32)  # from the weights when the config has none


def test_missing_files_and_wrong_names_are_one_line_errors(tmp_path, tiny):
    with pytest.raises(CheckpointError, match="not a trainer's workdir .no config.json"):
        run_dir.load_run(str(tmp_path))
    workdir = _workdir(tmp_path / "w", tiny, {"model": "ViT-Ti_16"}, ["a", "b"])
    with pytest.raises(CheckpointError, match="2 names for a 3-class head"):
        run_dir.load_run(workdir)
    os.remove(os.path.join(workdir, "model.npz"))
    with pytest.raises(CheckpointError, match="has no model.npz: the run has not finished"):
        run_dir.load_run(workdir)
    # A few-shot command's workdir was told to "rerun its command to complete it": it trains nothing.
    probes = _workdir(tmp_path / "probes", tiny, {"model": "ViT-Ti_16", "shots": "1,5", "seeds": 3})
    os.remove(os.path.join(probes, "model.npz"))
    with pytest.raises(
        CheckpointError, match="holds few-shot probes .trainers.fewshot., which leave no model"
    ):
        run_dir.load_run(probes)
    bad = _workdir(tmp_path / "bad", tiny, {"model": "ViT-X_1"})
    with pytest.raises(CheckpointError, match="unknown model 'ViT-X_1'"):
        run_dir.load_run(bad)
    with open(os.path.join(bad, "class_names.json"), "w") as f:
        json.dump({"0": "a"}, f)
    with pytest.raises(CheckpointError, match="expected a JSON list of class names"):
        run_dir.read_class_names(bad)


def test_a_run_without_position_weights_loads_with_its_config_posemb(tmp_path):
    # A --posemb=sincos_2d run stores no position table: its config.json says the type and size.
    model = keras_vit.create_model("ViT-Ti_16", num_classes=3, posemb="sincos_2d", **SHAPE)
    workdir = _workdir(tmp_path / "w", model, {"model": "ViT-Ti_16", "image_size": 32, "posemb": "sincos_2d"})
    run = run_dir.load_run(workdir)
    assert run.model.posemb == "sincos_2d" and run.image_size == (32, 32)
    x = np.random.default_rng(1).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(run.model(x)), np.asarray(model(x)))
