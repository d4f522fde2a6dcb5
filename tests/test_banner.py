"""The start banner: the facts of a run, on one screen, before its first step."""

import tensorflow as tf

import keras_vit
from configs import DIGITS_ARCHITECTURE, finetune
from trainers import banner, plan_pieces
from trainers.data.spec import DatasetSpec


def _pets_lines():
    config = finetune.get_config("oxford_iiit_pet")
    config.update(dict(workdir="/tmp/pets", model="ViT-Ti_16"))
    spec = DatasetSpec(
        name="oxford_iiit_pet",
        num_classes=37,
        num_examples={"train[:90%]": 3312, "train[90%:]": 368, "test": 3669},
    )
    model = keras_vit.create_model("ViT-Ti_16", image_size=config.image_size, num_classes=37)
    return banner.lines(
        settings=plan_pieces.banner_settings(config),
        spec=spec,
        strategy=tf.distribute.MirroredStrategy(["/cpu:0"]),
        model=model,
        eval_splits={"minival": "train[90%:]", "test": "test"},
        accum_steps=16,
        memory_note="accum_steps auto: 16 (step ~9.9 GB of 14.0 GB available RAM per replica)",
        precision_note="bfloat16 (auto: CPU with AMX bfloat16 matrix units)",
        jit=False,
        jit_note="auto: bfloat16 on CPU runs faster without XLA",
        start_step=0,
    )


DIGITS_SPEC = DatasetSpec(name="digits", num_classes=10, num_examples={"train": 1437, "test": 360})


def _digits_lines(config, model, *, jit=False, start_step=0):
    """The banner of a one-replica float32 digits run of `model` under `config`."""
    return banner.lines(
        settings=plan_pieces.banner_settings(config),
        spec=DIGITS_SPEC,
        strategy=tf.distribute.MirroredStrategy(["/cpu:0"]),
        model=model,
        eval_splits={"test": "test"},
        accum_steps=1,
        memory_note="",
        precision_note="float32",
        jit=jit,
        start_step=start_step,
    )


def _digits_model():
    shape = {k: v for k, v in DIGITS_ARCHITECTURE.items() if k != "model"}
    return keras_vit.create_model("ViT-Ti_16", num_classes=10, **shape)


def test_the_banner_names_model_data_hardware_batch_steps_and_workdir():
    lines = _pets_lines()
    # 577 tokens: (384 / 16)^2 patches and the class token.
    assert lines[0] == "model:    ViT-Ti_16 (5.6M parameters), 384 px, 577 tokens, weights: imagenet21k"
    text = "\n".join(lines)
    assert (
        "data:     oxford_iiit_pet, 37 classes; train 3,312 (train[:90%]); "
        "eval minival 368 (train[90%:]), test 3,669 (test)" in text
    )
    assert (
        "hardware: tf engine, MirroredStrategy: 1 replica(s) on 1 worker(s) [CPU:0]; "
        "XLA off (auto: bfloat16 on CPU runs faster without XLA); "
        "precision bfloat16 (auto: CPU with AMX bfloat16 matrix units)" in text
    )
    assert (
        "batch:    512 global = 1 replica(s) x 512 = 16 micro-batches of 32 (gradients summed); "
        "accum_steps auto: 16" in text
    )
    assert (
        "steps:    500 (100 warm-up, sgd, base_lr 0.01), from the start; eval every 100, checkpoint every 100"
        in text
    )
    assert lines[-1] == "workdir:  /tmp/pets"


def test_a_resumed_run_says_where_it_starts():
    config = finetune.get_config("digits")
    config.update(dict(workdir="/tmp/d"))
    lines = _digits_lines(config, _digits_model(), jit=True, start_step=600)
    text = "\n".join(lines)
    assert "from step 600" in text and "XLA on" in text
    assert "eval every 500, checkpoint every 500" in text
    assert "batch:    64 global = 1 replica(s) x 64;" in text and "micro-batches" not in text
    # The digits shape is no official variant: the banner says what it is, not "ViT-Ti_16".
    assert (
        "model:    custom ViT: patch 4, width 64, 4 layers, 4 heads (138,954 parameters), 16 px, "
        "17 tokens, weights: random initialisation" in text
    )


def test_the_banner_names_the_model_built_not_the_flag():
    # --model=ViT-B_16 with shape flags builds another model: the banner describes that one.
    config = finetune.get_config("digits")
    config.update(dict(workdir="/tmp/d", model="ViT-B_16"))
    tiny = keras_vit.create_model(
        "ViT-B_16", image_size=32, num_classes=10, patch_size=8, hidden_size=32, num_layers=1, num_heads=2
    )
    assert _digits_lines(config, tiny)[0].startswith(
        "model:    custom ViT: patch 8, width 32, 1 layer, 2 heads ("
    )
    hybrid = keras_vit.ViT(
        image_size=32,
        patch_size=1,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        mlp_dim=64,
        resnet_layers=(2, 2),
        num_classes=10,
    )
    assert _digits_lines(config, hybrid)[0].startswith(
        "model:    custom hybrid: ResNet stages (2, 2) + patch 1, width 32, 2 layers, 2 heads ("
    )
    config.image_size = 32
    official = keras_vit.create_model("ViT-S_32", image_size=32, num_classes=10)
    assert _digits_lines(config, official)[0].startswith("model:    ViT-S_32 (")


def test_zero_means_at_the_end():
    config = finetune.get_config("digits")
    config.update(dict(workdir="/tmp/d", eval_every=0, checkpoint_every=0))
    lines = _digits_lines(config, _digits_model())
    assert lines[4].endswith("from the start; eval at the end, checkpoint at the end"), lines[4]
    assert "every end" not in "\n".join(lines)
