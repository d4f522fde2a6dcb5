"""docs/guides/checkpoints.md's blocks: the official checkpoints from a synthetic Keras cache,
converting, the Hugging Face Hub (offline, from a warmed cache) and the error samples.
"""

import ast
import json
import os
import re
import shutil
import urllib.error
import urllib.request

import huggingface_hub.constants
import numpy as np
import pytest
import synthetic_checkpoints as synth
from docs_standins import (
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    pixels,
    run_command,
    run_python,
)
from readme_blocks import split_command

import keras_vit
from keras_vit import checkpoints, weights


@pytest.mark.slow
def test_pretrained_checkpoints(registry_cache, monkeypatch, tmp_path, capsys):
    for name, variant in (
        ("imagenet21k+imagenet2012", "ViT-B_16"),
        ("augreg-imagenet21k", "ViT-B_16"),
        ("imagenet21k", "ViT-L_16"),
    ):
        monkeypatch.setenv("KERAS_HOME", registry_cache(name, variant))
    on_disk = synth.save(tmp_path / "ViT-B_16.npz", synth.vit_jax_params(1, image_size=224, **synth_b16()))
    ns, _ = run_python(
        block("pretrained"), {"images": pixels(1, 384, 384, 3)}, {"/data/ViT-B_16.npz": on_disk}
    )
    top3 = ast.literal_eval(capsys.readouterr().out.strip().splitlines()[-1].replace("np.float32", ""))
    assert len(top3) == 1 and len(top3[0]) == 3  # (class id, name, score) for the one image
    assert ns["features"].output_shape == (None, 1024)  # the L/16 file's pre-logits kept
    assert ns["model"].num_classes == 10


def synth_b16():
    return keras_vit.VARIANTS["ViT-B_16"]


def test_download_error_sample(tmp_path, monkeypatch):
    (sample,) = block("download-error").text.strip().splitlines()

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(weights.CheckpointError) as err:
        weights.fetch(checkpoints.lookup("imagenet21k", "ViT-B_16"), cache_dir=str(tmp_path))
    message = str(err.value).replace(str(tmp_path), "/root/.keras")
    pattern = re.escape(sample).replace(re.escape("(...)"), r"\(.+\)")
    assert re.fullmatch(pattern, message), message
    assert os.listdir(tmp_path / "models") == []


@pytest.mark.slow
def test_convert_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    official = synth.vit_jax_params(2, image_size=224, **synth_b16())
    synth.save(tmp_path / "ViT-B_16.npz", official)
    small = synth.vit_jax_params(3, image_size=32, **synth.TI16)
    synth.save(tmp_path / "big_vision.npz", synth.to_big_vision(small))
    for command in block("convert").commands:
        _, argv = split_command(command)
        if argv[3] == "finetuned.weights.h5":  # a keras_vit weights file: the one written above
            shutil.copy("vit_b16.weights.h5", "finetuned.weights.h5")
        code, out, err = run_command(command, capsys)
        assert code == 0, command + err
        assert os.path.exists(argv[4])
    for name, expected in (("finetuned.npz", official), ("vit_jax.npz", small)):
        with np.load(name) as written:
            assert set(written.files) == set(expected), name
            for key in expected:
                np.testing.assert_array_equal(written[key], expected[key])


def _warm_hub_cache(monkeypatch, cache, repo, folder):
    """huggingface_hub offline, with `folder` as its cached snapshot of `repo`."""
    snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
    shutil.copytree(folder, snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_hub_block(tmp_path, monkeypatch):
    # A timm-format ViT-Ti/16 (random, 1000 classes) written by keras_vit's exporter stands in
    # for the Hub file; tests/test_hf_checkpoints.py holds such files against timm itself.
    folder = tmp_path / "vit_tiny_patch16_224"
    keras_vit.hf_export.save_pretrained(keras_vit.ViT_Ti16(), folder, to="timm")
    _warm_hub_cache(monkeypatch, tmp_path / "hub", "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k", folder)
    paths = {name: str(tmp_path / name[5:]) for name in ("/tmp/vit_ti16_timm", "/tmp/vit_ti16_hf")}
    ns, _ = run_python(
        block("hub"),
        {},
        {"/data/vit_tiny_patch16_224": str(folder), **paths},
    )
    assert ns["model"].class_names == keras_vit.labels.imagenet_names(1000)
    assert ns["model_384"].grid_size == (24, 24)
    for path in paths.values():
        assert sorted(os.listdir(path))[:2] == ["config.json", "model.safetensors"]


def test_hub_convert_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    params = synth.vit_jax_params(6, image_size=224, num_classes=3, **synth.TI16)
    synth.save(tmp_path / "finetuned.npz", params)
    (tmp_path / "labels.txt").write_text("cat\ndog\nbird\n")
    run = tmp_path / "pets"  # a finished trainers.finetune workdir
    run.mkdir()
    synth.save(run / "model.npz", params)
    (run / "config.json").write_text(json.dumps({"model": "ViT-Ti_16", "image_size": 224}))
    (run / "class_names.json").write_text(json.dumps(["cat", "dog", "bird"]))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network here
    for command in block("hub-convert").commands:
        _, argv = split_command(command)
        code, out, err = run_command(command, capsys, {"/tmp/pets": str(run)})
        if any(arg.startswith("--push_to_hub") for arg in argv):
            # Written, then refused by the Hub in one line (offline).
            assert code == 2 and err.startswith("error: could not push pets_vit to my-name/vit-b16-pets"), err
            assert err.count("\n") == 1
        else:
            assert code == 0, command + err
        with open(os.path.join(argv[4], "config.json")) as f:
            config = json.load(f)
        names = config.get("label_names") or list(config.get("id2label", {}).values())
        # The .npz alone has no class names (timm's config then has none); --labels and the
        # workdir's class_names.json give them.
        unnamed = argv[3] == "finetuned.npz" and "--labels" not in command
        assert names == ([] if unnamed else ["cat", "dog", "bird"]), command


def test_weights_error_samples(tmp_path):
    wrong_shape, unknown, unreadable = block("weights-errors").text.strip().splitlines()
    s16 = synth.vit_jax_params(4, image_size=32, **keras_vit.VARIANTS["ViT-S_16"])
    ckpt = synth.save(tmp_path / "ckpt.npz", s16)
    broken = tmp_path / "ViT-B_16.npz"
    broken.write_bytes(b"not a zip file")
    for weights_arg, sample in ((ckpt, wrong_shape), ("imagenet22k", unknown), (str(broken), unreadable)):
        with pytest.raises(Exception) as err:
            keras_vit.ViT_B16(weights=weights_arg)
        assert str(err.value).replace(str(tmp_path), "/data") == sample
