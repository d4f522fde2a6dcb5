"""--accum_steps=auto: the memory estimate, the accumulation it chooses, and the same update."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import trainer_cli

import keras_vit
from configs import finetune
from trainers import memory, plan_pieces, training
from trainers.errors import UsageError
from trainers.flags import parse_accum_steps


def _model(image_size=16, **shape):
    shape = shape or dict(patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128)
    return keras_vit.create_model("ViT-Ti_16", image_size=image_size, num_classes=10, **shape)


def test_the_estimate_grows_with_the_tokens_the_width_and_the_optimizer_state():
    small = memory.estimate(_model(16), image_size=16)
    larger_images = memory.estimate(_model(32), image_size=32)
    # 65 tokens instead of 17: at least in proportion, more for the attention matrix.
    assert larger_images.per_example / small.per_example > 65 / 17
    wider = memory.estimate(
        _model(16, patch_size=4, hidden_size=128, num_layers=4, num_heads=4, mlp_dim=256), image_size=16
    )
    assert wider.per_example > small.per_example and wider.fixed > small.fixed
    model = _model(16)
    sgd = memory.estimate(model, image_size=16, optimizer="sgd")
    adam = memory.estimate(model, image_size=16, optimizer="adam")
    half = memory.estimate(model, image_size=16, mixed_precision="bfloat16")
    assert adam.fixed > sgd.fixed and adam.per_example == sgd.per_example
    assert half.per_example == pytest.approx(sgd.per_example / 2, rel=0.01)


def test_the_estimate_of_vit_b16_at_384_px_is_in_the_measured_range():
    # Measured on CPU (benchmarks/memory.py): a B/16 training step at 224 px holds about 0.19 GB per
    # image; at 384 px, with 3x the tokens, well over half a gigabyte. The estimate is an upper bound.
    model = keras_vit.create_model("ViT-B_16", image_size=384, num_classes=37)
    need = memory.estimate(model, image_size=384)
    assert 0.5e9 < need.per_example < 1.5e9
    assert 1.5e9 < need.fixed < 3e9  # 86M float32 weights, gradients, copies and momentum


def test_choose_the_fewest_micro_batches_that_fit():
    step = memory.StepMemory(fixed=100, per_example=10)
    assert memory.choose_accum_steps(64, step, 100 + 640) == 1
    assert memory.choose_accum_steps(64, step, 100 + 639) == 2  # 32 per micro-batch
    assert memory.choose_accum_steps(64, step, 100 + 200) == 4  # 16 fit; 20 would not divide 64
    assert memory.choose_accum_steps(48, step, 100 + 100) == 6  # 8 per micro-batch: divisors only
    assert memory.choose_accum_steps(64, step, 100 + 10) == 64
    assert memory.choose_accum_steps(64, step, 100 + 9) is None


def _digits_config(workdir, **changes):
    config = finetune.get_config("digits")
    config.update(dict(workdir=str(workdir), total_steps=4, warmup_steps=1, eval_every=0, checkpoint_every=0))
    config.update(changes)
    return config


def _budget_for_micro_batch(micro):
    """A --device_memory_gb under which auto splits the digits preset's 64 into micro-batches of `micro`."""
    model = _model(16)
    need = memory.estimate(model, image_size=16)
    return (need.total(micro) + need.total(2 * micro)) / 2 / memory.GB


@pytest.mark.slow
def test_auto_splits_a_batch_that_does_not_fit_and_makes_the_same_update(tmp_path, capsys):
    config = _digits_config(tmp_path / "whole", accum_steps=1)
    budget = _budget_for_micro_batch(16)
    whole = training.run(config)
    split = training.run(_digits_config(tmp_path / "split", device_memory_gb=budget))
    out = capsys.readouterr().out
    assert "64 global = 1 replica(s) x 64 = 4 micro-batches of 16" in out, out
    assert "accum_steps auto: 4" in out
    assert split["train_loss"] == pytest.approx(whole["train_loss"], rel=1e-5)
    assert split["eval"]["test"]["accuracy"] == whole["eval"]["test"]["accuracy"]
    a = trainer_cli.read_weights(tmp_path / "whole")
    b = trainer_cli.read_weights(tmp_path / "split")
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-6, err_msg=key)


def test_nothing_fits_is_one_line_that_says_what_to_do(tmp_path):
    config = _digits_config(tmp_path / "run", device_memory_gb=0.01)
    with pytest.raises(UsageError) as error:
        training.run(config)
    message = str(error.value)
    assert "\n" not in message
    assert "needs ~" in message and "--device_memory_gb" in message and "--image_size" in message
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_nothing_fits_offers_bfloat16_only_to_a_float32_step_and_sizes_each():
    config = _digits_config("/tmp/unused", device_memory_gb=0.0001, image_size=384)
    strategy = tf.distribute.get_strategy()
    messages = {}
    for policy in ("float32", "mixed_bfloat16"):
        keras.mixed_precision.set_global_policy(policy)
        try:  # ViT-B/16's encoder at 384 px: activations large enough to show in the message
            model = _model(384, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        with pytest.raises(UsageError) as error:
            memory.resolve_accum_steps(
                plan_pieces.memory_settings(config), strategy, model, parse_accum_steps(config.accum_steps)
            )
        messages[policy] = str(error.value)
    assert "--mixed_precision=bfloat16" in messages["float32"]
    assert "--mixed_precision" not in messages["mixed_bfloat16"]
    # The bfloat16 step's activations are counted at 2 bytes: a smaller need.
    need = {p: float(m.split("needs ~")[1].split(" GB")[0]) for p, m in messages.items()}
    assert need["mixed_bfloat16"] < need["float32"]


def test_an_explicit_accumulation_is_kept_and_a_too_large_one_is_flagged():
    strategy = tf.distribute.get_strategy()
    model = _model(16)
    config = _digits_config("/tmp/unused", accum_steps=2, device_memory_gb=100.0)
    assert (
        memory.resolve_accum_steps(
            plan_pieces.memory_settings(config), strategy, model, parse_accum_steps(config.accum_steps)
        )[0]
        == 2
    )
    need = memory.estimate(model, image_size=16)
    config = _digits_config("/tmp/unused", accum_steps=1, device_memory_gb=need.total(20) / memory.GB)
    accum, note = memory.resolve_accum_steps(
        plan_pieces.memory_settings(config), strategy, model, parse_accum_steps(config.accum_steps)
    )
    assert accum == 1 and "may not fit" in note and "would choose 4" in note
