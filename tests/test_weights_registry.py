"""The checkpoint registry and the download path, offline: file:// URLs."""

import dataclasses
import hashlib
import os
import time
import urllib.request

import numpy as np
import pytest
import synthetic_checkpoints as synth

import keras_vit
from keras_vit import checkpoints, weights
from keras_vit.weights import REGISTRY, CheckpointError

HIDDEN = {name: spec["hidden_size"] for name, spec in keras_vit.VARIANTS.items()}


def test_registry_covers_the_official_releases():
    assert set(REGISTRY) == {
        "imagenet21k",
        "imagenet21k+imagenet2012",
        "imagenet21k+imagenet2012-224",
        "augreg-imagenet21k",
        "augreg-imagenet21k+imagenet2012",
    }
    assert set(REGISTRY["imagenet21k"]) == {
        "ViT-B_16",
        "ViT-B_32",
        "ViT-L_16",
        "ViT-L_32",
        "ViT-H_14",
        "R50+ViT-B_16",
    }
    assert set(REGISTRY["imagenet21k+imagenet2012-224"]) == {"ViT-B_16", "ViT-L_16"}
    assert set(REGISTRY["augreg-imagenet21k"]) == {
        "ViT-Ti_16",
        "ViT-S_16",
        "ViT-S_32",
        "ViT-B_16",
        "ViT-B_32",
        "ViT-L_16",
        "R+ViT-Ti_16",
        "R26+ViT-S_32",
        "R50+ViT-L_32",
    }
    assert set(REGISTRY["augreg-imagenet21k+imagenet2012"]) == set(REGISTRY["augreg-imagenet21k"])
    file_names = [e.file_name for entries in REGISTRY.values() for e in entries.values()]
    assert len(file_names) == len(set(file_names))  # one cache file per checkpoint


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_registry_entries_describe_their_model(name):
    for variant, entry in REGISTRY[name].items():
        assert variant in keras_vit.VARIANTS
        assert entry.url.startswith("https://storage.googleapis.com/vit_models/")
        assert entry.url.endswith(".npz") and "+" not in entry.url  # '+' is %2B-escaped
        assert entry.sha256 is None  # none is published; never invented
        if name == "imagenet21k":
            assert (entry.image_size, entry.num_classes) == (224, 21843)
            assert entry.representation_size == HIDDEN[variant]  # original pre-logits layer
        elif name == "augreg-imagenet21k":
            assert (entry.image_size, entry.num_classes, entry.representation_size) == (224, 21843, None)
        else:
            assert entry.num_classes == 1000 and entry.representation_size is None
            assert entry.image_size == (224 if name.endswith("-224") else 384)


