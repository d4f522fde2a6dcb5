"""One training run from a resolved config: validate, build, resume, train, evaluate, export.

Shared by trainers.finetune and trainers.pretrain. The order matters for the error contract:
everything that can be wrong with the input (config, strategy, dataset, model, weights) is
checked before the first byte is written to the workdir.

Workdir layout: config.json, results.json, model.npz (official layout), checkpoints/,
train/ and eval/ (TensorBoard event files).
"""

import json
import time

import keras
import tensorflow as tf

from keras_vit import fileio
from trainers import common, loop, optimizers, preemption

CHECKPOINT_DIR = "checkpoints"


def run(config, *, evaluators=()):
    """Trains per `config`; returns the results dict (also written to WORKDIR/results.json).

    `evaluators`: (every_n_steps, name, make) where make(strategy) -> fn(model) -> {tag: scalar};
    made once the strategy exists (and before anything is written, so they may raise UsageError),
    run during training and at the end, logged to TensorBoard and included in the results
    (pre-training's few-shot probes).
    If SIGTERM arrives (on any worker), a checkpoint is saved and the returned dict has
    "preempted": True (trainers/preemption.py).
    """
    from trainers import data, distribute

    config = (
        config.copy_and_resolve_references() if hasattr(config, "copy_and_resolve_references") else config
    )
    common.validate(config)
    eval_splits = common.parse_eval_splits(config.eval_splits)
    strategy = distribute.create_strategy(
        config.strategy, tpu=config.tpu or None, cpu_devices=config.cpu_devices or 1
    )
    replicas = strategy.num_replicas_in_sync
    common.check_replicas(config, replicas)
    spec = data.get_spec(
        config.dataset, data_dir=config.data_dir or None, manual_dir=config.manual_dir or None
    )
    _check_labels(config, spec)
    workdir = config.workdir
    if fileio.exists(workdir) and not fileio.isdir(workdir):
        raise common.UsageError(f"--workdir {workdir!r} exists and is not a directory.")

    keras.utils.set_random_seed(config.seed)
    policy = {"none": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}[
        config.mixed_precision
    ]
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        with strategy.scope():
            model = common.build_model(config, spec.num_classes)
            schedule = optimizers.WarmupDecay(
                config.base_lr, config.total_steps, config.warmup_steps, config.decay_type
            )
            optimizer = optimizers.make_optimizer(
                config.optimizer,
                schedule,
                momentum_dtype=config.momentum_dtype,
                weight_decay=config.weight_decay,
                loss_scaling=config.mixed_precision == "float16",
            )
            trainer = loop.Trainer(
                strategy=strategy,
                model=model,
                optimizer=optimizer,
                global_batch_size=config.batch_size,
                accum_steps=config.accum_steps,
                grad_norm_clip=config.grad_norm_clip,
                jit_compile=_use_jit(config.jit_compile, strategy),
                loss=config.loss,
            )
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)

    with strategy.scope():
        evaluators = [(every, name, make(strategy)) for every, name, make in evaluators]
    # Validation is over: from here on the workdir is written.
    chief = is_chief(strategy)
    driver = _Driver(config, strategy, spec, trainer, schedule, eval_splits, evaluators, chief)
    return driver.run()


def _check_labels(config, spec):
    """A multi-label dataset needs the sigmoid loss and all of its examples."""
    from trainers import data

    if not spec.multi_label:
        return
    if config.loss != "sigmoid":
        raise common.UsageError(
            f"{spec.name} has images with several labels: train it with --loss=sigmoid "
            f"(softmax cross-entropy takes one label per image)."
        )
    if config.examples_per_class:
        raise common.UsageError(
            data.multi_label_refusal(spec, "--examples_per_class", "leave it at 0 (train on every example)")
        )


def _use_jit(setting, strategy):
    """XLA for the per-replica step. "auto": on GPUs only. TPUStrategy compiles the whole step
    with XLA anyway; on CPU, XLA under MirroredStrategy fails in TF 2.21 (variables on another
    device) and gains little for one device, so it stays off there."""
    if setting != "auto":
        return setting == "true"
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return False
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # the default strategy: one device, TensorFlow's choice
        devices = ["GPU"] if tf.config.list_logical_devices("GPU") else ["CPU"]
    return all("GPU" in d.upper() for d in devices)


