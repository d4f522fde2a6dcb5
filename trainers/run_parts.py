"""The parts of a training run, built from its plan, and the run they make.

`build(plan, strategy)` makes everything a run needs before it writes a byte (the dataset's
spec, the engine's Trainer, the evaluators), so a problem with any of them is one `UsageError`
line with the workdir untouched; `Run.run()` then writes the workdir: config.json, the resume
from the last checkpoint, the start banner, and the controller (trainers/controller.py), which
trains, evaluates and ends the run (results.json, model.npz).
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
    disk_space,
    engines,
    image_summaries,
    memory,
    model_builder,
    precision,
    workdir_lock,
)
from trainers import plan as plan_lib
from trainers.console import Console
from trainers.controller import Controller
from trainers.errors import UsageError
from trainers.evaluators import classification as classification_lib
from trainers.evaluators import from_config
from trainers.run_checkpoints import RunCheckpoints


def build(plan, strategy):
    """The Run of `plan` under `strategy`: its dataset, Trainer and evaluators, all checked."""
    spec = data.get_spec(plan.data.dataset, data_dir=plan.data.data_dir, manual_dir=plan.data.manual_dir)
    _check_labels(plan, spec)
    # Its pipeline is built once the checkpoint says where training starts, after the first
    # writes: a bad or empty training split must be found here, or its config.json would be
    # written and the corrected command refused as a run with other settings.
    data.check_split(spec, plan.train_split)
    built = build_trainer(None, strategy, spec, plan)
    # The evaluators of --evals, or of the evaluation flags (trainers/evaluators/from_config.py),
    # reading the evaluation pipeline of the plan at the evaluation batch of the Trainer.
    eval_input = functools.partial(
        input_fn, plan, spec, training=False, batch_size=built.trainer.micro_batch_size
    )
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
    return Run(plan, strategy, spec, built, from_config.build(plan.evals, context))


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


BuiltTrainer = collections.namedtuple("BuiltTrainer", "trainer schedule memory_note precision_note jit_note")


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
    return BuiltTrainer(trainer, schedule, memory_note, plan.precision_note, plan.jit_note)


def _objective(plan, strategy, model):
    """The objective --objective asks for (None: classification); a model it cannot train is a UsageError."""
    try:
        return engines.of(strategy).objective(plan.objective, plan.masked_target, model, strategy)
    except ValueError as e:
        raise UsageError(f"--objective={plan.objective}: {e}") from None


def input_fn(plan, spec, split, training, start_step=0, batch_size=None, micro_batches=1, batch_ops=True):
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


class Run:
    """The workdir side of a run: config.json, resume, the banner, and the controller with its
    actions, which trains, evaluates and ends the run (results.json, model.npz)."""

    def __init__(self, plan, strategy, spec, built, evaluators):
        self.plan, self.strategy, self.spec = plan, strategy, spec
        self.built, self.trainer, self.schedule = built, built.trainer, built.schedule
        self.evaluators = evaluators
        self.workdir = plan.output.workdir
        self.engine = engines.of(strategy)
        self.chief = self.engine.is_chief(strategy)
        self.console = Console(self.chief)

    def run(self):
        if not self.chief:
            return self._run()
        disk_space.create_workdir(self.workdir)
        # Before config.json: a second run in the same workdir writes nothing (trainers/workdir_lock.py).
        with workdir_lock.held(self.workdir):
            return self._run()

    def _run(self):
        plan, trainer, strategy = self.plan, self.trainer, self.strategy
        loop = plan.loop
        started = time.time()
        task_id = 0 if self.chief else self.engine.task_id(strategy)
        checkpoints = RunCheckpoints(
            trainer, self.workdir, chief=self.chief, task_id=task_id, keep=loop.keep_checkpoints
        )
        latest = checkpoints.restore()
        if self.chief:
            # After the restore: a checkpoint that does not fit the new settings leaves the
            # recorded ones, which still describe it.
            fileio.write_atomic(fileio.join(self.workdir, "config.json"), plan.output.config_json + "\n")
        step = checkpoints.step
        for line in banner.lines(
            settings=plan.banner,
            spec=self.spec,
            strategy=strategy,
            model=trainer.model,
            # What the classification evaluators read: --eval_splits, or the splits --evals names.
            eval_splits=classification_lib.splits_of(self.evaluators),
            accum_steps=trainer.accum_steps,
            memory_note=self.built.memory_note,
            precision_note=self.built.precision_note,
            jit=trainer.jit_compile,
            jit_note=self.built.jit_note,
            start_step=step,
        ):
            self.console.print(line)
        if latest:
            self.console.print(f"Resumed from {latest} at step {step}.")
        if step > loop.total_steps:  # a rerun with a lower --total_steps (a rerun-free flag)
            self.console.print(
                f"The run is at step {step}, past --total_steps={loop.total_steps}: nothing to train; "
                f"it ends with the model of step {step}."
            )
        summaries = actions.Summaries(self.workdir, self.chief)
        # The chief's first evaluation images, for the start's log and the pictures: built once.
        first_split = self._first_eval_split() if self.chief else None
        if step == 0 and self.chief:
            self._log_start(summaries, *first_split)
        evaluations = [
            actions.Evaluate(e, trainer.model, summaries, strategy, self.console) for e in self.evaluators
        ]
        evaluations = [image_summaries.FewShotPlot(e, summaries.eval) for e in evaluations]
        if self.chief:
            evaluations.append(self._pictures(summaries, *first_split))
        controller = Controller(
            trainer=trainer,
            strategy=strategy,
            total_steps=loop.total_steps,
            steps_per_loop=loop.steps_per_loop,
            log=actions.LogTraining(
                summaries,
                self.schedule,
                total_steps=loop.total_steps,
                batch_size=plan.batch_size,
                replicas=plan.replicas,
                console=self.console,
            ),
            actions=[actions.SaveCheckpoint(checkpoints, loop.checkpoint_every)],
            evaluations=evaluations,
            checkpoints=checkpoints,
            # results.json: these, the steps and the last loss, then every evaluator's section
            # ("eval" always there, empty where no classifier runs).
            record={
                "dataset": plan.data.dataset,
                "model": plan.model.variant,
                "eval": {},
                "skipped_images": int(getattr(self.spec, "skipped", 0) or 0),
                "replicas": plan.replicas,
            },
            export=actions.Export(
                trainer.model, self.workdir, self.chief, self.spec.class_names, summaries=summaries
            ),
            console=self.console,
            started=started,
        )
        train_input = input_fn(
            plan,
            self.spec,
            plan.train_split,
            training=True,
            start_step=step,
            micro_batches=trainer.accum_steps,
        )
        return controller.run(iter(data.distribute(strategy, train_input)), step)

    def _first_eval_split(self):
        """(name, this process's evaluation dataset) of the first --eval_splits entry."""
        name, split = next(iter(self.plan.eval_splits.items()))
        batch = self.trainer.micro_batch_size
        # Without the batch ops: the pictures are captioned with the class labels.
        split_input = input_fn(self.plan, self.spec, split, training=False, batch_size=batch, batch_ops=False)
        return name, split_input(tf.distribute.InputContext())

    def _pictures(self, summaries, name, dataset):
        """Attention pictures at each evaluation, of the first eval split's first images."""
        writer, every = summaries.eval, self.plan.loop.eval_every
        return image_summaries.Pictures.from_dataset(
            dataset, self.trainer.model, writer, self.spec.class_names, every, name
        )

    def _log_start(self, summaries, name, dataset):
        """Hyperparameters and a few (evaluation-pipeline) input images, once per workdir."""
        with summaries.train.as_default(step=0):
            hparams_api.hparams(dict(self.plan.output.hparams))
        images = next(iter(dataset))[0][:4]
        with summaries.eval.as_default(step=0):
            tf.summary.image(f"{name}/input_images", (tf.cast(images, tf.float32) + 1.0) / 2.0, max_outputs=4)
