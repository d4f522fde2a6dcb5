"""A training run's config resolved once, right after validation, into the values it runs on.

The flags and a Python config say things in text ("auto", "minival=train[90%:],test=test",
"decode|resize(224)|mixup(0.5)"); the run needs them parsed, checked against the hardware and
decided ("auto" precision and XLA for this device). `resolve` does all of that in one place, so
each is parsed once, and a bad value is one `UsageError` line before anything is built or
written. The parts of a run are handed the Plan's fields, not the ConfigDict: the model builder,
the memory estimate, the banner and the evaluators each take a piece of it
(trainers/plan_pieces.py), and none of them reads the config.
"""

import dataclasses
import types

from trainers import (
    banner,
    engines,
    features,
    memory,
    model_builder,
    objectives,
    optimizers,
    plan_pieces,
    precision,
)
from trainers.data import pp
from trainers.errors import UsageError
from trainers.flags import parse_accum_steps, parse_eval_splits


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run is made of, parsed and decided: made by `resolve`, read-only afterwards."""

    replicas: int  # devices in sync, over every process
    batch_size: int  # the global batch of one update
    accum_steps: object  # micro-batches per update: an int, or "auto" (decided with the model: memory.py)
    seed: int
    train_split: str
    examples_per_class: object  # the training split's subset (None: every example)
    eval_splits: types.MappingProxyType  # name -> split of the classification evaluation, in order
    train_ops: tuple  # ((op name, kwargs), ...): the image ops of training (trainers/data/pp.py)
    batch_ops: tuple  # the batch ops of training (Mixup, masked patch prediction's draw)
    eval_ops: tuple  # the image ops of evaluation
    jit: bool  # XLA for the step
    jit_note: str  # the banner's reason for an "auto" XLA choice ("" for an explicit one)
    precision: str  # "none", "bfloat16" or "float16": "auto" decided for this device
    precision_note: str  # the banner's reason for that precision
    params: object  # the --weights file's parameters the command line read; None: the builder reads it
    objective: str  # what the run optimises (trainers/objectives.py OBJECTIVES)
    masked_target: str  # masked patch prediction's target (keras_vit.masked_patches.TARGETS)
    loss: str  # classification's loss: "softmax" or "sigmoid" (trainers/numerics.py)

    # The pieces the parts of a run are handed in place of the config (trainers/plan_pieces.py).
    data: plan_pieces.DataSettings  # the dataset and where it is
    model: model_builder.ModelSettings  # variant, create_model arguments, weights, head
    optimizer: optimizers.OptimizerSettings  # the optimizer, its schedule and the clipping
    loop: plan_pieces.LoopSettings  # the steps, and when to evaluate and save
    output: plan_pieces.OutputSettings  # the workdir and what is recorded in it
    memory: memory.MemorySettings  # what sizes the step against the device's memory
    banner: banner.BannerSettings  # the config's values the start banner shows
    evals: types.MappingProxyType  # name -> evaluators.registry.Entry, the flags' values filled in

    @property
    def mixes(self):
        """Whether training mixes pairs of examples (Mixup), which needs an even per-replica batch."""
        return _mixes(self.batch_ops)


def resolve(config, strategy, weights_params=None):
    """The Plan of a validated training `config` under `strategy`. `weights_params`: the --weights
    file's parameters where the command line read them (trainers/flags.py parse_command)."""
    accum_steps = parse_accum_steps(config.accum_steps)
    eval_splits = parse_eval_splits(config.eval_splits)
    if not eval_splits:
        raise UsageError("--eval_splits is empty; give at least one name=split pair.")
    model = plan_pieces.model_settings(config)
    objective = plan_pieces.field_value(config, "objective")  # fine-tuning configs classify
    train_ops, batch_ops = pp.train_pipeline(config)
    batch_ops = _with_masked_patch_draw(config, batch_ops, objective, model.patch_size)
    eval_ops = pp.eval_pipeline(config)
    pp.check(train_ops, batch_ops, eval_ops)  # a bad op argument is one line here
    replicas = strategy.num_replicas_in_sync
    check_batch(config.batch_size, replicas, accum_steps, mixes=_mixes(batch_ops))
    hidden_size, num_patches = model_builder.encoder_size(model)
    step = precision.resolve_step(
        config.mixed_precision,
        config.jit_compile,
        strategy,
        engine=engines.of(strategy).name,
        hidden_size=hidden_size,
        num_patches=num_patches,
    )
    return Plan(
        replicas=replicas,
        batch_size=config.batch_size,
        accum_steps=accum_steps,
        seed=config.seed,
        train_split=config.train_split,
        examples_per_class=config.examples_per_class or None,
        eval_splits=types.MappingProxyType(eval_splits),
        train_ops=tuple(train_ops),
        batch_ops=tuple(batch_ops),
        eval_ops=tuple(eval_ops),
        jit=step.jit,
        jit_note=step.jit_note,
        precision=step.precision,
        precision_note=step.precision_note,
        params=weights_params if model.weights else None,
        objective=objective,
        masked_target=plan_pieces.field_value(config, "masked_target"),
        loss=config.loss,
        data=plan_pieces.data_settings(config),
        model=model,
        optimizer=plan_pieces.optimizer_settings(config),
        loop=plan_pieces.loop_settings(config),
        output=plan_pieces.output_settings(config),
        memory=plan_pieces.memory_settings(config),
        banner=plan_pieces.banner_settings(config),
        evals=plan_pieces.eval_entries(config),
    )


