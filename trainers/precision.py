"""--mixed_precision: the compute dtype of a run's step, and what "auto" picks on this hardware;
`resolve_step` decides --jit_compile after it (the engine's `use_jit`), as each depends on the other.

"auto" gives bfloat16 where it measured faster and the accuracy held (README, "Mixed precision
and backends"), float32 everywhere else:
- TPUs, whose matrix units take bfloat16;
- GPUs of compute capability 8.0 and up (A100, H100; on an H100 the bfloat16 ViT-B/16 training
  step ran 2.4x its float32 one, Keras on JAX in benchmarks.accelerator);
- CPUs with bfloat16 matrix instructions, AMX (Intel Xeon from Sapphire Rapids) or AVX-512 BF16
  (AMD EPYC from Zen 4), on TensorFlow's oneDNN kernels, XLA off (XLA's CPU backend has no fast
  bfloat16 matmul), for an encoder at least as wide as ViT-Ti on at least 64 patches: smaller
  steps (the digits preset) measured slower in bfloat16, the casts outweighing the faster
  products. On a 2-core Zen 4 EPYC with nothing else running, the ViT-Ti/16 224 px training
  step ran at 1.28x and 1.46x its float32 speed in bfloat16 (two runs of benchmarks.train;
  docs/guides/benchmarks.md); an earlier run on a shared machine had measured 0.80x. On a
  2-core Xeon with AMX, 1.97x (31.7 against 16.1 images/s; 18.7 with XLA in float32).
Variables stay float32 under every policy, so a checkpoint resumes at any precision.
"""

import dataclasses
import os

import tensorflow as tf

from keras_vit import cpu_info
from trainers import distribute, engines

# --mixed_precision -> Keras dtype policy.
POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
# --mixed_precision's values: one of the policies, or auto (resolve picks one for the hardware).
PRECISIONS = ("auto", *POLICIES)
# The banner's words for each of cpu_info.BFLOAT16_FLAGS (the first one the CPU has is named).
CPU_BFLOAT16_WORDS = {"amx_bf16": "AMX bfloat16 matrix units", "avx512_bf16": "AVX-512 BF16 instructions"}
GPU_MIN_COMPUTE_CAPABILITY = (8, 0)  # Ampere: bfloat16 tensor cores
# The smallest step whose CPU choices were measured: bfloat16 here (width and patches), XLA in
# trainers/engines/tf.py (width: ViT-Ti/16 at 64, 128 and 224 px, 1.48x, 1.21x and 1.11x).
CPU_MIN_HIDDEN_SIZE = 192  # ViT-Ti's width
CPU_MIN_PATCHES = 64  # ViT-Ti/16 at 128 px: 1.12x in bfloat16; at 64 px (16 patches): 0.89x


@dataclasses.dataclass(frozen=True)
class StepChoice:
    """--mixed_precision and --jit_compile decided together for a run's step on this hardware."""

    precision: str  # "none", "bfloat16" or "float16"
    precision_note: str  # the banner's words for it, e.g. "bfloat16 (auto: TPU)"
    jit: bool  # XLA compiles the step
    jit_note: str  # the banner's reason for an "auto" XLA choice ("" for an explicit one)


def resolve_step(mixed_precision, jit_compile, strategy, *, engine, hidden_size, num_patches):
    """The StepChoice of a run of `engine` (its --engine name). The precision comes first: "auto"
    refuses bfloat16 on a CPU only where XLA is certain (--jit_compile=true, or an engine that
    always compiles); then the engine decides XLA knowing it (on a CPU "auto" compiles a float32
    step only). An always-XLA engine is answered from its registration, without loading it."""
    always_xla = engines.REGISTRY[engine].always_xla
    certain_jit = always_xla or jit_compile == "true"
    chosen, note = resolve(
        mixed_precision, strategy, jit=certain_jit, hidden_size=hidden_size, num_patches=num_patches
    )
    if always_xla:
        jit, jit_note = True, engines.always_xla_note(engine)
    else:
        jit, jit_note = engines.get(engine).use_jit(
            jit_compile, strategy, precision=chosen, hidden_size=hidden_size, num_patches=num_patches
        )
    return StepChoice(chosen, note, jit, jit_note)


def resolve(setting, strategy, *, jit, hidden_size, num_patches):
    """(precision, note): the --mixed_precision a run uses ("none", "bfloat16" or "float16") and
    the banner's words for it, e.g. "bfloat16 (auto: TPU)"."""
    if setting != "auto":
        return setting, compute_dtype(setting)
    choice, reason = _auto(strategy, jit, hidden_size, num_patches)
    return choice, f"{compute_dtype(choice)} (auto: {reason})"


def compute_dtype(precision):
    """The compute dtype of a resolved --mixed_precision ("none" -> "float32")."""
    return "float32" if precision == "none" else precision


def of_model(model):
    """The resolved --mixed_precision `model` was built under, read from its dtype policy."""
    compute = model.dtype_policy.compute_dtype
    return "none" if compute == "float32" else compute


def _auto(strategy, jit, hidden_size, num_patches):
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "bfloat16", "TPU"
    devices = distribute.worker_devices(strategy)
    if all("TPU" in d.upper() for d in devices):  # the jax engine's TPU mesh
        return "bfloat16", "TPU"
    if distribute.all_gpus(devices):
        capabilities = gpu_compute_capabilities(strategy)
        if capabilities and min(capabilities) >= GPU_MIN_COMPUTE_CAPABILITY:
            major, minor = min(capabilities)
            return "bfloat16", f"GPU of compute capability {major}.{minor}"
        return "none", "GPU without bfloat16 tensor cores; --mixed_precision=float16 may be faster"
    if not cpu_has_bfloat16():
        return "none", "no bfloat16 matrix instructions on this CPU"
    if jit:
        return "none", "XLA on CPU, which has no fast bfloat16 matmul"
    if hidden_size < CPU_MIN_HIDDEN_SIZE or num_patches < CPU_MIN_PATCHES:
        return "none", f"on CPU bfloat16 pays from width {CPU_MIN_HIDDEN_SIZE} and {CPU_MIN_PATCHES} patches"
    found = next(words for flag, words in CPU_BFLOAT16_WORDS.items() if flag in cpu_info.flags())
    return "bfloat16", f"CPU with {found}"


def gpu_compute_capabilities(strategy=None):
    """[(major, minor), ...] of the visible GPUs ([] where TensorFlow, or JAX for the jax engine,
    reports none)."""
    return engines.of(strategy).gpu_compute_capabilities(strategy)


def cpu_has_bfloat16():
    """Whether TensorFlow's CPU kernels have bfloat16 matrix instructions here: an x86 CPU with
    AMX or AVX-512 BF16, and oneDNN not switched off (without it bfloat16 is emulated, slowly)."""
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip() == "0":
        return False
    return cpu_info.has_bfloat16()
