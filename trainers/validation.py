"""Checks of a resolved config that need nothing but the config, shared by every trainer.

They run before anything is built or written, and each problem is one `UsageError` line.
"""

import functools
import json

import keras_vit
from configs.fields import OWN_FIELDS
from keras_vit import fileio
from trainers import data, workdir_owner
from trainers.errors import UsageError, first_line
from trainers.evaluators.fewshot import parse_l2_reg, parse_shots
from trainers.fields import FIELDS, GROUPS
from trainers.flags import ARCHITECTURE_OVERRIDES, check_known_fields, config_to_json


def validate_common(config, *, models=tuple(keras_vit.VARIANTS), known_fields=None, checks=None):
    """What every trainer needs: a dataset, a known model, allowed values, no negative sizes, a
    workdir; then `checks` ({group: [check(config)]}, a trainer's own).

    The checks run topic by topic in the order of trainers/fields.py's GROUPS (what to train on,
    the model, how it learns, ..., where it writes), each topic's allowed values first, so the
    first error is the first thing a user fixes, and it names the flag to change.
    """
    check_known_fields(config, known_fields or FIELDS)
    common = {
        "data": [_check_dataset],
        "model": [functools.partial(_check_model, models=models)],
        "hardware": [_check_cpu_devices],
        "output": [_check_workdir],
    }
    for group in GROUPS:
        for name in config:
            field = FIELDS.get(name)
            if field and field.group == group and field.choices and config[name] not in field.choices:
                raise UsageError(f"--{name} must be one of {', '.join(field.choices)}, got {config[name]!r}.")
        for check in common.get(group, []) + (checks or {}).get(group, []):
            check(config)


def validate_fewshot(config, *, models, known_fields):
    """validate_common, with the few-shot command's batch and probes in their topics' places."""
    validate_common(
        config,
        models=models,
        known_fields=known_fields,
        checks={"optimization": [_check_fewshot_batch], "evaluation": [_check_probes]},
    )


def _check_fewshot_batch(config):
    if config.batch_size <= 0:
        raise UsageError(f"--batch_size must be positive, got {config.batch_size}.")


def _check_probes(config):
    if config.seeds <= 0:
        raise UsageError(f"--seeds must be positive, got {config.seeds}.")
    parse_shots(config.shots)
    parse_l2_reg(config.l2_reg)


def validate_training(config):
    """validate_common, with the optimisation, loop and evaluation fields of fine-tuning and
    pre-training in their topics' places."""
    validate_common(
        config,
        checks={
            "data": [_check_training_data],
            "model": [_check_regularisation],
            "optimization": [_check_optimization],
            "loop": [_check_loop],
            "evaluation": [_check_evaluation],
            "hardware": [_check_hardware],
        },
    )
    # The fields written as text (--accum_steps, --eval_splits, --pp_*, --augreg's --randaug and
    # --mixup) are parsed, and checked, once: when the run's plan is resolved (trainers/plan.py).


def _check_dataset(config):
    if not config.dataset:
        raise UsageError("--dataset is required (a TFDS name, folder:PATH or digits).")
    # The name alone (nothing is prepared or read): an unknown one is the first thing to fix.
    data.check_name(config.dataset, data_dir=config.data_dir or None)


def _check_model(config, models):
    if config.model not in models:
        raise UsageError(f"unknown --model {config.model!r}; known models: {', '.join(models)}.")
    for name in ARCHITECTURE_OVERRIDES:
        if config[name] < 0:
            raise UsageError(f"--{name} must not be negative, got {config[name]}.")
    if config.image_size <= 0:
        raise UsageError(f"--image_size must be positive, got {config.image_size}.")
    # NumPy's generators (the data order, keras_vit's initial weights) take 32-bit seeds.
    if "seed" in config and not 0 <= config.seed < 2**32:
        raise UsageError(f"--seed must be a whole number from 0 to {2**32 - 1}, got {config.seed}.")


