"""One training run from a resolved config: validate, build, resume, train, evaluate, export.

Shared by trainers.finetune and trainers.pretrain. The order matters for the error contract:
everything that can be wrong with the input (config, strategy, dataset, model, weights,
evaluators) is checked before the first byte is written to the workdir.

Workdir layout: config.json, results.json, model.npz (official layout), checkpoints/,
train/ and eval/ (TensorBoard event files).
"""

import collections
import functools
import time

import keras
import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api

from keras_vit import fileio
from trainers import (
    actions,
    banner,
    data,
    distribute,
    engines,
    faults,
    image_summaries,
    memory,
    model_builder,
    optimizers,
    precision,
)
from trainers.console import Console
from trainers.controller import Controller
from trainers.data import pp
from trainers.errors import UsageError
from trainers.evaluators import classification as classification_lib
from trainers.evaluators import from_config
from trainers.flags import config_to_json, parse_eval_splits
from trainers.run_checkpoints import RunCheckpoints
from trainers.validation import check_replicas, check_rerun, validate_training


def run(config):
    """Trains per `config`; returns the results dict (also written to WORKDIR/results.json).

    If SIGTERM arrives (on any worker), a checkpoint is saved and the returned dict has
    "preempted": True (trainers/preemption.py).
    """
    if hasattr(config, "copy_and_resolve_references"):
        config = config.copy_and_resolve_references()
    validate_training(config)
    engines.check(config)
    strategy = engines.strategy_of(config)
    check_replicas(config, strategy.num_replicas_in_sync)
    spec = data.get_spec(
        config.dataset, data_dir=config.data_dir or None, manual_dir=config.manual_dir or None
    )
    _check_labels(config, spec)
    built = build_trainer(config, strategy, spec)
    trainer = built.trainer
    # The evaluators of --evals, or of the evaluation flags (trainers/evaluators/from_config.py).
    eval_input = functools.partial(
        _input_fn, config, spec, training=False, batch_size=trainer.micro_batch_size
    )
    evaluators = from_config.build(config, from_config.Context(config, strategy, spec, trainer, eval_input))
    classification = classification_lib.combined(evaluators, trainer)
    check_rerun(config)
    # Validation is over: from here on the workdir is written.
    try:
        return _Run(config, strategy, spec, built, classification, evaluators).train()
    except (OSError, tf.errors.OpError) as error:
        # A damaged data file or a write the disk refused: one line (trainers/faults.py).
        fault = faults.as_trainer_error(error, workdir=config.workdir, spec=spec)
        if fault is None:
            raise
        raise fault from None


def _check_labels(config, spec):
    """A multi-label dataset needs the sigmoid loss and all of its examples."""
    if not spec.multi_label or config.get("objective", "classification") != "classification":
        return  # masked patch prediction does not read the labels
    if config.loss != "sigmoid":
        raise UsageError(
            f"{spec.name} has images with several labels: train it with --loss=sigmoid "
            f"(softmax cross-entropy takes one label per image)."
        )
    if config.examples_per_class:
        raise UsageError(
            data.multi_label_refusal(spec, "--examples_per_class", "leave it at 0 (train on every example)")
        )


BuiltTrainer = collections.namedtuple("BuiltTrainer", "trainer schedule memory_note precision_note")


def build_trainer(config, strategy, spec):
    """BuiltTrainer for `config` under `strategy`: the engine's Trainer with the model,
    objective, optimizer, accumulation, precision and XLA choice a run uses (benchmarks.train
    times this same trainer), its learning-rate schedule, and the banner's notes on memory and
    precision. `spec` needs only `num_classes`."""
    keras.utils.set_random_seed(config.seed)
    jit = use_jit(config.jit_compile, strategy)
    mixed_precision, precision_note = resolve_precision(config, strategy)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision.POLICIES[mixed_precision])
    try:
        with strategy.scope():
            model = model_builder.build_model(config, spec.num_classes)
            objective = _objective(config, model)
            schedule = optimizers.WarmupDecay(
                config.base_lr, config.total_steps, config.warmup_steps, config.decay_type
            )
            optimizer = optimizers.make_optimizer(
                config.optimizer,
                schedule,
                momentum_dtype=config.momentum_dtype,
                weight_decay=config.weight_decay,
                loss_scaling=mixed_precision == "float16",
            )
            accum_steps, memory_note = memory.resolve_accum_steps(config, strategy, model)
            trainer = engines.trainer_class(strategy)(
                strategy=strategy,
                model=model,
                optimizer=optimizer,
                global_batch_size=config.batch_size,
                accum_steps=accum_steps,
                grad_norm_clip=config.grad_norm_clip,
                jit_compile=jit,
                loss=config.loss,
                objective=objective,
            )
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
    return BuiltTrainer(trainer, schedule, memory_note, precision_note)


