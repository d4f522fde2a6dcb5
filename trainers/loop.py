"""The training loop: compiled distributed steps, schedules, checkpoints and evaluation.

One call of `Trainer.train` runs `num_steps` optimizer steps inside a single `tf.function`
(`strategy.run` per step), which is what keeps a TPU busy. Each step:

* splits the per-replica batch into `accum_steps` micro-batches and sums their gradients;
* scales the loss by 1 / global batch size (sum of per-example cross-entropies), so the
  all-reduced SUM of the replicas' gradients is exactly the gradient of the global mean,
  whatever the replica count;
* all-reduces the gradients itself and clips their global norm *after* the reduction.
  Keras 3 optimizers under a `tf.distribute` strategy would clip each replica's partial
  gradient and then all-reduce again, so the optimizer is told not to aggregate (see
  `make_optimizer`).
"""

import math

import keras
import tensorflow as tf


class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `base_lr`, then cosine or linear decay until `total_steps`.

    The shape of vit_jax's `create_learning_rate_schedule`: linear decay ends at
    `linear_end`, cosine at 0. The optimizer passes its 0-based iteration; the step being
    taken is iteration + 1, so the first step does not have a learning rate of zero.
    """

    def __init__(self, base_lr, total_steps, warmup_steps=0, decay_type="cosine", linear_end=1e-5):
        if decay_type not in ("cosine", "linear"):
            raise ValueError(f"decay_type must be 'cosine' or 'linear', got {decay_type!r}.")
        self.base_lr = float(base_lr)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay_type = decay_type
        self.linear_end = float(linear_end)

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        decay_steps = max(1, self.total_steps - self.warmup_steps)
        progress = tf.clip_by_value((step - self.warmup_steps) / decay_steps, 0.0, 1.0)
        if self.decay_type == "cosine":
            lr = self.base_lr * 0.5 * (1.0 + tf.cos(math.pi * progress))
        else:
            lr = self.linear_end + (self.base_lr - self.linear_end) * (1.0 - progress)
        if self.warmup_steps:
            lr = lr * tf.minimum(1.0, step / self.warmup_steps)
        return lr

    def get_config(self):
        return dict(
            base_lr=self.base_lr,
            total_steps=self.total_steps,
            warmup_steps=self.warmup_steps,
            decay_type=self.decay_type,
            linear_end=self.linear_end,
        )


def _no_aggregation(grads_and_vars):
    return list(grads_and_vars)


def make_optimizer(
    name, learning_rate, *, momentum=0.9, beta_1=0.9, beta_2=0.999, weight_decay=0.0, loss_scaling=False
):
    """An optimizer that applies gradients the Trainer has already all-reduced.

    "sgd": SGD with momentum (the paper's fine-tuning). "adam": Adam; with weight decay it
    is decoupled (AdamW: w -= lr * wd * w each step), which is what flax.optim.Adam's
    `weight_decay`, used for the paper's pre-training, does. Biases and norms are decayed
    too, as there. `loss_scaling` wraps it in a dynamic LossScaleOptimizer (float16).
    """
    if name == "sgd":
        inner = keras.optimizers.SGD(learning_rate, momentum=momentum, weight_decay=weight_decay or None)
    elif name == "adam":
        if weight_decay:
            inner = keras.optimizers.AdamW(
                learning_rate, weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2, epsilon=1e-8
            )
        else:
            inner = keras.optimizers.Adam(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=1e-8)
    else:
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}.")
    # Keras 3's TensorFlow optimizer all-reduces (SUM) the gradients it is given whenever it
    # runs in a replica context. Ours are reduced already; summing again would multiply them
    # by the replica count. If this hook ever disappears, fail loudly instead of training wrong.
    if not hasattr(inner, "_all_reduce_sum_gradients"):
        raise RuntimeError(
            "This Keras version's optimizer has no _all_reduce_sum_gradients; "
            "the trainer cannot stop it from re-aggregating gradients."
        )
    inner._all_reduce_sum_gradients = _no_aggregation
    if loss_scaling:
        return keras.optimizers.LossScaleOptimizer(inner)
    return inner


def _per_example_loss(labels, logits):
    return keras.losses.sparse_categorical_crossentropy(labels, tf.cast(logits, tf.float32), from_logits=True)


class Trainer:
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
    ):
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.global_batch_size = int(global_batch_size)
        self.accum_steps = int(accum_steps)
        self.grad_norm_clip = float(grad_norm_clip) if grad_norm_clip else None
        self.loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        replicas = strategy.num_replicas_in_sync
        if self.global_batch_size % (replicas * self.accum_steps):
            raise ValueError(
                f"batch size {self.global_batch_size} is not divisible by replicas x accum_steps "
                f"= {replicas} x {self.accum_steps}."
            )
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
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        replica_step = self._replica_step
        if jit_compile:
            replica_step = tf.function(replica_step, jit_compile=True)
        self._replica_step_fn = replica_step
        self._train_fn = tf.function(self._train_loop)
        self._eval_fn = tf.function(self._eval_loop)

    # -- training -----------------------------------------------------------------------
    def _micro_batch_grads(self, images, labels):
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            loss = tf.reduce_sum(_per_example_loss(labels, logits)) / self.global_batch_size
            scaled = self.optimizer.scale_loss(loss) if self.loss_scaling else loss
        return loss, tape.gradient(scaled, variables)

    def _replica_step(self, images, labels):
        variables = self.model.trainable_variables
        if self.accum_steps == 1:
            loss, grads = self._micro_batch_grads(images, labels)
        else:
            micro = tf.shape(images)[0] // self.accum_steps
            images = tf.reshape(images, tf.concat([[self.accum_steps, micro], tf.shape(images)[1:]], 0))
            labels = tf.reshape(labels, [self.accum_steps, micro])
            loss = tf.constant(0.0)
            grads = [tf.zeros_like(v) for v in variables]
            for i in tf.range(self.accum_steps):
                micro_loss, micro_grads = self._micro_batch_grads(images[i], labels[i])
                loss += micro_loss
                grads = [g + tf.cast(m, g.dtype) for g, m in zip(grads, micro_grads)]
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        norm = tf.linalg.global_norm(grads)
        if self.loss_scaling:
            norm = norm / tf.cast(self.optimizer.dynamic_scale, norm.dtype)
        if self.grad_norm_clip:
            # tf.clip_by_global_norm's factor; with loss scaling the scaled gradients are
            # clipped by the factor of the unscaled norm, the optimizer then unscales.
            factor = self.grad_norm_clip / tf.maximum(norm, self.grad_norm_clip)
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
        }

    # -- evaluation ---------------------------------------------------------------------
    def _replica_eval(self, images, labels, weights):
        logits = tf.cast(self.model(images, training=False), tf.float32)
        weights = tf.cast(weights, tf.float32)
        loss = tf.reduce_sum(_per_example_loss(labels, logits) * weights)
        correct = tf.cast(
            tf.equal(tf.argmax(logits, -1, output_type=tf.int32), tf.cast(labels, tf.int32)), tf.float32
        )
        return loss, tf.reduce_sum(correct * weights), tf.reduce_sum(weights)

    def _eval_loop(self, dataset):
        strategy = self.strategy
        totals = tf.zeros([3])
        for images, labels, weights in dataset:
            out = strategy.run(self._replica_eval, args=(images, labels, weights))
            totals += tf.stack([strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for v in out])
        return totals

    def evaluate(self, dataset):
        """One pass over a distributed (images, labels, weights) dataset; padding has weight 0."""
        loss, correct, count = (float(v) for v in self._eval_fn(dataset).numpy())
        if count == 0:
            raise ValueError("the evaluation split has no examples.")
        return {"loss": loss / count, "accuracy": correct / count, "examples": int(count)}