# The AugReg files the vision_transformer README recommends ("Available ViT models": the
# i21k_300 column of Table 3 in "How to train your ViT?"), each a `filename` (pre-training) or
# `adapt_filename` (ImageNet fine-tune) of gs://vit_models/augreg/index.csv; copied from
# there so that a registry name pointing at a file that does not exist fails here.
OFFICIAL_AUGREG_FILES = {
    f"{stem}{suffix}.npz"
    for stem, finetune_lr in [
        ("L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", "0.01"),
        ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.03"),
        ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03"),
        ("R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "0.01"),
        ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01"),
        ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
        ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01"),
        ("S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", "0.01"),
        ("R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
    ]
    for suffix in ("", f"--imagenet2012-steps_20k-lr_{finetune_lr}-res_384")
}
# AugReg's file names start with the model (vit_jax/configs/models.py: the official name
# without "ViT-", "+" spelled "_").
AUGREG_PREFIX = {
    "ViT-Ti_16": "Ti_16",
    "ViT-S_16": "S_16",
    "ViT-S_32": "S_32",
    "ViT-B_16": "B_16",
    "ViT-B_32": "B_32",
    "ViT-L_16": "L_16",
    "R+ViT-Ti_16": "R_Ti_16",
    "R26+ViT-S_32": "R26_S_32",
    "R50+ViT-L_32": "R50_L_32",
}


def test_every_augreg_name_maps_to_a_file_the_official_index_lists():
    registered = {}
    for name in ("augreg-imagenet21k", "augreg-imagenet21k+imagenet2012"):
        for variant, entry in REGISTRY[name].items():
            assert entry.url.startswith("https://storage.googleapis.com/vit_models/augreg/")
            file_name = entry.url.rsplit("/", 1)[1]
            assert file_name.startswith(AUGREG_PREFIX[variant] + "-"), (name, variant)
            assert ("--imagenet2012-" in file_name) == name.endswith("+imagenet2012"), file_name
            registered[file_name] = (name, variant)
    assert set(registered) == OFFICIAL_AUGREG_FILES  # every recommended file, none other


def test_known_urls():
    assert REGISTRY["imagenet21k"]["ViT-B_16"].url == (
        "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz"
    )
    assert REGISTRY["imagenet21k+imagenet2012-224"]["ViT-L_16"].url == (
        "https://storage.googleapis.com/vit_models/imagenet21k%2Bimagenet2012/ViT-L_16-224.npz"
    )
    assert REGISTRY["imagenet21k+imagenet2012"]["R50+ViT-B_16"].url.endswith(
        "imagenet21k%2Bimagenet2012/R50%2BViT-B_16.npz"
    )
    assert REGISTRY["augreg-imagenet21k+imagenet2012"]["ViT-B_16"].url == (
        "https://storage.googleapis.com/vit_models/augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-"
        "wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384.npz"
    )


def test_describe_registry_name_needs_no_download():
    assert weights.describe("imagenet21k", variant="ViT-B_16") == dict(
        image_size=(224, 224), num_classes=21843, representation_size=768, classifier="token"
    )
    assert weights.describe("imagenet21k+imagenet2012", variant="R50+ViT-B_16")["image_size"] == (384, 384)


def test_registry_lookup_errors_are_one_line():
    with pytest.raises(ValueError, match="needs a model variant") as err:
        checkpoints.lookup("imagenet21k", None)
    with pytest.raises(
        ValueError,
        match="no 'imagenet21k' checkpoint is published for ViT-Ti_16; ViT-Ti_16 has: augreg-imagenet21k",
    ) as err:
        weights.describe("imagenet21k", variant="ViT-Ti_16")
    assert "\n" not in str(err.value)


TI16_32PX = dict(image_size=32, num_classes=5, **synth.TI16)


@pytest.fixture
def published(tmp_path, monkeypatch):
    """A registry entry for a synthetic Ti/16 file served from a file:// URL."""
    params = synth.vit_jax_params(11, **TI16_32PX)
    os.makedirs(tmp_path / "server")
    source = synth.save(tmp_path / "server" / "Ti_16-test.npz", params)
    sha256 = hashlib.sha256(open(source, "rb").read()).hexdigest()
    entry = checkpoints.Checkpoint(
        name="test-release",
        variant="ViT-Ti_16",
        url=f"file://{source}",
        file_name="test-release_Ti_16.npz",
        image_size=32,
        num_classes=5,
        representation_size=None,
        sha256=sha256,
    )
    monkeypatch.setitem(REGISTRY, "test-release", {"ViT-Ti_16": entry})
    keras_home = tmp_path / "keras_home"
    monkeypatch.setenv("KERAS_HOME", str(keras_home))
    return dict(entry=entry, params=params, source=source, keras_home=keras_home)


def test_registry_download_verifies_sha256_and_hits_the_cache(published):
    model = keras_vit.ViT_Ti16(weights="test-release", classifier_activation=None)
    cached = published["keras_home"] / "models" / "test-release_Ti_16.npz"
    assert cached.is_file()
    assert model.image_size == (32, 32) and model.num_classes == 5
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), published["params"]["head/kernel"])
    os.remove(published["source"])  # a second load must not need the origin any more
    again = keras_vit.ViT_Ti16(weights="test-release", classifier_activation=None)
    np.testing.assert_array_equal(again.get_layer("head").kernel.numpy(), published["params"]["head/kernel"])


def test_explicit_cache_dir_is_honoured(published, tmp_path):
    model = keras_vit.ViT(image_size=32, num_classes=5, **synth.TI16)
    weights.load_weights(model, "test-release", variant="ViT-Ti_16", cache_dir=tmp_path / "c")
    assert (tmp_path / "c" / "models" / "test-release_Ti_16.npz").is_file()
    assert not (published["keras_home"] / "models" / "test-release_Ti_16.npz").exists()


def test_wrong_sha256_fails_and_leaves_nothing_in_the_cache(published, monkeypatch):
    wrong = dataclasses.replace(published["entry"], sha256="0" * 64)
    monkeypatch.setitem(REGISTRY, "test-release", {"ViT-Ti_16": wrong})
    model = keras_vit.ViT(image_size=32, num_classes=5, **synth.TI16)
    with pytest.raises(CheckpointError, match="does not have the published sha256 0000") as err:
        weights.load_weights(model, "test-release")  # variant found from the model
    assert "\n" not in str(err.value)
    assert os.listdir(published["keras_home"] / "models") == []  # no file, no temporary file


def test_failed_download_says_where_to_put_the_file(published, monkeypatch):
    gone = dataclasses.replace(published["entry"], url="file:///nonexistent/ckpt.npz")
    monkeypatch.setitem(REGISTRY, "test-release", {"ViT-Ti_16": gone})
    model = keras_vit.ViT(image_size=32, num_classes=5, **synth.TI16)
    with pytest.raises(CheckpointError) as err:
        weights.load_weights(model, "test-release", variant="ViT-Ti_16")
    message = str(err.value)
    target = published["keras_home"] / "models" / "test-release_Ti_16.npz"
    assert message.startswith("could not download file:///nonexistent/ckpt.npz")
    assert f"download it by hand and put it at {target}" in message and "\n" not in message


