"""How much memory a training step needs, how much the device has, and the accumulation that fits.

The paper's batch (512 for fine-tuning, 4096 for pre-training) does not fit on one GPU or a
laptop, but the update it defines does not need it to: summing the gradients of micro-batches
(trainers/loop.py) gives the same update. `--accum_steps=auto` picks the fewest micro-batches
whose step fits the device.

The estimate is an upper bound fitted to peak resident memory of training steps measured on
CPU (ViT-Ti/16, S/16 and B/16 at 224 and 384 px, XLA off; `python -m benchmarks.memory` prints
estimate against measurement). Per image and encoder block, the activations kept for the
backward pass take about 22 numbers per token and hidden unit, a per-token workspace of about
2,800 numbers, and a quarter of the attention matrix (the probabilities, per head); the
gradients, their all-reduced copy and the optimizer's slots come on top of the weights. On CPU
the input pipeline's prefetched batches share the same memory.
"""

import dataclasses
import os

from trainers import distribute, engines, precision
from trainers.data.pipeline import PREFETCH_BATCHES
from trainers.errors import UsageError

GB = 1e9
# Per image, per block: numbers kept for the backward pass (see the module docstring).
ACTIVATIONS_PER_TOKEN_AND_UNIT = 22
ACTIVATIONS_PER_TOKEN = 2800
ATTENTION_FRACTION = 0.26
# What the estimate adds to what it predicts, and the share of the detected memory it plans to use.
SAFETY_FACTOR = 1.2
USABLE_FRACTION = 0.85
# The input pipeline's batches in memory at once, measured: the one the step consumes and the
# strategy's copy of it on the device, the prefetched ones (trainers/data/pipeline.py), the one
# the batching stage holds until there is room, and the one it is assembling.
PREFETCHED_BATCHES = PREFETCH_BATCHES + 4
# TensorFlow's own footprint besides the step: kernels, graphs, the runtime.
RUNTIME_BYTES = int(0.5 * GB)
OPTIMIZER_SLOTS = {"sgd": 1, "adam": 2}


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """Bytes of one training step on one replica: `fixed` whatever the batch, `per_example` per
    image of a micro-batch."""

    fixed: int
    per_example: int

    def total(self, micro_batch):
        return self.fixed + self.per_example * micro_batch


def sequence_length(model, image_size):
    """The tokens a keras_vit ViT's encoder sees for `image_size` images: patches and class token."""
    grid = model.token_grid(image_size)
    return grid[0] * grid[1] + (1 if model.classifier == "token" else 0)


def estimate(model, *, image_size, optimizer="sgd", momentum_dtype="float32", mixed_precision="none"):
    """StepMemory of a training step of a keras_vit ViT on `image_size` (int) square images."""
    tokens = sequence_length(model, image_size)
    numbers = ACTIVATIONS_PER_TOKEN_AND_UNIT * tokens * model.hidden_size
    numbers += ACTIVATIONS_PER_TOKEN * tokens
    numbers += ATTENTION_FRACTION * model.num_heads * tokens * tokens
    activation_bytes = 2 if mixed_precision in ("bfloat16", "float16") else 4
    per_example = numbers * model.num_layers * activation_bytes
    params = model.count_params()
    slots = OPTIMIZER_SLOTS.get(optimizer, 2)
    if optimizer == "sgd" and momentum_dtype == "bfloat16":
        slots = 0.5
    # Gradients, their all-reduced (and clipped) copies, the accumulated sum; weights; slots.
    fixed = params * 4 * (3 + 1 + slots) + RUNTIME_BYTES
    return StepMemory(fixed=int(SAFETY_FACTOR * fixed), per_example=int(SAFETY_FACTOR * per_example))


def input_pipeline_bytes(batch, image_size):
    """Host memory of the training pipeline's float32 batches of `batch` images."""
    return PREFETCHED_BATCHES * batch * image_size * image_size * 3 * 4


@dataclasses.dataclass(frozen=True)
class DeviceMemory:
    """Memory one replica may use, and where the number comes from (for the banner)."""

    bytes: int
    source: str
    # The host's RAM, which the input pipeline's batches take from too.
    shared_with_input: bool = False


