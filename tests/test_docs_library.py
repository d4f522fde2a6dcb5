"""docs/guides/library.md's blocks: the model API past the quickstart, input sizes, position
embeddings.
"""

import numpy as np
import pytest
from docs_standins import (
    SHORT_TINY,
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    pixels,
    run_command,
    run_python,
)
from trainer_cli import read_results

import keras_vit


@pytest.mark.slow
def test_quickstart_continued():
    ns, _ = run_python(block("quickstart-continued"))
    assert tuple(ns["probs"].shape) == (1, 1000)
    assert ns["tokens"].output_shape == (None, 197, 384) and ns["pooled"].output_shape == (None, 384)
    assert [m.shape for m in ns["maps"]] == [(2, 4, 65, 65)] * 4
    assert ns["model"].num_classes == 10 and ns["model"].count_params() > 90e6  # the R50 hybrid


def test_constructor_signature():
    ns, model = run_python(block("constructor"), {"keras_vit": keras_vit})
    assert model.output_shape == (None, 1000) and model.image_size == (224, 224)


@pytest.mark.slow
def test_scaling_inputs(registry_cache, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", registry_cache("imagenet21k+imagenet2012", "ViT-B_16"))
    images = pixels(1, 384, 384, 3)
    ns, _ = run_python(block("scaling-inputs"), {"keras_vit": keras_vit, "images": images})
    # `preds` is the raw model's on preprocess_input(images): the same as the default model's.
    np.testing.assert_allclose(ns["preds"], ns["model"].predict(images, verbose=0), atol=1e-5)


@pytest.mark.slow
def test_any_size_block(registry_cache, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", registry_cache("imagenet21k+imagenet2012", "ViT-B_16"))
    namespace = {
        "keras_vit": keras_vit,
        "images_384": pixels(1, 384, 384, 3),
        "images_160x320": pixels(1, 160, 320, 3),
    }
    ns, out = run_python(block("any-size"), namespace)
    assert tuple(out.shape) == (1, 1000)
    assert ns["model"].token_grid((160, 320)) == (10, 20)


def test_posemb_block(tmp_path):
    ns, value = run_python(
        block("posemb"), replacements={"/tmp/relative.npz": str(tmp_path / "relative.npz")}
    )
    assert value == ("relative", (6, 6))
    tables = [w for w in ns["larger"].weights if w.path.endswith("relative_embedding")]
    assert [tuple(t.shape) for t in tables] == [(11, 11, 3, 64)] * 2


@pytest.mark.slow
def test_posemb_commands(capsys, tmp_path):
    """A sincos_2d run, then fine-tuning from its model.npz (which stores no position weights)."""
    pretrain, finetune = block("posemb-commands").commands
    places = {"/tmp/sincos": str(tmp_path / "sincos")}
    code, _, err = run_command(pretrain, capsys, places, extra=SHORT_TINY)
    assert code == 0, err
    stored = np.load(tmp_path / "sincos" / "model.npz", allow_pickle=False).files
    assert not any("posembed" in key for key in stored)
    code, _, err = run_command(finetune, capsys, places, extra=SHORT_TINY)
    assert code == 0, err
    assert read_results(str(tmp_path / "sincos_ft"))["steps"] == 2
