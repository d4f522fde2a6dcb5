"""The lines a training run prints before its first step: what is about to run, and where.

A person starting a week-long run wants to see, before it starts, that it is the model, data,
hardware, batch and schedule they meant; a log read later wants the same facts at its top.
"""

from configs.fields import FIELDS
from keras_vit import variants
from trainers import distribute, engines, memory, reproducible


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


def _threads(config, engine):
    """A run that sets --cpu_threads asks for the same rounding on any CPU: whether the
    process's CPU kernels are pinned too (trainers/reproducible.py) belongs beside it. Under the
    jax engine the count is tf.data's only: XLA runs the step on its own threads."""
    threads = config.get("cpu_threads", FIELDS["cpu_threads"].default)
    if not threads:
        return ""
    whose = " for tf.data" if engine == "jax" else ""
    return f"; {threads} CPU threads{whose}, kernels {reproducible.describe(engine)}"


def lines(
    *, config, spec, strategy, model, eval_splits, accum_steps, memory_note, precision_note, jit, start_step
):
    """The banner as a list of lines (printed by the chief only)."""
    tokens = memory.sequence_length(model, config.image_size)
    weights = config.weights if config.weights.lower() not in ("", "none") else "random initialisation"
    replicas = strategy.num_replicas_in_sync
    per_replica = config.batch_size // replicas
    micro = per_replica // accum_steps
    try:
        train_count = _count(spec.num_examples[config.train_split])
    except (KeyError, ValueError):
        train_count = "?"
    batch = f"{config.batch_size} global = {replicas} replica(s) x {per_replica}"
    if accum_steps > 1:
        batch += f" = {accum_steps} micro-batches of {micro} (gradients summed)"
    start = f"from step {start_step}" if start_step else "from the start"
    return [
        f"model:    {variants.describe(model)} ({_millions(model.count_params())} parameters), "
        f"{config.image_size} px, {tokens} tokens, weights: {weights}",
        f"data:     {spec.name}, {spec.num_classes} classes; train {train_count} ({config.train_split}); "
        f"eval {_split_sizes(spec, eval_splits) if eval_splits else 'none (no classification evaluator)'}",
        f"hardware: {engines.name(strategy)} engine, {distribute.describe(strategy)}; "
        f"XLA {'on' if jit else 'off'}; "
        f"precision {precision_note}{_threads(config, engines.name(strategy))}",
        f"batch:    {batch}; {memory_note}",
        f"steps:    {config.total_steps} ({config.warmup_steps} warm-up, {config.optimizer}, base_lr "
        f"{config.base_lr}), {start}; {_every('eval', config.eval_every)}, "
        f"{_every('checkpoint', config.checkpoint_every)}",
        f"workdir:  {config.workdir}",
    ]
