"""The lines a training run prints before its first step: what is about to run, and where.

A person starting a week-long run wants to see, before it starts, that it is the model, data,
hardware, batch and schedule they meant; a log read later wants the same facts at its top.
"""

import dataclasses

from keras_vit import variants
from trainers import engines, memory


@dataclasses.dataclass(frozen=True)
class BannerSettings:
    """The config's values the banner shows (resolved once: trainers/plan_pieces.py)."""

    image_size: int
    weights: object  # --weights; None: random initialisation
    train_split: str
    batch_size: int  # the global batch of one update
    total_steps: int
    warmup_steps: int
    optimizer: str
    base_lr: object
    eval_every: int
    checkpoint_every: int
    workdir: str
    cpu_threads: int  # 0: TensorFlow's own choice


def _count(n):
    return f"{n:,}"


def _millions(n):
    return f"{n / 1e6:.1f}M" if n >= 1e6 else _count(n)


def _every(what, steps):
    """ "eval every 100", or "eval at the end" for 0 (no periodic one, only the final)."""
    return f"{what} every {steps}" if steps else f"{what} at the end"


def _split_sizes(spec, splits):
    parts = []
    for name, split in splits.items():
        try:
            count = _count(spec.num_examples[split])
        except (KeyError, ValueError):
            count = "?"
        parts.append(f"{name} {count} ({split})")
    return ", ".join(parts)


def _threads(threads, engine):
    """A run that sets --cpu_threads asks for the same rounding on any CPU: whether the
    process's CPU kernels are pinned too (trainers/reproducible.py) belongs beside it, and what
    the count sets under the engine (the jax engine's XLA runs the step on its own threads)."""
    if not threads:
        return ""
    return f"; {threads} CPU threads{engine.cpu_threads_scope}, kernels {engine.kernels()}"


def lines(
    *,
    settings,
    spec,
    strategy,
    model,
    eval_splits,
    accum_steps,
    memory_note,
    precision_note,
    jit,
    start_step,
    jit_note="",
):
    """The banner as a list of lines (printed by the chief only); `settings`: BannerSettings."""
    engine = engines.of(strategy)
    tokens = memory.sequence_length(model, settings.image_size)
    weights = settings.weights or "random initialisation"
    replicas = strategy.num_replicas_in_sync
    per_replica = settings.batch_size // replicas
    micro = per_replica // accum_steps
    try:
        train_count = _count(spec.num_examples[settings.train_split])
    except (KeyError, ValueError):
        train_count = "?"
    batch = f"{settings.batch_size} global = {replicas} replica(s) x {per_replica}"
    if accum_steps > 1:
        batch += f" = {accum_steps} micro-batches of {micro} (gradients summed)"
    start = f"from step {start_step}" if start_step else "from the start"
    return [
        f"model:    {variants.describe(model)} ({_millions(model.count_params())} parameters), "
        f"{settings.image_size} px, {tokens} tokens, weights: {weights}",
        f"data:     {spec.name}, {spec.num_classes} classes; train {train_count} ({settings.train_split}); "
        f"eval {_split_sizes(spec, eval_splits) if eval_splits else 'none (no classification evaluator)'}",
        f"hardware: {engine.name} engine, {engine.describe(strategy)}; "
        f"XLA {'on' if jit else 'off'}{f' ({jit_note})' if jit_note else ''}; "
        f"precision {precision_note}{_threads(settings.cpu_threads, engine)}",
        f"batch:    {batch}; {memory_note}",
        f"steps:    {settings.total_steps} ({settings.warmup_steps} warm-up, {settings.optimizer}, base_lr "
        f"{settings.base_lr}), {start}; {_every('eval', settings.eval_every)}, "
        f"{_every('checkpoint', settings.checkpoint_every)}",
        f"workdir:  {settings.workdir}",
    ]
