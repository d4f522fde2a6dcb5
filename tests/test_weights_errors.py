"""Every way a checkpoint can be wrong gives one line naming the file and what to do."""

import zipfile

import numpy as np
import pytest
import synthetic_checkpoints as synth
from fixtures import TINY_SHAPE

import keras_vit
from keras_vit import weights

# tests/fixtures.py's tiny ViT with a second block.
TINY = dict(TINY_SHAPE, num_layers=2)


@pytest.fixture(scope="module")
def model():
    return keras_vit.ViT(image_size=32, num_classes=5, **TINY)


@pytest.fixture
def good(tmp_path):
    return synth.save(tmp_path / "good.npz", synth.vit_jax_params(0, image_size=32, num_classes=5, **TINY))


def error_of(model, path, **kwargs):
    before = [v.numpy().copy() for v in model.weights]
    with pytest.raises(ValueError) as err:
        weights.load_weights(model, str(path), **kwargs)
    message = str(err.value)
    assert "\n" not in message
    # Nothing was assigned: a failed load leaves the model as it was.
    assert all(np.array_equal(b, v.numpy()) for b, v in zip(before, model.weights))
    return message


def test_missing_file(model, tmp_path):
    message = error_of(model, tmp_path / "nowhere" / "ViT-B_16.npz")
    assert message.startswith(f"{tmp_path}/nowhere/ViT-B_16.npz: no such checkpoint file; check the path")


def test_unknown_registry_name(model):
    message = error_of(model, "imagenet22k")
    assert message.startswith(
        "unknown weights 'imagenet22k': not a registry name; known names: "
        "augreg-imagenet21k, augreg-imagenet21k+imagenet2012, imagenet21k,"
    )
    with pytest.raises(ValueError, match="unknown weights 'imagenet22k'"):
        weights.describe("imagenet22k", variant="ViT-B_16")


def test_corrupt_file(model, tmp_path):
    path = tmp_path / "noise.npz"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    assert "noise.npz: not a readable .npz checkpoint" in error_of(model, path)


def test_truncated_file(model, tmp_path, good):
    data = open(good, "rb").read()
    path = tmp_path / "truncated.npz"
    path.write_bytes(data[: len(data) // 2])
    message = error_of(model, path)
    assert message.startswith(f"{path}: not a readable .npz checkpoint (")
    assert message.endswith("download it again or convert it with keras_vit.convert")


def test_wrong_zip(model, tmp_path):
    path = tmp_path / "notes.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "not an array")
    assert "notes.npz: not a readable .npz checkpoint" in error_of(model, path)


def test_pickled_arrays_are_never_loaded(model, tmp_path):
    path = tmp_path / "pickled.npz"
    np.savez(path, cls=np.array([{"a": 1}], dtype=object))
    message = error_of(model, path)
    assert (
        "pickled.npz: not a readable .npz checkpoint (it holds object arrays, which are never unpickled)"
        in (message)
    )
    assert "allow_pickle" not in message  # no advice to load it unsafely


def test_checkpoint_of_another_variant(model, tmp_path):
    other = dict(TINY, hidden_size=48, num_heads=3)
    path = synth.save(tmp_path / "wide.npz", synth.vit_jax_params(1, image_size=32, **other))
    message = error_of(model, path)
    assert message == (
        f"{path}: does not fit this model: 'embedding/kernel' has shape "
        "(8, 8, 3, 48) in the checkpoint but (8, 8, 3, 32) in the model; build the "
        "variant the checkpoint was trained as (checkpoint has patch_size=8, "
        "hidden_size=48, num_layers=2, num_heads=3, mlp_dim=64)"
    )


def test_checkpoint_with_fewer_layers(model, tmp_path):
    path = synth.save(
        tmp_path / "shallow.npz", synth.vit_jax_params(1, image_size=32, **dict(TINY, num_layers=1))
    )
    assert "key 'Transformer/encoderblock_1/LayerNorm_0/scale' that the model needs is missing" in (
        error_of(model, path)
    )


def test_hybrid_checkpoint_into_plain_model(model, tmp_path):
    path = synth.save(
        tmp_path / "hybrid.npz",
        synth.vit_jax_params(2, image_size=64, **dict(synth.SMALL_HYBRID, hidden_size=32, mlp_dim=64)),
    )
    assert "'embedding/kernel' has shape (1, 1, 1024, 32) in the checkpoint" in error_of(model, path)


def test_gap_checkpoint_into_token_model(model, tmp_path):
    path = synth.save(tmp_path / "gap.npz", synth.vit_jax_params(3, image_size=32, classifier="gap", **TINY))
    assert (
        "has no class token (a classifier='gap' checkpoint); build the model with "
        "classifier='gap'" in error_of(model, path)
    )


def test_token_checkpoint_with_its_head_into_gap_model(good):
    # The head was trained on the class token: on the patch tokens' mean it would be wrong.
    gap = keras_vit.ViT(image_size=32, num_classes=5, classifier="gap", **TINY)
    assert (
        "the checkpoint classifies from its class token (classifier='token') but the model has "
        "classifier='gap'; build the model with classifier='token', or with another number of classes"
        in error_of(gap, good)
    )


def test_model_with_pre_logits_needs_them(tmp_path, good):
    with_rep = keras_vit.ViT(image_size=32, num_classes=5, representation_size=32, **TINY)
    assert "has no pre-logits layer; build the model with representation_size=None" in (
        error_of(with_rep, good)
    )


def test_unknown_file_type(model, tmp_path):
    path = tmp_path / "weights.onnx"
    path.write_bytes(b"x")
    assert "weights.onnx: unknown file type; pass an official .npz" in error_of(model, path)


def test_bad_keras_files(model, tmp_path):
    h5 = tmp_path / "broken.weights.h5"
    h5.write_bytes(b"not hdf5")
    assert "broken.weights.h5: not a readable Keras weights file" in error_of(model, h5)
    keras_file = tmp_path / "other.keras"
    with zipfile.ZipFile(keras_file, "w") as z:
        z.writestr("config.json", '{"class_name": "Sequential", "config": {}}')
        z.writestr("model.weights.h5", b"")
    assert "other.keras: holds a Sequential model, not a keras_vit ViT" in error_of(model, keras_file)


def test_a_file_numpy_would_unpickle_is_refused_without_suggesting_it(tmp_path):
    path = tmp_path / "text.npz"
    path.write_bytes(b"not an archive, not an array")
    with pytest.raises(weights.CheckpointError) as err:
        keras_vit.ViT_Ti16(weights=str(path))
    message = str(err.value)
    assert "not a zip archive of .npy arrays" in message and "pickle" not in message
