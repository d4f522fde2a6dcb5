"""The paper's fine-tuning protocol: choose the learning rate on minival, retrain on train + minival.

Dosovitskiy et al. 2021, appendix B.1.1: one fine-tune per rate of a small grid (Table 4: 0.001,
0.003, 0.01, 0.03) on the training split minus a held-out `minival` split; the rate with the best
minival accuracy (ties: the smaller rate); then one fine-tune with it on the whole training split
(train + minival), reported on the test split. `trainers.finetune` runs this for --base_lr=sweep.

WORKDIR layout: lr_<rate>/ per rate and final/ (each an ordinary fine-tuning workdir),
results.json (the summary), sweep/ (TensorBoard: a run per rate with its base_lr as a
hyperparameter and its minival accuracy, and the choice). A re-run reuses every sub-run that
has its results.json and resumes the others from their checkpoints.
"""

import json
import math
import os

import tensorflow as tf
from tensorboard.plugins.hparams import api as hp

from keras_vit import fileio
from trainers import distribute, engines, numerics, training, workdir_owner
from trainers import results as results_lib
from trainers.errors import TrainingError, UsageError
from trainers.flags import parse_eval_splits
from trainers.validation import RERUN_FREE_FIELDS, check_workdir_path, config_changes

MINIVAL = "minival"
FINAL = "final"
# Where and how a sub-run executes, not what it computes: these may differ when a sweep is re-run
# (e.g. resumed on other hardware) without making its finished sub-runs stale. Unlike a plain
# re-run, a finished sub-run with another --total_steps is another experiment.
EXECUTION_FIELDS = RERUN_FREE_FIELDS - {"total_steps"}


def parse_sweep_lrs(text):
    """'0.001,0.003' -> [0.001, 0.003]: positive, distinct, sorted."""
    rates = []
    for item in filter(None, (p.strip() for p in str(text).split(","))):
        try:
            rate = float(item)
        except ValueError:
            raise UsageError(
                f"--sweep_lrs entry {item!r} is not a number; give rates like 0.001,0.003,0.01,0.03."
            ) from None
        if not 0 < rate < math.inf:
            raise UsageError(f"--sweep_lrs entries must be positive numbers, got {item}.")
        if rate in rates:
            raise UsageError(f"--sweep_lrs lists {item} twice.")
        rates.append(rate)
    if not rates:
        raise UsageError("--sweep_lrs is empty; give the rates to try, e.g. 0.001,0.003,0.01,0.03.")
    return sorted(rates)


def choose_rate(minival_accuracy):
    """{rate: accuracy or None (diverged)} -> the best rate; ties go to the smaller rate."""
    scored = {rate: acc for rate, acc in minival_accuracy.items() if acc is not None}
    if not scored:
        raise TrainingError("the loss diverged at every rate of --sweep_lrs; try smaller rates.")
    return min(scored, key=lambda rate: (-scored[rate], rate))


def with_changes(config, **changes):
    """A copy of `config` with `changes`, locked as `config` is: a misspelt field stays an error
    (base_lr may go from "sweep" to a float)."""
    changed = config.copy_and_resolve_references()
    with changed.ignore_type():
        for name, value in changes.items():
            changed[name] = value
    return changed


def run(config, weights_params=None):
    """The sweep per `config` (base_lr "sweep"); returns the summary, also in WORKDIR/results.json.

    If a sub-run is stopped by SIGTERM, returns {"preempted": True, ...} and writes no summary.
    `weights_params`: the --weights file's parameters where the command line read them (every
    sub-run starts from them).
    """
    rates = parse_sweep_lrs(config.sweep_lrs)
    splits = parse_eval_splits(config.eval_splits)
    if MINIVAL not in splits:
        raise UsageError(
            f"--base_lr=sweep chooses the rate on a '{MINIVAL}' split, and --eval_splits has none: hold part "
            f"of the training data out, e.g. --train_split=train[:80%] "
            f"--eval_splits={MINIVAL}=train[80%:],{config.eval_splits}."
        )
    reported = {name: split for name, split in splits.items() if name != MINIVAL}
    if not reported:
        raise UsageError(
            f"--base_lr=sweep retrains on train + {MINIVAL} and reports the other --eval_splits, and there "
            f"are none: add one, e.g. --eval_splits={config.eval_splits},test=test."
        )
    workdir = config.workdir
    if not workdir:
        raise UsageError("--workdir is required (where the sweep's runs and results go).")
    check_workdir_path(workdir)
    workdir_owner.check_summary_workdir(workdir)

    # Under --loss=sigmoid the runs report precision@1, which then decides (and is reported) instead.
    metric = numerics.METRIC_NAMES[config.loss]
    minival_accuracy, workdirs = {}, {}
    for rate in rates:
        sub = with_changes(config, base_lr=rate, workdir=fileio.join(workdir, f"lr_{rate!r}"))
        workdirs[repr(rate)] = sub.workdir
        try:
            results = _run_or_reuse(sub, f"base_lr {rate!r}", weights_params)
        except TrainingError as e:
            print(f"sweep: base_lr {rate!r} diverged, left out of the choice: {e}", flush=True)
            minival_accuracy[rate] = None
            continue
        if results.get("preempted"):
            return _preempted(sub)
        minival_accuracy[rate] = results["eval"][MINIVAL][metric]
    chosen = choose_rate(minival_accuracy)

    final = with_changes(
        config,
        base_lr=chosen,
        workdir=fileio.join(workdir, FINAL),
        train_split=f"{config.train_split}+{splits[MINIVAL]}",
        eval_splits=",".join(f"{name}={split}" for name, split in reported.items()),
    )
    workdirs[FINAL] = final.workdir
    results = _run_or_reuse(final, f"final (base_lr {chosen!r})", weights_params)
    if results.get("preempted"):
        return _preempted(final)
    test_split = "test" if "test" in reported else next(iter(reported))
    summary = {
        "dataset": config.dataset,
        "model": config.model,
        "sweep_lrs": rates,
        "minival_accuracy": {repr(rate): acc for rate, acc in minival_accuracy.items()},
        "chosen_lr": chosen,
        "final_train_split": final.train_split,
        "final_eval": results["eval"],
        "test_split": test_split,
        "metric": metric,
        "test_accuracy": results["eval"][test_split][metric],
        "workdirs": workdirs,
    }
    _print_summary(summary)
    if _is_chief(config):
        _save_summary(workdir, summary)
    return summary


