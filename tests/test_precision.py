"""--mixed_precision=auto: bfloat16 exactly where it measured faster, float32 elsewhere."""

import keras
import pytest
import tensorflow as tf

from keras_vit import cpu_info
from trainers import distribute, finetune, precision, training

CPU = tf.distribute.MirroredStrategy(["/cpu:0"])
VIT_TI = dict(jit=False, hidden_size=192, num_patches=196)  # ViT-Ti/16 at 224 px


@pytest.fixture
def bfloat16_cpu(monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx512f", "amx_bf16"}))


@pytest.fixture
def plain_cpu(monkeypatch):
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx2", "avx512f"}))


def test_an_explicit_setting_is_kept_whatever_the_hardware(plain_cpu):
    for setting in ("none", "bfloat16", "float16"):
        chosen, note = precision.resolve(setting, CPU, **VIT_TI)
        assert chosen == setting
    assert precision.resolve("none", CPU, **VIT_TI)[1] == "float32"


def test_auto_on_a_cpu_with_bfloat16_instructions(bfloat16_cpu):
    assert precision.resolve("auto", CPU, **VIT_TI) == (
        "bfloat16",
        "bfloat16 (auto: CPU with AMX bfloat16 matrix units)",
    )
    # Under XLA (no fast bfloat16 matmul on CPU) and for a step too small to gain: float32.
    assert precision.resolve("auto", CPU, jit=True, hidden_size=192, num_patches=196)[0] == "none"
    assert precision.resolve("auto", CPU, jit=False, hidden_size=64, num_patches=196)[0] == "none"
    chosen, note = precision.resolve("auto", CPU, jit=False, hidden_size=192, num_patches=16)
    assert chosen == "none" and note.startswith("float32 (auto: ")


def test_auto_is_bfloat16_on_avx512_bf16_without_amx_and_says_which(monkeypatch):
    # An AMD EPYC (Zen 4): the ViT-Ti/16 step measured 1.28x-1.46x its float32 speed in bfloat16.
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert precision.resolve("auto", CPU, **VIT_TI) == (
        "bfloat16",
        "bfloat16 (auto: CPU with AVX-512 BF16 instructions)",
    )
    # The same size limits as with AMX: a digits-sized step stays float32.
    assert precision.resolve("auto", CPU, jit=False, hidden_size=64, num_patches=16)[0] == "none"
    # Both: AMX is what the banner names.
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx512_bf16", "amx_bf16"}))
    assert precision.resolve("auto", CPU, **VIT_TI)[1].endswith("(auto: CPU with AMX bfloat16 matrix units)")


def test_auto_names_each_bfloat16_flag_the_library_knows(monkeypatch):
    """A flag added to cpu_info.BFLOAT16_FLAGS without banner words would end `resolve` in a
    StopIteration on such a CPU."""
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    for flag in cpu_info.BFLOAT16_FLAGS:
        monkeypatch.setattr(cpu_info, "flags", lambda flag=flag: frozenset({"avx512f", flag}))
        words = precision.CPU_BFLOAT16_WORDS[flag]
        assert precision.resolve("auto", CPU, **VIT_TI) == ("bfloat16", f"bfloat16 (auto: CPU with {words})")


def test_auto_is_float32_on_a_cpu_without_them_or_without_onednn(plain_cpu, monkeypatch):
    chosen, note = precision.resolve("auto", CPU, **VIT_TI)
    assert (chosen, note) == ("none", "float32 (auto: no bfloat16 matrix instructions on this CPU)")
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"amx_bf16"}))
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # bfloat16 emulated: slow
    assert precision.resolve("auto", CPU, **VIT_TI)[0] == "none"


def test_auto_on_gpus_follows_their_compute_capability(monkeypatch, plain_cpu):
    monkeypatch.setattr(distribute, "worker_devices", lambda strategy: ["/job:localhost/device:GPU:0"])
    monkeypatch.setattr(precision, "gpu_compute_capabilities", lambda strategy=None: [(9, 0), (8, 0)])
    assert precision.resolve("auto", CPU, **VIT_TI) == (
        "bfloat16",
        "bfloat16 (auto: GPU of compute capability 8.0)",
    )
    # A small model too: the GPU's bfloat16 tensor cores do not need large matrices to pay.
    assert precision.resolve("auto", CPU, jit=True, hidden_size=64, num_patches=16)[0] == "bfloat16"
    monkeypatch.setattr(
        precision, "gpu_compute_capabilities", lambda strategy=None: [(8, 6), (7, 5)]
    )  # one T4
    assert precision.resolve("auto", CPU, **VIT_TI)[0] == "none"