def test_unhashed_download_is_verified_structurally(published, monkeypatch):
    # No sha256: a file that is not the checkpoint the registry describes is refused.
    liar = dataclasses.replace(published["entry"], sha256=None, num_classes=1000)
    monkeypatch.setitem(REGISTRY, "test-release", {"ViT-Ti_16": liar})
    model = keras_vit.ViT(image_size=32, num_classes=1000, **synth.TI16)
    with pytest.raises(
        CheckpointError,
        match="num_classes is 5 but test-release ViT-Ti_16 has 1000; the file is not the published one",
    ):
        weights.load_weights(model, "test-release")


class _CutOff:
    """A download response that fails after its first chunk, as a dropped connection does."""

    def __init__(self, response, failure):
        self.response, self.failure, self.headers = response, failure, response.headers
        self.chunks = 0

    def read(self, size):
        self.chunks += 1
        if self.chunks == 1:
            return self.response.read(size)
        if self.failure == "reset":
            raise ConnectionResetError("connection reset by peer")
        return b""  # the server closed the connection early, without an error

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.response.close()


@pytest.mark.parametrize("failure", ["reset", "closed early"])
def test_download_cut_short_is_not_kept_and_the_next_load_downloads_again(published, monkeypatch, failure):
    unhashed = dataclasses.replace(published["entry"], sha256=None)  # only the length can tell
    monkeypatch.setitem(REGISTRY, "test-release", {"ViT-Ti_16": unhashed})
    real_urlopen = urllib.request.urlopen
    monkeypatch.setattr(
        urllib.request,
        "urlopen",
        lambda url, timeout=None: _CutOff(real_urlopen(url, timeout=timeout), failure),
    )
    model = keras_vit.ViT(image_size=32, num_classes=5, **synth.TI16)
    with pytest.raises(CheckpointError, match="could not download file://") as err:
        weights.load_weights(model, "test-release")
    assert "\n" not in str(err.value)
    assert os.listdir(published["keras_home"] / "models") == []

    monkeypatch.setattr(urllib.request, "urlopen", real_urlopen)
    weights.load_weights(model, "test-release")
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), published["params"]["head/kernel"])
    assert os.listdir(published["keras_home"] / "models") == ["test-release_Ti_16.npz"]


@pytest.mark.parametrize("sha256", ["published", None])
def test_partial_file_in_the_cache_is_downloaded_again(published, monkeypatch, caplog, sha256):
    # What an older version left when killed mid-download: the first half, under the final name.
    if sha256 is None:
        entry = dataclasses.replace(published["entry"], sha256=None)
        monkeypatch.setitem(REGISTRY, "test-release", {"ViT-Ti_16": entry})
    complete = open(published["source"], "rb").read()
    cached = published["keras_home"] / "models" / "test-release_Ti_16.npz"
    os.makedirs(cached.parent)
    cached.write_bytes(complete[: len(complete) // 2])
    model = keras_vit.ViT_Ti16(weights="test-release", classifier_activation=None)
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), published["params"]["head/kernel"])
    assert cached.read_bytes() == complete
    assert "downloading file://" in caplog.text and "failed its check" in caplog.text


def test_changed_file_in_the_cache_is_replaced_when_a_sha256_is_published(published):
    # Readable, the right architecture, other values: only the sha256 can tell.
    cached = published["keras_home"] / "models" / "test-release_Ti_16.npz"
    os.makedirs(cached.parent)
    synth.save(cached, synth.vit_jax_params(12, **TI16_32PX))
    model = keras_vit.ViT_Ti16(weights="test-release", classifier_activation=None)
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), published["params"]["head/kernel"])


def test_download_removes_temporary_files_of_killed_downloads_only(published):
    models = published["keras_home"] / "models"
    os.makedirs(models)
    abandoned = models / ".tmp-0badf00d-test-release_Ti_16.npz"
    in_progress = models / ".tmp-12345678-test-release_Ti_16.npz"  # another process, still writing
    for path in (abandoned, in_progress):
        path.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(abandoned, (two_hours_ago, two_hours_ago))
    weights.fetch(published["entry"])
    assert sorted(os.listdir(models)) == sorted([in_progress.name, "test-release_Ti_16.npz"])


def test_cache_on_a_remote_file_system(published):
    import tensorflow as tf

    cache = f"ram://keras-cache-{os.getpid()}"
    try:
        path = weights.fetch(published["entry"], cache_dir=cache)
        assert path == f"{cache}/models/test-release_Ti_16.npz" and tf.io.gfile.exists(path)
        assert weights.fetch(published["entry"], cache_dir=cache) == path  # a cache hit
    finally:
        tf.io.gfile.rmtree(cache)