def _check_workdir(config):
    if not config.workdir:
        raise UsageError("--workdir is required (where checkpoints, logs and results go).")
    check_workdir_path(config.workdir)


def check_workdir_path(workdir):
    """Raises UsageError where `workdir` can never be a folder: it is a file, or (a local path) a
    file stands where one of its parents would go. Whether this process may create it is
    learnt when it does (trainers/disk_space.py's create_workdir, the run's first write)."""
    if fileio.exists(workdir) and not fileio.isdir(workdir):
        raise UsageError(f"--workdir {workdir!r} exists and is not a directory.")
    blocking = fileio.file_in_the_way(workdir)
    if blocking:
        raise UsageError(
            f"--workdir {workdir!r} cannot be created: {blocking!r} is a file, not a folder; "
            "choose another --workdir."
        )


def _check_training_data(config):
    if config.examples_per_class < 0:
        raise UsageError(f"--examples_per_class must not be negative, got {config.examples_per_class}.")
    if not 0 < config.crop_min_area <= 1:
        raise UsageError(f"--crop_min_area must be in (0, 1], got {config.crop_min_area}.")


def _check_regularisation(config):
    if not config.dropout_rate >= 0:
        raise UsageError(f"--dropout_rate must not be negative, got {config.dropout_rate}.")
    if config.dropout_rate >= 1:
        raise UsageError(f"--dropout_rate must be below 1, got {config.dropout_rate}.")
    if not 0 <= config.stochastic_depth < 1:
        raise UsageError(f"--stochastic_depth must be in [0, 1), got {config.stochastic_depth}.")


def _check_optimization(config):
    for name in ("total_steps", "batch_size"):
        if config[name] <= 0:
            raise UsageError(f"--{name} must be positive, got {config[name]}.")
    if config.warmup_steps < 0:
        raise UsageError(f"--warmup_steps must not be negative, got {config.warmup_steps}.")
    if config.warmup_steps > config.total_steps:
        raise UsageError(
            f"--warmup_steps ({config.warmup_steps}) exceeds --total_steps ({config.total_steps}): "
            f"lower --warmup_steps or raise --total_steps."
        )
    for name in ("base_lr", "weight_decay", "grad_norm_clip"):
        if not config[name] >= 0:
            raise UsageError(f"--{name} must not be negative, got {config[name]}.")


def _check_loop(config):
    for name in ("steps_per_loop", "keep_checkpoints"):
        if config[name] <= 0:
            raise UsageError(f"--{name} must be positive, got {config[name]}.")
    if config.checkpoint_every < 0:
        raise UsageError(f"--checkpoint_every must not be negative, got {config.checkpoint_every}.")


def _check_evaluation(config):
    for name in ("eval_every", "fewshot_every"):
        if config[name] < 0:
            raise UsageError(f"--{name} must not be negative, got {config[name]}.")


def _check_cpu_devices(config):
    if config.cpu_devices < 0:
        raise UsageError(f"--cpu_devices must not be negative, got {config.cpu_devices}.")


def _check_hardware(config):
    if config.device_memory_gb < 0:
        raise UsageError(f"--device_memory_gb must not be negative, got {config.device_memory_gb}.")


# Where and how long a run executes, and what it logs, not what it computes: a re-run may change
# these and resume (extending --total_steps, moving to other hardware, evaluating more often).
RERUN_FREE_FIELDS = frozenset(
    {
        "workdir",
        "data_dir",
        "manual_dir",
        "strategy",
        "tpu",
        "cpu_devices",
        "cpu_threads",
        "jit_compile",
        "verbose",
        # The same update, split differently to fit other hardware.
        "accum_steps",
        "device_memory_gb",
        "steps_per_loop",
        "eval_every",
        "checkpoint_every",
        "keep_checkpoints",
        "total_steps",
        "fewshot_every",
        "sweep_lrs",
        "allow_config_change",
    }
)