@dataclasses.dataclass(frozen=True)
class ProbePlan:
    """What `python -m trainers.fewshot` runs on: an evaluate-only plan, made by `resolve_probes`."""

    seed: int
    data: plan_pieces.DataSettings  # the probed dataset and where it is
    model: object  # model_builder.ModelSettings of the frozen model; None: raw pixels (--model=pixels)
    pre_logits_from_weights: bool  # the weights file decides the pre-logits layer (not --pre_logits)
    params: object  # the --weights file's parameters the command line read; None: the builder reads it
    probes: plan_pieces.ProbeSettings
    output: plan_pieces.OutputSettings
    record: types.MappingProxyType  # what results.json says was probed: dataset, model, weights


def resolve_probes(config, strategy, weights_params=None):
    """The ProbePlan of a validated few-shot `config` under `strategy`."""
    replicas = strategy.num_replicas_in_sync
    if config.batch_size % replicas:
        raise UsageError(f"--batch_size {config.batch_size} is not divisible by {replicas} replicas.")
    model = None if config.model == features.PIXELS else plan_pieces.model_settings(config)
    return ProbePlan(
        seed=config.seed,
        data=plan_pieces.data_settings(config),
        model=model,
        pre_logits_from_weights=not config.pre_logits,
        params=weights_params if model is not None and model.weights else None,
        probes=plan_pieces.probe_settings(config),
        output=plan_pieces.output_settings(config),
        record=types.MappingProxyType(
            {"dataset": config.dataset, "model": config.model, "weights": config.weights}
        ),
    )


def _with_masked_patch_draw(config, batch_ops, objective, patch):
    """The batch ops, with masked patch prediction's draw where the objective reads it: the flags'
    pipeline gets it last, at the model's patch size; a --pp_train string names it itself."""
    draw = objectives.DRAW_OP
    masked = objective == "masked_patch"
    named = [kwargs["patch_size"] for name, kwargs in batch_ops if name == draw]
    if not masked:
        if named:
            raise UsageError(
                f"--pp_train: {draw} draws the corruption of masked patch prediction: drop it, or "
                "pre-train with --objective=masked_patch"
            )
        return batch_ops
    if not config.pp_train:
        return [*batch_ops, (draw, {"patch_size": patch})]
    if not named:
        raise UsageError(
            f"--objective=masked_patch corrupts the patches each batch's draw chooses: end --pp_train "
            f"with {draw}({patch})"
        )
    if any(size != patch for size in named):
        raise UsageError(
            f"--pp_train: {draw}({named[0]}) draws for {named[0]} px patches, but the model's are "
            f"{patch} px: use {draw}({patch})"
        )
    return batch_ops


def _mixes(batch_ops):
    return any(name == "mixup" for name, _ in batch_ops)


def check_batch(batch_size, replicas, accum_steps, mixes):
    """The global batch splits evenly into replicas x micro-batches (and into pairs, for Mixup)."""
    accum = 1 if accum_steps == "auto" else accum_steps  # auto picks a divisor of the per-replica batch
    if batch_size % accum:
        raise UsageError(
            f"--batch_size {batch_size} is not divisible by --accum_steps {accum}; use a multiple of "
            f"{accum}, or --accum_steps=auto."
        )
    if batch_size % (replicas * accum):
        raise UsageError(
            f"--batch_size {batch_size} is not divisible by {replicas} replicas x --accum_steps "
            f"{accum}; use a multiple of {replicas * accum}."
        )
    if mixes and (batch_size // replicas) % 2:
        raise UsageError(
            f"Mixup mixes pairs of examples: --batch_size {batch_size} must be a multiple of "
            f"2 x {replicas} replicas."
        )
