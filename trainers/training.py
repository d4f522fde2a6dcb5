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

from keras_vit import fileio, initializers
from trainers import (
    actions,
    banner,
    data,
    engines,
    faults,
    image_summaries,
    memory,
    model_builder,
    peer_watch,
    precision,
    preemption,
    run_checkpoints,
)
from trainers import plan as plan_lib
from trainers.console import Console
from trainers.controller import Controller
from trainers.errors import TrainerError, UsageError
from trainers.evaluators import classification as classification_lib
from trainers.evaluators import from_config
from trainers.run_checkpoints import RunCheckpoints
from trainers.validation import check_rerun, validate_training


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
    validate_training(config)
    engines.check(config)
    strategy = engines.strategy_of(config)
    # From here on the run reads the plan's parsed and decided values (trainers/plan.py).
    plan = plan_lib.resolve(config, strategy, weights_params)
    spec = data.get_spec(plan.data.dataset, data_dir=plan.data.data_dir, manual_dir=plan.data.manual_dir)
    _check_labels(plan, spec)
    built = build_trainer(config, strategy, spec, plan)
    # The evaluators of --evals, or of the evaluation flags (trainers/evaluators/from_config.py).
    batch_size = built.trainer.micro_batch_size
    eval_input = functools.partial(_input_fn, plan, spec, training=False, batch_size=batch_size)
    context = from_config.Context(
        strategy=strategy,
        spec=spec,
        trainer=built.trainer,
        eval_input=eval_input,
        eval_splits=plan.eval_splits,
        image_size=plan.model.kwargs["image_size"],
        data_dir=plan.data.data_dir,
        eval_ops=plan.eval_ops,
    )
    evaluators = from_config.build(plan.evals, context)
    check_rerun(config)
    # Several processes watch each other from here on (trainers/peer_watch.py).
    peers = peer_watch.watch(
        engines.of(strategy).processes(strategy),
        functools.partial(run_checkpoints.newest_checkpoint, plan.output.workdir),
    )
    try:
        results = _run_and_report_faults(plan, strategy, spec, built, evaluators)
    except BaseException as error:
        _end_watch(peers, error)
        raise
    if peers is not None:
        peers.finished()
    return results


def _run_and_report_faults(plan, strategy, spec, built, evaluators):
    # Validation is over: from here on the workdir is written.
    try:
        return _Run(plan, strategy, spec, built, evaluators).run()
    except (OSError, tf.errors.OpError) as error:
        # A damaged data file or a write the disk refused: one line (trainers/faults.py).
        fault = faults.as_trainer_error(error, workdir=plan.output.workdir, spec=spec)
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


def _check_labels(plan, spec):
    """A multi-label dataset needs the sigmoid loss and all of its examples."""
    if not spec.multi_label or plan.objective != "classification":
        return  # masked patch prediction does not read the labels
    if plan.loss != "sigmoid":
        raise UsageError(
            f"{spec.name} has images with several labels: train it with --loss=sigmoid "
            f"(softmax cross-entropy takes one label per image)."
        )
    if plan.examples_per_class:
        raise UsageError(
            data.multi_label_refusal(spec, "--examples_per_class", "leave it at 0 (train on every example)")
        )


BuiltTrainer = collections.namedtuple("BuiltTrainer", "trainer schedule memory_note precision_note")


def build_trainer(config, strategy, spec, plan=None):
    """BuiltTrainer for `config` under `strategy`: the engine's Trainer with the model,
    objective, optimizer, accumulation, precision and XLA choice a run uses (benchmarks.train
    times this same trainer), its learning-rate schedule, and the banner's notes on memory and
    precision. `spec` needs only `num_classes`; `plan`: the config's (resolved here if None)."""
    plan = plan or plan_lib.resolve(config, strategy)
    keras.utils.set_random_seed(plan.seed)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision.POLICIES[plan.precision])
    try:
        with strategy.scope():
            # The initial values come from the seed and each weight's path, not from the
            # backend's generator: the same model on every engine.
            with initializers.seeded(plan.seed):
                model = model_builder.build_model(plan.model, spec.num_classes, params=plan.params)
                objective = _objective(plan, strategy, model)
            schedule = plan.optimizer.schedule()
            optimizer = plan.optimizer.make_optimizer(schedule, loss_scaling=plan.precision == "float16")
            accum_steps, memory_note = memory.resolve_accum_steps(
                plan.memory, strategy, model, plan.accum_steps
            )
            trainer = engines.of(strategy).trainer(
                strategy=strategy,
                model=model,
                optimizer=optimizer,
                global_batch_size=plan.batch_size,
                accum_steps=accum_steps,
                grad_norm_clip=plan.optimizer.grad_norm_clip,
                jit_compile=plan.jit,
                loss=plan.loss,
                objective=objective,
            )
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
    return BuiltTrainer(trainer, schedule, memory_note, plan.precision_note)


def _objective(plan, strategy, model):
    """The objective --objective asks for (None: classification); a model it cannot train is a UsageError."""
    try:
        return engines.of(strategy).objective(plan.objective, plan.masked_target, model, strategy)
    except ValueError as e:
        raise UsageError(f"--objective={plan.objective}: {e}") from None


