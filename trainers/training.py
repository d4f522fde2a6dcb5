"""One training run from a resolved config, told in order: validate the config, choose the engine
and its distribution, resolve the plan, build the run from the plan, then run it.

Shared by trainers.finetune and trainers.pretrain. The order matters for the error contract:
everything that can be wrong with the input (config, strategy, dataset, model, weights,
evaluators) is checked before the first byte is written to the workdir.

Workdir layout: config.json, results.json, model.npz (official layout), checkpoints/,
train/ and eval/ (TensorBoard event files).
"""

import functools

import tensorflow as tf

from trainers import engines, faults, peer_watch, preemption, run_checkpoints, run_parts, validation
from trainers import plan as plan_lib
from trainers.errors import TrainerError
from trainers.run_parts import build_trainer  # noqa: F401 (public: benchmarks/ time this Trainer)


def run(config, weights_params=None):
    """Trains per `config`; returns the results dict (also written to WORKDIR/results.json).
    `weights_params`: the --weights file's parameters where the command line read them
    (trainers/flags.py parse_command); None: the model builder reads the file.

    If SIGTERM or Ctrl-C arrives (on any worker, at any moment from here on), the run stops at its
    next safe point with what the rerun needs saved, and the returned dict has "preempted": True
    (trainers/preemption.py).
    """
    with preemption.watching(reads=True):
        return _run(config, weights_params)


def _run(config, weights_params):
    if hasattr(config, "copy_and_resolve_references"):
        config = config.copy_and_resolve_references()
    validation.validate_training(config)
    engine = engines.check(config, training=True)
    strategy = engines.strategy_of(config)
    # From here on the run reads the plan's parsed and decided values (trainers/plan.py).
    plan = plan_lib.resolve(config, strategy, weights_params)
    # The dataset, the Trainer and the evaluators: the last of the checks (trainers/run_parts.py).
    built = run_parts.build(plan, strategy)
    validation.check_rerun(config)
    # Several processes watch each other from here on (trainers/peer_watch.py).
    peers = peer_watch.watch(
        engine.processes(strategy),
        functools.partial(run_checkpoints.newest_checkpoint, plan.output.workdir),
    )
    try:
        results = _run_and_report_faults(built)
    except BaseException as error:
        _end_watch(peers, error)
        raise
    if peers is not None:
        peers.finished()
    return results


def _run_and_report_faults(built):
    # Validation is over: from here on the workdir is written.
    try:
        return built.run()
    except (OSError, tf.errors.OpError) as error:
        # A damaged data file or a write the disk refused: one line (trainers/faults.py).
        fault = faults.as_trainer_error(error, workdir=built.plan.output.workdir, spec=built.spec)
        if fault is None:
            raise
        raise fault from None


def _end_watch(peers, error):
    """How this process's end reads to the others: a Ctrl-C stopped them all together, after the
    shared save (a goodbye); an error with its own line ends it alone (they report it lost); any
    other error may be the engine's word for a lost process, which the watch then reports."""
    if peers is None:
        return
    if isinstance(error, KeyboardInterrupt):
        peers.finished()
    elif isinstance(error, TrainerError):
        peers.failed()
    else:
        peers.wait_for_loss()
