"""The training loop: compiled distributed steps, schedules, checkpoints and evaluation.

One call of `TensorFlowTrainer.train` runs `num_steps` optimizer steps inside a single `tf.function`
(`strategy.run` per step), which is what keeps a TPU busy. Each step:

* splits the per-replica batch into `accum_steps` micro-batches and sums their gradients;
* scales the loss by 1 / global batch size (sum of per-example losses), so the
  all-reduced SUM of the replicas' gradients is exactly the gradient of the global mean,
  whatever the replica count;
* all-reduces the gradients itself and clips their global norm *after* the reduction.
  Keras 3 optimizers under a `tf.distribute` strategy would clip each replica's partial
  gradient and then all-reduce again, so the optimizer is told not to aggregate (see
  `trainers.optimizers.make_optimizer`).

The losses, top-1 hits, global norm, clip factor and micro-batches are trainers/numerics.py's,
shared with the jax engine.
"""

import keras
import tensorflow as tf

from trainers import distribute, objectives
from trainers.graph_functions import as_written
from trainers.numerics import LOSSES, clip_factor, global_norm, micro_batches


def set_common(
    trainer, strategy, model, optimizer, global_batch_size, accum_steps, grad_norm_clip, loss, objective
):
    """The settings both engines' Trainers share (trainers/jax_loop.py too), checked."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}.")
    trainer.loss = loss
    # What the step optimises (trainers/objectives.py): classification of the labels unless another
    # objective is given, which has its own loss and metric (and masked patch prediction its own
    # variables, trained with the model's); `metric_name` names the evaluation's top-1 metric.
    trainer.objective = objectives.Classification(model, loss) if objective is None else objective
    trainer.metric_name = trainer.objective.metric_name
    trainer.strategy, trainer.model, trainer.optimizer = strategy, model, optimizer
    trainer.global_batch_size = int(global_batch_size)
    trainer.accum_steps = int(accum_steps)
    trainer.grad_norm_clip = float(grad_norm_clip) if grad_norm_clip else None
    replicas = strategy.num_replicas_in_sync
    if trainer.global_batch_size % (replicas * trainer.accum_steps):
        raise ValueError(
            f"batch size {trainer.global_batch_size} is not divisible by replicas x accum_steps "
            f"= {replicas} x {trainer.accum_steps}."
        )


class TensorFlowTrainer:
    """Compiled train and eval loops for a classifier under a tf.distribute strategy.

    Build it (and the model and optimizer) inside `strategy.scope()`.
    """

    def __init__(
        self,
        *,
        strategy,
        model,
        optimizer,
        global_batch_size,
        accum_steps=1,
        grad_norm_clip=None,
        jit_compile=False,
        loss="softmax",
        objective=None,
    ):
        set_common(
            self, strategy, model, optimizer, global_batch_size, accum_steps, grad_norm_clip, loss, objective
        )
        self.jit_compile = bool(jit_compile)
        self.loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self.step = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            name="global_step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        # The last loop's mean loss, kept in checkpoints so a resumed run reports it too.
        self.last_loss = tf.Variable(
            float("nan"),
            dtype=tf.float32,
            trainable=False,
            name="last_train_loss",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        # The dropout layers' random-number states, so a resumed run draws the same masks.
        # Keras keeps them out of the model's weights (and so out of tf.train.Checkpoint).
        self.rng_state = [
            generator.state
            for layer in model._flatten_layers()
            for generator in getattr(layer, "_seed_generators", [])
        ]
        # The objective's train-side metric (masked-patch accuracy): hits and count summed over
        # the replicas when read, since the last train() call.
        self._train_sums = [
            tf.Variable(
                0.0,
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
                name=name,
            )
            for name in ("objective_train_hits", "objective_train_count")
            if self.objective.train_metric
        ]
        if not optimizer.built:
            optimizer.build(self.trained_variables)
        replica_step = self._replica_step
        devices = distribute.worker_devices(strategy)
        if jit_compile and (len(devices) == 1 or distribute.all_gpus(devices)):
            # A tf.function itself, not wrapped: MirroredStrategy runs a tf.function it is given
            # around its replicas (mirrored_run.py), where the step's all-reduce may be called.
            replica_step = tf.function(replica_step, jit_compile=True, autograph=False)
        else:
            if jit_compile:
                # Several CPU replicas: MirroredStrategy lifts a jit-compiled replica function into
                # ONE XLA cluster over all replicas (tensorflow/python/distribute/mirrored_run.py,
                # call_for_each_replica: only all-GPU replicas keep one cluster each), launched on
                # CPU:0, and XLA refuses replica 1's variables ("Trying to access resource ...
                # located in device CPU:1 from device CPU:0", xla_launch_util.cc). So each replica
                # compiles its forward and backward pass; the all-reduce and update stay outside.
                self._micro_batch_grads = tf.function(
                    self._micro_batch_grads, jit_compile=True, autograph=False
                )
            replica_step = as_written(replica_step)
        self._replica_step_fn = replica_step
        self._replica_eval_fn = as_written(self._replica_eval)
        # The two loops over tensors, converted by AutoGraph; what they call per replica is not
        # (trainers/graph_functions.py).
        self._train_fn = tf.function(self._train_loop)
        self._eval_fn = tf.function(self._eval_loop)

    @property
    def micro_batch_size(self):
        """The global batch of one accumulation step: what is in memory at once."""
        return self.global_batch_size // self.accum_steps

    @property
    def trained_variables(self):
        """What the optimizer updates: the model's trainable variables, or what the objective trains
        (of the model, the encoder; its own mask embedding and head)."""
        return self.objective.trained_variables(self.model)

    # -- checkpoints (trainers/run_checkpoints.py) ----------------------------------------
    def checkpoint_objects(self):
        """What a checkpoint holds: the model, optimizer, step, dropout states, last loss, and an
        objective's own trained layers (masked patch prediction's mask embedding and head)."""
        objective = self.objective.checkpoint_objects()
        return dict(
            model=self.model,
            optimizer=self.optimizer,
            step=self.step,
            last_loss=self.last_loss,
            rng=self.rng_state,
            **objective,
        )

    def before_save(self):
        """Nothing to copy: the checkpoint reads the variables themselves."""

    def after_restore(self):
        """Nothing to copy back: the restore wrote the variables themselves."""

    # -- training -----------------------------------------------------------------------
    def _micro_batch_grads(self, images, labels):
        variables = self.trained_variables
        with tf.GradientTape() as tape:
            losses, accuracy = self.objective.per_example(images, labels, training=True)
            loss = tf.reduce_sum(losses) / self.global_batch_size
            scaled = self.optimizer.scale_loss(loss) if self.loss_scaling else loss
        if self.objective.train_metric:
            hits, count = self._train_sums
            hits.assign_add(tf.reduce_sum(accuracy))
            count.assign_add(tf.cast(tf.size(accuracy), tf.float32))
        return loss, tape.gradient(scaled, variables)

    def _replica_step(self, images, labels):
        variables = self.trained_variables
        if self.accum_steps == 1:
            loss, grads = self._micro_batch_grads(images, labels)
        else:
            images = micro_batches(images, self.accum_steps)
            labels = micro_batches(labels, self.accum_steps)

            def accumulate(i, loss, grads):
                micro_loss, micro_grads = self._micro_batch_grads(images[i], labels[i])
                return i + 1, loss + micro_loss, [g + tf.cast(m, g.dtype) for g, m in zip(grads, micro_grads)]

            # One micro-batch at a time: the iterations do not depend on each other until the sum,
            # so tf.while_loop would otherwise run up to 10 at once, holding the activations of
            # all of them, which is the memory accumulation exists to save.
            _, loss, grads = tf.while_loop(
                lambda i, loss, grads: i < self.accum_steps,
                accumulate,
                (tf.constant(0), tf.constant(0.0), [tf.zeros_like(v) for v in variables]),
                parallel_iterations=1,
            )
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        norm = global_norm(grads)
        if self.loss_scaling:
            norm = norm / tf.cast(self.optimizer.dynamic_scale, norm.dtype)
        if self.grad_norm_clip:
            # tf.clip_by_global_norm's factor; with loss scaling the scaled gradients are
            # clipped by the factor of the unscaled norm, the optimizer then unscales.
            factor = clip_factor(norm, self.grad_norm_clip)
            grads = [g * tf.cast(factor, g.dtype) for g in grads]
        self.optimizer.apply(grads, variables)
        return loss, norm

    def _train_loop(self, iterator, num_steps):
        strategy = self.strategy
        loss_sum = tf.constant(0.0)
        norm_sum = tf.constant(0.0)
        finite = tf.constant(True)
        for _ in tf.range(num_steps):
            images, labels = next(iterator)
            loss, norm = strategy.run(self._replica_step_fn, args=(images, labels))
            loss = strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
            norm = strategy.reduce(tf.distribute.ReduceOp.MEAN, norm, axis=None)  # equal on all replicas
            finite = tf.logical_and(finite, tf.math.is_finite(loss))
            if not self.loss_scaling:  # with loss scaling an overflow just skips the step
                finite = tf.logical_and(finite, tf.math.is_finite(norm))
            loss_sum += loss
            norm_sum += norm
            self.step.assign_add(1)
        count = tf.cast(num_steps, tf.float32)
        return {"loss": loss_sum / count, "grad_norm": norm_sum / count, "finite": finite}

    def train(self, iterator, num_steps):
        """Runs `num_steps` steps; returns mean loss, mean gradient norm and finiteness."""
        out = self._train_fn(iterator, tf.constant(num_steps, tf.int64))
        out = {k: v.numpy() for k, v in out.items()}
        if out["finite"]:
            self.last_loss.assign(out["loss"])
        return {
            "loss": float(out["loss"]),
            "grad_norm": float(out["grad_norm"]),
            "finite": bool(out["finite"]),
            # The objective's train-side metrics over these steps (masked-patch accuracy).
            "metrics": self._train_metrics(),
        }

    def _train_metrics(self):
        """{metric_name: train accuracy} since the last call ({} for an objective without one)."""
        if not self.objective.train_metric:
            return {}
        hits, count = (float(v.read_value()) for v in self._train_sums)
        for variable in self._train_sums:
            variable.assign(0.0)
        return {self.metric_name: hits / count} if count else {}

    # -- evaluation ---------------------------------------------------------------------
    def _replica_eval(self, images, labels, weights):
        losses, accuracy = self.objective.per_example(images, labels, training=False)
        weights = tf.cast(weights, tf.float32)
        return tf.reduce_sum(losses * weights), tf.reduce_sum(accuracy * weights), tf.reduce_sum(weights)

    def _eval_loop(self, iterator):
        strategy = self.strategy
        totals = tf.zeros([3])
        # Over an iterator, not the dataset: AutoGraph's loop over a dataset reads its options
        # in graph mode, which makes tf.data warn on every evaluation.
        for images, labels, weights in iterator:
            out = strategy.run(self._replica_eval_fn, args=(images, labels, weights))
            totals += tf.stack([strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for v in out])
        return totals

    def evaluate(self, dataset):
        """One pass over a distributed (images, labels, weights) dataset; padding has weight 0.

        Returns {"loss", metric_name ("accuracy" or "prec@1"), "examples"}.
        """
        loss, hits, count = (float(v) for v in self._eval_fn(iter(dataset)).numpy())
        if count == 0:
            raise ValueError("the evaluation split has no examples.")
        return {"loss": loss / count, self.metric_name: hits / count, "examples": int(count)}