def _input_fn(plan, spec, split, training, start_step=0, batch_size=None, micro_batches=1, batch_ops=True):
    """`batch_size`: evaluation's global batch (default: the training batch); the micro-batches
    of an accumulating run, whose full batch would not fit. `micro_batches`: training's
    accumulation, which batch ops drawing per micro-batch (masked patch prediction) read.
    batch_ops=False: the images and labels as the image ops leave them (the pictures' captions)."""
    return data.make_input_fn(
        spec,
        split,
        ops=list(plan.train_ops if training else plan.eval_ops),
        global_batch_size=batch_size or plan.batch_size,
        training=training,
        seed=plan.seed,
        start_step=start_step,
        # only the training split is subsampled; evaluation sees the whole split
        examples_per_class=plan.examples_per_class if training else None,
        # Mixup mixes training batches only; masked patch prediction's draw goes over evaluation
        # batches too (the pipeline keeps, in evaluation, the ops registered for it).
        batch_ops=list(plan.batch_ops) if batch_ops else [],
        micro_batches=micro_batches,
    )


class _Run:
    """The workdir side of a run: config.json, resume, the banner, the controller with its actions,
    and what the end leaves behind (results.json, model.npz)."""

    def __init__(self, plan, strategy, spec, built, evaluators):
        self.plan, self.strategy, self.spec = plan, strategy, spec
        self.built, self.trainer, self.schedule = built, built.trainer, built.schedule
        self.evaluators = evaluators
        # results.json's "eval": every classification split, whichever evaluator ran it.
        self.classification = classification_lib.combined(evaluators, built.trainer)
        self.workdir = plan.output.workdir
        self.engine = engines.of(strategy)
        self.chief = self.engine.is_chief(strategy)
        self.console = Console(self.chief)

    def run(self):
        plan, trainer, strategy = self.plan, self.trainer, self.strategy
        loop = plan.loop
        self.start_time = time.time()
        if self.chief:
            fileio.makedirs(self.workdir)
            fileio.write_atomic(fileio.join(self.workdir, "config.json"), plan.output.config_json + "\n")
        task_id = 0 if self.chief else self.engine.task_id(strategy)
        checkpoints = RunCheckpoints(
            trainer, self.workdir, chief=self.chief, task_id=task_id, keep=loop.keep_checkpoints
        )
        latest = checkpoints.restore()
        step = checkpoints.step
        for line in banner.lines(
            settings=plan.banner,
            spec=self.spec,
            strategy=strategy,
            model=trainer.model,
            # What the classification evaluators read: --eval_splits, or the splits --evals names.
            eval_splits=self.classification.splits,
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
            total_steps=loop.total_steps,
            steps_per_loop=loop.steps_per_loop,
            log=actions.LogTraining(
                self.summaries,
                self.schedule,
                total_steps=loop.total_steps,
                batch_size=plan.batch_size,
                replicas=plan.replicas,
                console=self.console,
            ),
            actions=[actions.SaveCheckpoint(checkpoints, loop.checkpoint_every)],
            evaluations=evaluations,
            checkpoints=checkpoints,
            finish=self._finish,
        )
        train_input = _input_fn(
            plan,
            self.spec,
            plan.train_split,
            training=True,
            start_step=step,
            micro_batches=trainer.accum_steps,
        )
        return controller.run(iter(data.distribute(strategy, train_input)), step)

    def _finish(self, step, tags):
        """results.json (returned too), the final lines, model.npz: the end of a run that reached it."""
        metrics = self.classification.by_split(tags)
        metrics = {name: {**m, "examples": int(m["examples"])} for name, m in metrics.items()}
        results = {
            "dataset": self.plan.data.dataset,
            "model": self.plan.model.variant,
            "steps": step,
            "train_loss": float(self.trainer.last_loss.numpy()),
            "eval": metrics,
            "skipped_images": int(getattr(self.spec, "skipped", 0) or 0),
            "wall_time_s": round(time.time() - self.start_time, 2),
            "replicas": self.plan.replicas,
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
        name, split = next(iter(self.plan.eval_splits.items()))
        batch = self.trainer.micro_batch_size
        # Without the batch ops: the pictures are captioned with the class labels.
        input_fn = _input_fn(self.plan, self.spec, split, training=False, batch_size=batch, batch_ops=False)
        return name, input_fn(tf.distribute.InputContext())

    def _pictures(self):
        """Attention pictures at each evaluation, of the first eval split's first images."""
        name, dataset = self._first_eval_split()
        writer, every = self.summaries.eval, self.plan.loop.eval_every
        return image_summaries.Pictures.from_dataset(
            dataset, self.trainer.model, writer, self.spec.class_names, every, name
        )

    def _log_start(self):
        """Hyperparameters and a few (evaluation-pipeline) input images, once per workdir."""
        if not self.chief:
            return
        with self.summaries.train.as_default(step=0):
            hparams_api.hparams(dict(self.plan.output.hparams))
        name, dataset = self._first_eval_split()
        images = next(iter(dataset))[0][:4]
        with self.summaries.eval.as_default(step=0):
            tf.summary.image(f"{name}/input_images", (tf.cast(images, tf.float32) + 1.0) / 2.0, max_outputs=4)