def config_changes(config, recorded, free=RERUN_FREE_FIELDS):
    """[(name, recorded value, value now), ...]: where `config` differs from a recorded config.json,
    the `free` fields left out. Shared by plain re-runs and the sweep's reuse of finished runs."""
    current = json.loads(config_to_json(config))
    names = sorted((current.keys() | recorded.keys()) - free)
    # A field the recorded run did not have yet (it was written by an earlier release) ran at
    # that field's default: only another value is a change.
    recorded = {name: recorded[name] if name in recorded else _default(name) for name in names}
    return [
        (name, recorded[name], current.get(name))
        for name in names
        if _comparable(name, recorded[name]) != _comparable(name, current.get(name))
    ]


# Precisions a run may move between and resume: their variables, checkpoints and optimizer state
# are all float32 (only float16 adds loss-scaling state). "auto" resolves per device, so moving a
# run to other hardware may change its precision, as it may change XLA.
_INTERCHANGEABLE_PRECISIONS = ("none", "bfloat16", "auto")


def _comparable(name, value):
    if name == "mixed_precision" and value in _INTERCHANGEABLE_PRECISIONS:
        return _INTERCHANGEABLE_PRECISIONS
    return value


def _default(name):
    return FIELDS[name].default if name in FIELDS else None


def check_rerun(config):
    """A workdir that holds a run with other settings is not silently resumed under new ones, and
    one that holds another command's files is not written over."""
    path = fileio.join(config.workdir, "config.json")
    if not fileio.exists(path):
        workdir_owner.check_unowned_outputs(config.workdir)
        return
    try:
        with fileio.open(path) as f:
            recorded = json.load(f)
    except (OSError, ValueError) as e:
        if config.allow_config_change:
            return
        raise UsageError(
            f"{path} is not a readable config.json ({first_line(e)}): use another --workdir, or add "
            "--allow_config_change to resume and write it anew"
        ) from None
    if not workdir_owner.is_training_config(recorded):
        # Not even --allow_config_change: there is no run here to resume (trainers/workdir_owner.py).
        raise UsageError(
            f"{path} is no training run's (few-shot probes' or another program's), and this run "
            "would write over it: choose another --workdir."
        )
    _check_trainer(config, recorded)
    _check_engine(config, recorded)
    if config.allow_config_change:
        return
    changes = [f"--{name}: {old!r} -> {new!r}" for name, old, new in config_changes(config, recorded)]
    if changes:
        raise UsageError(
            f"{config.workdir} holds a run with other settings ({'; '.join(changes)}): rerun with its flags, "
            "use another --workdir, or add --allow_config_change to resume under the new ones"
        )


def _trainer_of(fields):
    """The trainer whose own fields (configs.fields.OWN_FIELDS) `fields` hold, or None."""
    return next((name for name, own in OWN_FIELDS.items() if set(own) & set(fields)), None)


def _check_trainer(config, recorded):
    """Not even --allow_config_change resumes one trainer's run with the other: their models and
    optimizers differ (a pre-training run's head and pre-logits layer, say)."""
    before, now = _trainer_of(recorded), _trainer_of(json.loads(config_to_json(config)))
    if before and now and before != now:
        raise UsageError(
            f"{config.workdir} holds a {before} run: resume it with python -m {before}, or start "
            f"from its model with --weights={config.workdir} and another --workdir"
        )


def _check_engine(config, recorded):
    """Not even --allow_config_change moves a run to the other engine: their checkpoints hold the
    state in different layouts (trainers/loop.py, trainers/jax_loop.py)."""
    engine = config.engine
    before = recorded.get("engine", _default("engine")) if isinstance(recorded, dict) else engine
    if before != engine:
        raise UsageError(
            f"{config.workdir} holds a run of --engine={before}, whose checkpoints --engine={engine} "
            f"cannot load: rerun it with --engine={before}, or use another --workdir"
        )
