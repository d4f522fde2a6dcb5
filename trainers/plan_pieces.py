"""The pieces of a run's plan: what the model builder, the optimizer, the loop, the workdir, the
memory estimate, the banner and the evaluators are handed, each read from the config here, once
(trainers/plan.py puts them in the Plan).

These functions are the one place below validation where those fields are read; a field a
trainer's config does not have (the few-shot command has no --loss, only fine-tuning has
--new_head) is decided here too, so the modules that take the pieces never look at a config.
"""

import dataclasses
import types

from configs.fields import DEFAULTS
from keras_vit.variants import VARIANTS
from trainers import banner, memory, model_builder, optimizers
from trainers.evaluators import from_config
from trainers.flags import config_to_json

# The shape fields that override the variant's where they are set (0: the variant's).
SHAPE_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


def field_value(config, name):
    """`name`'s value in `config`, or its declared default where this trainer has no such field."""
    return config[name] if name in config else DEFAULTS[name]


def same_named(piece, config, **given):
    """`piece`, a settings dataclass, with each field the config's field of the same name, but
    those in `given`: a piece states its fields once, and a field renamed in the config fails here."""
    read = {field.name: config[field.name] for field in dataclasses.fields(piece) if field.name not in given}
    return piece(**read, **given)


def model_settings(config):
    """The ModelSettings of a config of any trainer (fine-tuning, pre-training, few-shot)."""
    kwargs = dict(
        image_size=config.image_size,
        include_preprocessing=False,  # the trainers feed [-1, 1] images
        dropout_rate=config.dropout_rate,
        stochastic_depth_rate=config.stochastic_depth,
        classifier=config.classifier,
        posemb=config.posemb,
        classifier_activation=None,  # the loss takes logits
    )
    kwargs.update({name: config[name] for name in SHAPE_FIELDS if config[name]})
    hidden = kwargs.get("hidden_size", VARIANTS[config.model]["hidden_size"])
    # Masked patch prediction trains no pre-logits layer (it predicts from the patch tokens), so
    # its runs have none: the exported representation is the encoder's own.
    masked_patch = field_value(config, "objective") == "masked_patch"
    kwargs["representation_size"] = hidden if config.pre_logits and not masked_patch else None
    return model_builder.ModelSettings(
        variant=config.model,
        kwargs=types.MappingProxyType(kwargs),
        weights=model_builder.weights_arg(config.weights),
        # Only fine-tuning has --new_head: a pre-training run's --weights keep the head they have.
        new_head="new_head" in config and bool(config.new_head),
        sigmoid_head=field_value(config, "loss") == "sigmoid",
    )


@dataclasses.dataclass(frozen=True)
class DataSettings:
    """Where a run's dataset comes from (trainers/data's get_spec)."""

    dataset: str  # --dataset: a registry name, or NAME:CLASSES
    data_dir: object  # --data_dir; None: TFDS's default
    manual_dir: object  # --manual_dir; None: TFDS's default


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """When the controller acts: the steps of a run and the intervals of its actions."""

    total_steps: int
    steps_per_loop: int  # steps per call of the compiled loop, at most
    eval_every: int  # steps between evaluations (0: at the end only)
    checkpoint_every: int  # steps between checkpoints (0: at the end only)
    keep_checkpoints: int  # checkpoints kept in WORKDIR/checkpoints


@dataclasses.dataclass(frozen=True)
class OutputSettings:
    """What a run writes, and where."""

    workdir: str
    config_json: str  # WORKDIR/config.json's text: the whole config, as a rerun checks it
    hparams: types.MappingProxyType  # TensorBoard's hyperparameters: the config's scalar fields


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
    """The few-shot command's probes: FewShotEvaluator's arguments (trainers/evaluators/fewshot.py)."""

    image_size: int  # the features' input size (the images are resized to it)
    batch_size: int  # the global batch of the feature extraction
    shots: object  # --shots, as FewShotEvaluator parses it
    seeds: int  # draws of each k-shot set
    l2_reg: object  # --l2_reg: a number, or "sweep"
    train_split: str  # where the k-shot sets are drawn from
    test_split: str  # what the probes are scored on


def probe_settings(config):
    """The ProbeSettings of a few-shot config."""
    return same_named(ProbeSettings, config)


def data_settings(config):
    """The DataSettings of a config of any trainer."""
    return DataSettings(
        dataset=config.dataset, data_dir=config.data_dir or None, manual_dir=config.manual_dir or None
    )


def optimizer_settings(config):
    """The OptimizerSettings of a training config."""
    return same_named(optimizers.OptimizerSettings, config)


def loop_settings(config):
    """The LoopSettings of a training config."""
    return same_named(LoopSettings, config)


def output_settings(config):
    """The OutputSettings of a config of any trainer."""
    hparams = {k: v for k, v in config.items() if isinstance(v, (bool, int, float, str))}
    return OutputSettings(
        workdir=config.workdir,
        config_json=config_to_json(config),
        hparams=types.MappingProxyType(hparams),
    )


def memory_settings(config):
    """The MemorySettings of a training config."""
    return same_named(memory.MemorySettings, config, variant=config.model)


def banner_settings(config):
    """The BannerSettings of a training config."""
    return same_named(banner.BannerSettings, config, weights=model_builder.weights_arg(config.weights))


def eval_entries(config):
    """{name: registry.Entry} of a training config: its `evals`, or the evaluation flags' evaluators,
    every key that stands for a flag filled in with that flag's value."""
    return from_config.resolve(config.evals, config.fewshot_datasets, lambda flag: config[flag])
