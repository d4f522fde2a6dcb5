"""Checks of a resolved config that need nothing but the config, shared by every trainer.

They run before anything is built or written, and each problem is one `UsageError` line.
"""

import keras_vit
from configs.fields import FIELDS
from keras_vit import fileio
from trainers.errors import UsageError
from trainers.flags import check_known_fields, parse_eval_splits

# Model-shape overrides: 0 means "the variant's own".
ARCHITECTURE_OVERRIDES = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


def validate_common(config, *, models=tuple(keras_vit.VARIANTS), known_fields=None):
    """What every trainer needs: a dataset, a workdir, a known model, allowed values, no negative sizes."""
    check_known_fields(config, known_fields or FIELDS)
    if not config.dataset:
        raise UsageError("--dataset is required (a TFDS name, folder:PATH or digits).")
    if not config.workdir:
        raise UsageError("--workdir is required (where checkpoints, logs and results go).")
    if fileio.exists(config.workdir) and not fileio.isdir(config.workdir):
        raise UsageError(f"--workdir {config.workdir!r} exists and is not a directory.")
    if config.model not in models:
        raise UsageError(f"unknown --model {config.model!r}; known models: {', '.join(models)}.")
    for name in config:
        choices = FIELDS[name].choices if name in FIELDS else ()
        if choices and config[name] not in choices:
            raise UsageError(f"--{name} must be one of {', '.join(choices)}, got {config[name]!r}.")
    for name in (*ARCHITECTURE_OVERRIDES, "cpu_devices"):
        if config[name] < 0:
            raise UsageError(f"--{name} must not be negative, got {config[name]}.")
    if config.image_size <= 0:
        raise UsageError(f"--image_size must be positive, got {config.image_size}.")


def validate_training(config):
    """validate_common, then the optimisation, loop and split fields of fine-tuning and pre-training."""
    validate_common(config)
    for name in ("total_steps", "batch_size", "accum_steps", "steps_per_loop", "keep_checkpoints"):
        if config[name] <= 0:
            raise UsageError(f"--{name} must be positive, got {config[name]}.")
    for name in ("warmup_steps", "eval_every", "checkpoint_every", "examples_per_class", "fewshot_every"):
        if config[name] < 0:
            raise UsageError(f"--{name} must not be negative, got {config[name]}.")
    if config.warmup_steps > config.total_steps:
        raise UsageError(
            f"--warmup_steps ({config.warmup_steps}) exceeds --total_steps ({config.total_steps})."
        )
    for name in ("base_lr", "weight_decay", "grad_norm_clip", "dropout_rate"):
        if not config[name] >= 0:
            raise UsageError(f"--{name} must not be negative, got {config[name]}.")
    if not 0 < config.crop_min_area <= 1:
        raise UsageError(f"--crop_min_area must be in (0, 1], got {config.crop_min_area}.")
    if config.dropout_rate >= 1:
        raise UsageError(f"--dropout_rate must be below 1, got {config.dropout_rate}.")
    if config.batch_size % config.accum_steps:
        raise UsageError(
            f"--batch_size {config.batch_size} is not divisible by --accum_steps {config.accum_steps}."
        )
    if not parse_eval_splits(config.eval_splits):
        raise UsageError("--eval_splits is empty; give at least one name=split pair.")


def check_replicas(config, replicas):
    if config.batch_size % (replicas * config.accum_steps):
        raise UsageError(
            f"--batch_size {config.batch_size} is not divisible by {replicas} replicas x --accum_steps "
            f"{config.accum_steps}; use a multiple of {replicas * config.accum_steps}."
        )