def _run_or_reuse(config, label, weights_params):
    """A sub-run's results: read back if it finished before, else trained (resumed if begun)."""
    _check_same_settings(config)
    finished = results_lib.read(config.workdir)
    if finished is not None:
        print(f"sweep: {label}: reusing the finished run in {config.workdir}", flush=True)
        return finished
    print(f"sweep: {label}: fine-tuning in {config.workdir}", flush=True)
    return training.run(config, weights_params=weights_params)


def _check_same_settings(config):
    """A sub-folder begun with other settings (another --total_steps, say) must not be reused."""
    path = fileio.join(config.workdir, "config.json")
    if not fileio.exists(path):
        workdir_owner.check_unowned_outputs(config.workdir)  # else its results.json would be reused
        return
    changes = config_changes(config, _read_json(path), free=EXECUTION_FIELDS)
    if changes:
        name, recorded, wanted = changes[0]
        raise UsageError(
            f"{config.workdir} holds a run with --{name}={recorded}, this sweep needs "
            f"--{name}={wanted}: use another --workdir, or delete that folder to redo it."
        )


def _preempted(config):
    print(f"sweep: stopped in {config.workdir}; rerun the same command to go on.", flush=True)
    return {"preempted": True, "workdir": config.workdir}


def _print_summary(summary):
    for rate, acc in summary["minival_accuracy"].items():
        outcome = "diverged" if acc is None else f"minival accuracy {acc:.4f}"
        print(f"sweep: base_lr {rate}  {outcome}  ({summary['workdirs'][rate]})", flush=True)
    print(
        f"sweep: chose base_lr {summary['chosen_lr']!r}; retrained on {summary['final_train_split']}: "
        f"{summary['test_split']} accuracy {summary['test_accuracy']:.4f}  ({summary['workdirs'][FINAL]})",
        flush=True,
    )


def _save_summary(workdir, summary):
    """WORKDIR/results.json (atomically) and, when the summary is new, TensorBoard under WORKDIR/sweep."""
    if results_lib.read(workdir) == summary:
        return  # a re-run of a finished sweep: the logs already hold this summary
    _log_summary(fileio.join(workdir, "sweep"), summary)
    results_lib.write(workdir, summary)


def _log_summary(logdir, summary):
    """One TensorBoard run per rate (its base_lr in the HPARAMS tab against its minival accuracy)
    and the choice: sweep/minival_accuracy, sweep/chosen_lr, sweep/test_accuracy."""
    for rate, acc in summary["minival_accuracy"].items():
        writer = tf.summary.create_file_writer(fileio.join(logdir, f"lr_{rate}"))
        with writer.as_default(step=0):
            hp.hparams({"base_lr": float(rate)}, trial_id=f"lr_{rate}")
            if acc is not None:
                tf.summary.scalar("sweep/minival_accuracy", acc)
        writer.close()
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default(step=0):
        tf.summary.scalar("sweep/chosen_lr", summary["chosen_lr"])
        tf.summary.scalar("sweep/test_accuracy", summary["test_accuracy"])
    writer.close()


def _is_chief(config):
    """The process that writes the summary: every one but process 0's peers under
    --strategy=multi_worker. Process 0 of TF_CONFIG is known without forming the cluster (a
    finished sweep's rerun, which trains nothing, forms none); without TF_CONFIG (the jax engine
    on TPU pods and SLURM, where JAX finds the cluster) the engine says, of the cluster its runs
    joined. The sweep read TF_CONFIG alone before, so there no process wrote the summary."""
    if config.strategy != "multi_worker":
        return True
    raw = os.environ.get("TF_CONFIG")
    if raw:
        cluster, task_type, index = distribute.read_tf_config(raw)
        return distribute.is_process_0(cluster, task_type, index)
    strategy = engines.strategy_of(config)
    return engines.of(strategy).is_chief(strategy)


def _read_json(path):
    with fileio.open(path) as f:
        return json.load(f)