def _objective(config, model):
    """The objective --objective asks for (None: classification); a model it cannot train is a UsageError."""
    try:
        return engines.make_objective(config, model)
    except ValueError as e:
        raise UsageError(f"--objective={config.objective}: {e}") from None


def _input_fn(config, spec, split, training, start_step=0, batch_size=None):
    """`batch_size`: evaluation's global batch (default --batch_size); the micro-batches of an
    accumulating run, whose full batch would not fit."""
    # The ops come from the config in one place (trainers/data/pp.py: --pp_train / --pp_eval, or the flags).
    ops, batch_ops = pp.train_pipeline(config) if training else (pp.eval_pipeline(config), [])
    return data.make_input_fn(
        spec,
        split,
        ops=ops,
        global_batch_size=batch_size or config.batch_size,
        training=training,
        seed=config.seed,
        start_step=start_step,
        # only the training split is subsampled; evaluation sees the whole split
        examples_per_class=(config.examples_per_class or None) if training else None,
        # Batch ops (Mixup) mix training batches only; evaluation keeps hard labels.
        batch_ops=batch_ops,
    )


def use_jit(setting, strategy):
    """XLA for the per-replica step. "auto": on GPUs only. TPUStrategy compiles the whole step
    with XLA anyway. On CPU, "true" works for any number of replicas (loop.Trainer), but the
    step measured slower under XLA than without (README, "Mixed precision and backends"), so
    "auto" leaves it off there."""
    if engines.is_jax(strategy):
        return True  # the jax engine always compiles its step
    if setting != "auto":
        return setting == "true"
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return False
    return distribute.all_gpus(distribute.worker_devices(strategy))


def resolve_precision(config, strategy):
    """(precision, the banner's note) for this run's --mixed_precision under `strategy`
    (trainers/precision.py: what "auto" picks, from the device, XLA and the encoder's size)."""
    hidden_size, num_patches = model_builder.encoder_size(config)
    return precision.resolve(
        config.mixed_precision,
        strategy,
        jit=use_jit(config.jit_compile, strategy),
        hidden_size=hidden_size,
        num_patches=num_patches,
    )