def is_chief(strategy):
    """The process that writes logs, results and the real checkpoints (worker 0 or 'chief')."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or isinstance(strategy, tf.distribute.TPUStrategy):
        return True
    cluster = resolver.cluster_spec().as_dict()
    if not cluster or resolver.task_type is None:
        return True
    if resolver.task_type == "chief":
        return True
    return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster


class _Driver:
    """The host loop around Trainer: resume, boundaries, logging, checkpoints, signals."""

    def __init__(self, config, strategy, spec, trainer, schedule, eval_splits, evaluators, chief):
        self.config, self.strategy, self.spec, self.trainer = config, strategy, spec, trainer
        self.schedule, self.eval_splits, self.evaluators, self.chief = (
            schedule,
            eval_splits,
            evaluators,
            chief,
        )
        self.workdir = config.workdir
        self.saved_step = None

    # -- set-up -------------------------------------------------------------------------
    def _checkpoint_manager(self):
        checkpoint = tf.train.Checkpoint(
            model=self.trainer.model,
            optimizer=self.trainer.optimizer,
            step=self.trainer.step,
            last_loss=self.trainer.last_loss,
            rng=self.trainer.rng_state,
        )
        directory = fileio.join(self.workdir, CHECKPOINT_DIR)
        if not self.chief:
            # Every worker must take part in a save; only the chief's copy is kept.
            task = self.strategy.cluster_resolver.task_id
            directory = fileio.join(self.workdir, f".worker_{task}_tmp", CHECKPOINT_DIR)
        self.checkpoint = checkpoint
        self.manager = tf.train.CheckpointManager(
            checkpoint, directory, max_to_keep=self.config.keep_checkpoints
        )
        latest = tf.train.latest_checkpoint(fileio.join(self.workdir, CHECKPOINT_DIR))
        if latest:
            checkpoint.restore(latest).assert_existing_objects_matched()
            self.saved_step = int(self.trainer.step.numpy())
            print(f"Resumed from {latest} at step {int(self.trainer.step.numpy())}.", flush=True)

    def _save(self):
        step = int(self.trainer.step.numpy())
        self.manager.save(checkpoint_number=step)
        self.saved_step = step
        if not self.chief:
            fileio.rmtree(fileio.dirname(self.manager.directory))

    def _input(self, split, training, start_step=0):
        from trainers import data

        fn = data.make_input_fn(
            self.spec,
            split,
            image_size=self.config.image_size,
            global_batch_size=self.config.batch_size,
            training=training,
            seed=self.config.seed,
            start_step=start_step,
            # only the training split is subsampled; evaluation sees the whole split
            examples_per_class=(self.config.examples_per_class or None) if training else None,
            crop_min_area=self.config.crop_min_area,
            random_flip=self.config.random_flip,
        )
        return fn

    def _writers(self):
        if self.chief:
            self.train_writer = tf.summary.create_file_writer(fileio.join(self.workdir, "train"))
            self.eval_writer = tf.summary.create_file_writer(fileio.join(self.workdir, "eval"))
        else:
            self.train_writer = self.eval_writer = tf.summary.create_noop_writer()

    # -- the run ------------------------------------------------------------------------
    def run(self):
        from trainers import data

        config, trainer = self.config, self.trainer
        start_time = time.time()
        if self.chief:
            fileio.makedirs(self.workdir)
            fileio.write_atomic(
                fileio.join(self.workdir, "config.json"), common.config_to_json(config) + "\n"
            )
        self._checkpoint_manager()
        self._writers()
        step = int(trainer.step.numpy())
        total = config.total_steps
        eval_data = {
            name: data.distribute(self.strategy, self._input(split, False))
            for name, split in self.eval_splits.items()
        }
        if step == 0:
            self._log_start(eval_data)
        iterator = iter(
            data.distribute(self.strategy, self._input(config.train_split, True, start_step=step))
        )

        # SIGTERM: every worker saves the same step at a loop boundary and the run returns.
        with preemption.Preemption(self.strategy, self._save) as preempted:
            while step < total:
                end = self._next_boundary(step)
                tick = time.perf_counter()
                out = trainer.train(iterator, end - step)
                seconds = time.perf_counter() - tick
                if not out["finite"]:
                    kept = self.manager.latest_checkpoint or "none"
                    raise common.TrainingError(
                        f"the training loss became {out['loss']} (gradient norm {out['grad_norm']}) "
                        f"between steps {step} and {end}; stopped without saving. "
                        f"Last good checkpoint: {kept}. "
                        "Lower --base_lr or set --grad_norm_clip."
                    )
                self._log_train(step, end, out, seconds)
                step = end
                if config.checkpoint_every and step % config.checkpoint_every == 0 and step < total:
                    self._save()
                if config.eval_every and step % config.eval_every == 0 and step < total:
                    self._evaluate(step, eval_data)
                for every, name, fn in self.evaluators:
                    if every and step % every == 0 and step < total:
                        self._run_evaluator(step, name, fn)
                if step < total and preempted.saved_checkpoint():
                    print(
                        f"preempted (SIGTERM): saved a checkpoint at step {step}; "
                        "rerun the same command to resume.",
                        flush=True,
                    )
                    return {"preempted": True, "steps": step}

        if self.saved_step != step:
            self._save()
        return self._finish(step, eval_data, time.time() - start_time)

    def _next_boundary(self, step):
        """The next step at which the host must act; a pure function of the step, so a resumed
        run splits the remaining steps into the same loop calls as an uninterrupted one."""
        config = self.config
        ends = [config.total_steps]
        for every in (
            config.steps_per_loop,
            config.eval_every,
            config.checkpoint_every,
            *(e for e, _, _ in self.evaluators),
        ):
            if every:
                ends.append((step // every + 1) * every)
        return min(ends)

    def _finish(self, step, eval_data, seconds):
        config = self.config
        metrics = {name: self.trainer.evaluate(ds) for name, ds in eval_data.items()}
        self._write_eval(step, metrics)
        extra = {}
        for _, name, fn in self.evaluators:
            extra.update(self._run_evaluator(step, name, fn))
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
        results.update(extra)
        metric = self.trainer.metric_name
        for name, m in metrics.items():
            print(
                f"final {name}: {metric} {m[metric]:.4f}  loss {m['loss']:.4f}  ({m['examples']} images)",
                flush=True,
            )
        if self.chief:
            from keras_vit import weights as weights_lib

            weights_lib.save_npz(self.trainer.model, fileio.join(self.workdir, "model.npz"))
            fileio.write_atomic(
                fileio.join(self.workdir, "results.json"),
                json.dumps(results, indent=2, sort_keys=True) + "\n",
            )
        self.train_writer.flush()
        self.eval_writer.flush()
        return results

    # -- logging ------------------------------------------------------------------------
    def _log_start(self, eval_data):
        """Hyperparameters and a few (evaluation-pipeline) input images, once per workdir."""
        from tensorboard.plugins.hparams import api as hp

        if not self.chief:
            return
        hparams = {k: v for k, v in self.config.items() if isinstance(v, (bool, int, float, str))}
        with self.train_writer.as_default(step=0):
            hp.hparams(hparams)
        name, split = next(iter(self.eval_splits.items()))
        dataset = self._input(split, False)(tf.distribute.InputContext())
        images = next(iter(dataset))[0][:4]
        with self.eval_writer.as_default(step=0):
            tf.summary.image(f"{name}/input_images", (tf.cast(images, tf.float32) + 1.0) / 2.0, max_outputs=4)

    def _log_train(self, start, end, out, seconds):
        config = self.config
        images_per_s = (end - start) * config.batch_size / max(seconds, 1e-9)
        per_core = images_per_s / self.strategy.num_replicas_in_sync
        lr = float(self.schedule(end - 1))
        with self.train_writer.as_default(step=end):
            tf.summary.scalar("loss", out["loss"])
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("grad_norm", out["grad_norm"])
            tf.summary.scalar("images_per_second", images_per_s)
            tf.summary.scalar("images_per_second_per_core", per_core)
        eta = (config.total_steps - end) * seconds / (end - start)
        print(
            f"step {end}/{config.total_steps}  loss {out['loss']:.4f}  lr {lr:.3g}  "
            f"grad_norm {out['grad_norm']:.3f}  {images_per_s:.1f} img/s ({per_core:.1f}/core)  "
            f"ETA {_duration(eta)}",
            flush=True,
        )

    def _evaluate(self, step, eval_data):
        metrics = {name: self.trainer.evaluate(ds) for name, ds in eval_data.items()}
        self._write_eval(step, metrics)
        return metrics

    def _write_eval(self, step, metrics):
        metric = self.trainer.metric_name  # "accuracy" (softmax) or "prec@1" (sigmoid)
        with self.eval_writer.as_default(step=step):
            for name, m in metrics.items():
                tf.summary.scalar(f"{name}/{metric}", m[metric])
                tf.summary.scalar(f"{name}/loss", m["loss"])
        print(
            f"step {step}  "
            + "  ".join(f"{n}: {metric} {m[metric]:.4f} loss {m['loss']:.4f}" for n, m in metrics.items()),
            flush=True,
        )

    def _run_evaluator(self, step, name, fn):
        with self.strategy.scope():  # so the evaluator shares the trainer's devices
            scalars = {k: float(v) for k, v in fn(self.trainer.model).items()}
        with self.eval_writer.as_default(step=step):
            for tag, value in scalars.items():
                tf.summary.scalar(tag, value)
        print(f"step {step}  {name}: " + "  ".join(f"{k} {v:.4f}" for k, v in scalars.items()), flush=True)
        return scalars


def _duration(seconds):
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
