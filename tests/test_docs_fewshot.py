"""docs/guides/fewshot.md's blocks: the few-shot linear probe commands and evaluator."""

import os

import pytest
import synthetic_checkpoints as synth
from docs_standins import (
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    run_command,
    run_python,
    trainer_config,
)
from trainer_cli import make_fake_tfds, read_results

import keras_vit


@pytest.mark.slow
def test_fewshot_commands(tmp_path, registry_cache, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_HOME", registry_cache("imagenet21k", "ViT-B_16"))
    small = tmp_path / "small_tfds"  # features of hundreds of images per command take minutes here
    make_fake_tfds(small, "cifar10", per_class=1, test_per_class=1)
    make_fake_tfds(small, "oxford_iiit_pet", per_class=1, test_per_class=1)
    pre = tmp_path / "pre"
    os.makedirs(pre)  # a pre-training run's export: Ti/16 with its pre-logits layer
    ti16 = synth.vit_jax_params(6, image_size=224, num_classes=10, representation_size=192, **synth.TI16)
    synth.save(pre / "model.npz", ti16)
    # Feature batches are padded to --batch_size (256), and the padding costs as much as the images
    # (most of the command's time for B/16 at 224 px): one batch of exactly each split's images
    # (10 of cifar10, 37 of oxford_iiit_pet) has none.
    one_shot = [f"--data_dir={small}", "--shots=1", "--seeds=1"]
    expected = {  # dataset -> (extra flags, feature dimension, shots)
        "cifar10": ([*one_shot, "--batch_size=10"], 768, (1,)),  # the pre-logits of the imagenet21k file
        "oxford_iiit_pet": ([*one_shot, "--batch_size=37"], 192, (1,)),  # the pre-logits of the run
        "digits:5-9": ([], 8 * 8 * 3, (1, 5, 10, 25)),  # the raw pixels
    }
    commands = block("fewshot").commands
    assert len(commands) == len(expected)
    for command in commands:
        config = trainer_config(command, {"/tmp/pre": str(pre)})
        extra, dim, shots = expected[config.dataset]
        workdir = str(tmp_path / os.path.basename(config.workdir))
        replacements = {"/tmp/pre": str(pre), config.workdir: workdir}
        code, out, err = run_command(command, capsys, replacements, extra)
        assert code == 0, command + err
        results = read_results(workdir)
        assert results["feature_dim"] == dim, command
        for k in shots:
            assert 0 <= results[f"{k}shot_accuracy"] <= 1 and f"{k}shot_accuracy_std" in results


@pytest.mark.slow
def test_fewshot_evaluator_block(default_tfds):
    model = keras_vit.ViT(
        image_size=224, patch_size=32, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, num_classes=10
    )
    _, results = run_python(block("fewshot-evaluator"), {"model": model})
    for k in (1, 5, 10, 25):
        assert 0 <= results[f"fewshot/cifar10/{k}shot_accuracy"] <= 1
        assert f"fewshot/cifar10/{k}shot_accuracy_std" in results