class _Run:
    """The workdir side of a run: resume, the controller's actions, the final evaluation and export."""

    def __init__(self, config, strategy, spec, built, classification, evaluators):
        self.config, self.strategy, self.spec = config, strategy, spec
        self.built, self.trainer, self.schedule = built, built.trainer, built.schedule
        self.classification, self.evaluators = classification, evaluators
        self.workdir = config.workdir
        self.chief = distribute.is_chief(strategy)
        self.console = Console(self.chief)

    def train(self):
        config, trainer, strategy = self.config, self.trainer, self.strategy
        start_time = time.time()
        if self.chief:
            fileio.makedirs(self.workdir)
            fileio.write_atomic(fileio.join(self.workdir, "config.json"), config_to_json(config) + "\n")
        task_id = 0 if self.chief else distribute.task_id(strategy)
        checkpoints = RunCheckpoints(
            trainer, self.workdir, chief=self.chief, task_id=task_id, keep=config.keep_checkpoints
        )
        latest = checkpoints.restore()
        step = checkpoints.step
        for line in banner.lines(
            config=config,
            spec=self.spec,
            strategy=strategy,
            model=trainer.model,
            eval_splits=parse_eval_splits(config.eval_splits),
            accum_steps=trainer.accum_steps,
            memory_note=self.built.memory_note,
            precision_note=self.built.precision_note,
            jit=trainer.jit_compile,
            start_step=step,
        ):
            self.console.print(line)
        if latest:
            self.console.print(f"Resumed from {latest} at step {step}.")
        self.summaries = actions.Summaries(self.workdir, self.chief)
        if step == 0:
            self._log_start()
        evaluations = [
            actions.Evaluate(e, trainer.model, self.summaries, strategy, self.console)
            for e in self.evaluators
        ]
        evaluations = [image_summaries.FewShotPlot(e, self.summaries.eval) for e in evaluations]
        if self.chief:
            evaluations.append(self._pictures())
        controller = Controller(
            trainer=trainer,
            strategy=strategy,
            total_steps=config.total_steps,
            steps_per_loop=config.steps_per_loop,
            log=actions.LogTraining(
                self.summaries,
                self.schedule,
                total_steps=config.total_steps,
                batch_size=config.batch_size,
                replicas=strategy.num_replicas_in_sync,
                console=self.console,
            ),
            actions=[actions.SaveCheckpoint(checkpoints, config.checkpoint_every), *evaluations],
            checkpoints=checkpoints,
        )
        train_input = _input_fn(config, self.spec, config.train_split, training=True, start_step=step)
        step, preempted = controller.train(iter(data.distribute(strategy, train_input)), step)
        if preempted:
            return {"preempted": True, "steps": step}
        checkpoints.save_if_new()
        tags = {}
        for evaluation in evaluations:
            tags.update(evaluation(step))
        return self._finish(step, tags, time.time() - start_time)

    def _finish(self, step, tags, seconds):
        config = self.config
        metrics = self.classification.by_split(tags)
        metrics = {name: {**m, "examples": int(m["examples"])} for name, m in metrics.items()}
        results = {
            "dataset": config.dataset,
            "model": config.model,
            "steps": step,
            "train_loss": float(self.trainer.last_loss.numpy()),
            "eval": metrics,
            "skipped_images": int(getattr(self.spec, "skipped", 0) or 0),
            "wall_time_s": round(seconds, 2),
            "replicas": self.strategy.num_replicas_in_sync,
        }
        results.update({tag: value for tag, value in tags.items() if tag.partition("/")[0] not in metrics})
        metric = self.trainer.metric_name
        for name, m in metrics.items():
            self.console.print(
                f"final {name}: {metric} {m[metric]:.4f}  loss {m['loss']:.4f}  ({m['examples']} images)"
            )
        actions.Export(self.trainer.model, self.workdir, self.chief, self.spec.class_names)(results)
        self.summaries.flush()
        return results

    def _first_eval_split(self):
        """(name, this process's evaluation dataset) of the first --eval_splits entry."""
        name, split = next(iter(parse_eval_splits(self.config.eval_splits).items()))
        batch = self.trainer.micro_batch_size
        input_fn = _input_fn(self.config, self.spec, split, training=False, batch_size=batch)
        return name, input_fn(tf.distribute.InputContext())

    def _pictures(self):
        """Attention pictures at each evaluation, of the first eval split's first images."""
        name, dataset = self._first_eval_split()
        writer, every = self.summaries.eval, self.config.eval_every
        return image_summaries.Pictures.from_dataset(
            dataset, self.trainer.model, writer, self.spec.class_names, every, name
        )

    def _log_start(self):
        """Hyperparameters and a few (evaluation-pipeline) input images, once per workdir."""
        if not self.chief:
            return
        hparams = {k: v for k, v in self.config.items() if isinstance(v, (bool, int, float, str))}
        with self.summaries.train.as_default(step=0):
            hparams_api.hparams(hparams)
        name, dataset = self._first_eval_split()
        images = next(iter(dataset))[0][:4]
        with self.summaries.eval.as_default(step=0):
            tf.summary.image(f"{name}/input_images", (tf.cast(images, tf.float32) + 1.0) / 2.0, max_outputs=4)