def test_auto_on_a_tpu_is_bfloat16(plain_cpu):
    tpu = tf.distribute.TPUStrategy.__new__(tf.distribute.TPUStrategy)  # no TPU to connect to here
    assert precision.resolve("auto", tpu, **VIT_TI) == ("bfloat16", "bfloat16 (auto: TPU)")


class _Spec:  # all of a dataset that build_trainer reads
    num_classes = 10


def _config(**overrides):
    config = finetune.get_config("digits")
    config.update(dict(workdir="/tmp/unused", batch_size=8, accum_steps=1, **overrides))
    return config


def test_build_trainer_builds_the_model_at_the_resolved_precision(bfloat16_cpu):
    # The digits preset (width 64, 16 patches) stays float32; a ViT-Ti-wide encoder on 64
    # patches is built mixed_bfloat16 and its banner note says why; the global policy is restored.
    small = training.build_trainer(_config(), CPU, _Spec)
    assert small.trainer.model.dtype_policy.name == "float32"
    wide = training.build_trainer(
        _config(hidden_size=192, num_heads=3, mlp_dim=768, num_layers=1, image_size=32), CPU, _Spec
    )
    assert wide.trainer.model.dtype_policy.name == "mixed_bfloat16"
    assert wide.precision_note == "bfloat16 (auto: CPU with AMX bfloat16 matrix units)"
    assert keras.mixed_precision.global_policy().name == "float32"


def test_build_trainer_counts_hybrid_patches_after_the_resnet_stem(bfloat16_cpu):
    # R26+ViT-S_32 at 224 px: the stem downsamples 32x, a 7 x 7 grid of 49 patches: float32.
    # At 320 px it is 10 x 10: bfloat16.
    config = _config(
        model="R26+ViT-S_32",
        patch_size=0,
        hidden_size=0,
        num_heads=0,
        mlp_dim=0,
        num_layers=1,
        image_size=224,
    )
    assert training.build_trainer(config, CPU, _Spec).trainer.model.dtype_policy.name == "float32"
    config.image_size = 320
    assert training.build_trainer(config, CPU, _Spec).trainer.model.dtype_policy.name == "mixed_bfloat16"


def _step(mixed_precision, jit_compile, engine="tf", hidden_size=192, num_patches=196):
    step = precision.resolve_step(
        mixed_precision, jit_compile, CPU, engine=engine, hidden_size=hidden_size, num_patches=num_patches
    )
    return step.precision, step.jit, step.jit_note


def test_auto_xla_on_a_cpu_compiles_float32_steps_of_vit_ti_and_up(plain_cpu, monkeypatch):
    """The ViT-Ti/16 float32 step ran 1.08x-1.16x faster under XLA on every kind of CPU measured,
    and more on fewer patches; a bfloat16 step (no fast bfloat16 matmul under XLA) and a narrower
    model (not measured: the digits preset's) stay without it."""
    assert _step("auto", "auto") == ("none", True, "auto: float32 step on CPU")
    assert _step("auto", "auto", num_patches=16)[:2] == ("none", True)  # ViT-Ti/16 at 64 px: 1.48x
    assert _step("auto", "auto", hidden_size=64, num_patches=16) == (
        "none",
        False,
        "auto: on CPU XLA is measured from width 192",
    )
    assert _step("bfloat16", "auto") == ("bfloat16", False, "auto: bfloat16 on CPU runs faster without XLA")
    assert _step("auto", "false") == ("none", False, "")  # an explicit setting has no reason to give
    monkeypatch.setattr(cpu_info, "flags", lambda: frozenset({"avx512f", "amx_bf16"}))
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    # With bfloat16 matrix instructions "auto" picks bfloat16 first, and then no XLA ...
    assert _step("auto", "auto")[:2] == ("bfloat16", False)
    # ... unless XLA is certain, which keeps float32; a float32 run gets XLA from "auto".
    assert _step("auto", "true") == ("none", True, "")
    assert _step("none", "auto")[:2] == ("none", True)


def test_auto_xla_on_gpus_and_tpus_and_the_jax_engine(plain_cpu, monkeypatch):
    # The jax engine is answered from its registration: its module (and JAX) is not loaded here.
    assert _step("auto", "auto", engine="jax") == ("none", True, "the jax engine compiles its whole step")
    tpu = tf.distribute.TPUStrategy.__new__(tf.distribute.TPUStrategy)
    step = precision.resolve_step("auto", "auto", tpu, engine="tf", hidden_size=192, num_patches=196)
    assert (step.precision, step.jit) == ("bfloat16", False)
    monkeypatch.setattr(distribute, "worker_devices", lambda strategy: ["/job:localhost/device:GPU:0"])
    monkeypatch.setattr(precision, "gpu_compute_capabilities", lambda strategy=None: [(7, 5)])
    assert _step("auto", "auto", hidden_size=64, num_patches=16) == ("none", True, "auto: GPU")