def device_memory(strategy, override_gb=0.0):
    """DeviceMemory per replica, or None where it cannot be known (TPUs: set --device_memory_gb)."""
    replicas = strategy.num_replicas_in_sync
    if override_gb:
        return DeviceMemory(int(override_gb * GB), "--device_memory_gb")
    devices = [d.upper() for d in distribute.worker_devices(strategy)]
    if any("TPU" in d for d in devices):
        return None
    if devices and all("GPU" in d for d in devices):
        limit = engines.of(strategy).gpu_memory_limit(strategy)
        if limit is None:
            return None
        return DeviceMemory(int(USABLE_FRACTION * limit), "GPU memory")
    available = _available_ram()
    if available is None:
        return None
    # Logical CPU devices (--cpu_devices) share the machine's memory.
    return DeviceMemory(int(USABLE_FRACTION * available / replicas), "available RAM", shared_with_input=True)


def choose_accum_steps(per_replica_batch, memory, budget):
    """The fewest micro-batches (a divisor of the per-replica batch) whose step fits `budget` bytes;
    None when even one image per micro-batch does not."""
    for accum in range(1, per_replica_batch + 1):
        if per_replica_batch % accum == 0 and memory.total(per_replica_batch // accum) <= budget:
            return accum
    return None


def _available_ram():
    """Bytes of RAM the kernel can give without swapping (Linux MemAvailable), else free pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


@dataclasses.dataclass(frozen=True)
class MemorySettings:
    """What the estimate of a run's step reads from its config (resolved once: trainers/plan_pieces.py)."""

    variant: str  # --model, as the error names it
    image_size: int
    batch_size: int  # the global batch of one update
    optimizer: str
    momentum_dtype: str
    device_memory_gb: float  # 0: detect the device's memory


def resolve_accum_steps(settings, strategy, model, setting):
    """(accumulation steps, a note for the banner) for `setting` (the run's --accum_steps, parsed:
    an int or "auto") on this device, for the step `settings` (MemorySettings) describe.

    "auto": the fewest micro-batches that fit (1 where the device's memory is unknown). A number
    is kept; if its step looks too big, the note says so and what auto would choose.
    """
    replicas = strategy.num_replicas_in_sync
    per_replica = settings.batch_size // replicas
    mixed_precision = precision.of_model(model)  # "auto" resolved when the model was built
    need = estimate(
        model,
        image_size=settings.image_size,
        optimizer=settings.optimizer,
        momentum_dtype=settings.momentum_dtype,
        mixed_precision=mixed_precision,
    )
    image_size = settings.image_size
    device = device_memory(strategy, settings.device_memory_gb)
    if device is not None and device.shared_with_input:
        need = StepMemory(need.fixed + input_pipeline_bytes(per_replica, image_size), need.per_example)
    if device is None:
        accum = 1 if setting == "auto" else setting
        return accum, "memory per replica unknown on this device (set --device_memory_gb to size the step)"
    fitting = choose_accum_steps(per_replica, need, device.bytes)
    if setting != "auto":
        step_gb = need.total(per_replica // setting) / GB
        note = f"step ~{step_gb:.1f} GB of {device.bytes / GB:.1f} GB ({device.source})"
        if fitting is None or fitting > setting:
            note += f"; it may not fit: --accum_steps=auto would choose {fitting or 'none (too big)'}"
        return setting, note
    if fitting is None:
        # bfloat16 halves the activations: offered where the step is not in it already.
        lighter = "--mixed_precision=bfloat16, " if mixed_precision == "none" else ""
        raise UsageError(
            f"a training step of {settings.variant} at {image_size} px needs ~{need.total(1) / GB:.1f} GB "
            f"per replica even one image at a time, and {device.source} is {device.bytes / GB:.1f} GB: use a "
            f"smaller --model or --image_size, {lighter}or more memory "
            "(--device_memory_gb overrides the detected size)."
        )
    micro = per_replica // fitting
    return fitting, (
        f"accum_steps auto: {fitting} (step ~{need.total(micro) / GB:.1f} GB of {device.bytes / GB:.1f} GB "
        f"{device.source} per replica)"
    )
