"""The JAX engine's training and evaluation steps: `JaxTrainer`, with the interface of
trainers.loop.TensorFlowTrainer (trainers/engines/interface.py's Trainer).

The whole step is one jit-compiled XLA program over the mesh of trainers/jax_distribute.py:
the micro-batches of an accumulating step (a `lax.scan`, one micro-batch's activations in
memory at a time), their summed gradients, the global norm, the clipping, and the optimizer's
update (the Keras optimizer's `stateless_apply`, so `TraceSGD`, Adam and AdamW are the tf
engine's own). The loss is scaled by 1 / global batch as in the tf engine; with the batch split
over the devices, the gradient of that loss is the all-reduced one, and it is clipped after
that reduction. Keras runs the model statelessly (`keras.StatelessScope`), the pattern of Keras'
own JAX trainer: the variables' values go in as arguments and come out updated (the dropout
layers' random-number states among them).

Between loop calls the state lives on the devices; the Keras variables are pointed at it after
every call (no copy), so evaluators, pictures and exports read the model as they do under the
tf engine. Checkpoints go through the shared trainers/run_checkpoints.py: the state is copied
into host-side tf.Variables just before a save and back after a restore.
"""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import tensorflow as tf

from trainers import loop
from trainers.numerics import clip_factor, global_norm, micro_batches

# Checkpoint copies of integer states (the dropout layers' random-number states) are int64:
# TensorFlow's CPU kernels do not assign every unsigned type.
_CHECKPOINT_DTYPES = {"uint32": tf.int64}


class JaxTrainer:
    """Compiled train and eval steps for a classifier on a JaxStrategy's mesh."""

    def __init__(
        self,
        *,
        strategy,
        model,
        optimizer,
        global_batch_size,
        accum_steps=1,
        grad_norm_clip=None,
        jit_compile=True,
        loss="softmax",
        objective=None,
    ):
        loop.set_common(
            self, strategy, model, optimizer, global_batch_size, accum_steps, grad_norm_clip, loss, objective
        )
        self.jit_compile = True  # the engine has no other way to run
        # Host-side counters, as the tf engine's (the controller and the checkpoints read them).
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.last_loss = tf.Variable(float("nan"), dtype=tf.float32, trainable=False, name="last_train_loss")
        self._trained = list(self.objective.trained_variables(model))
        if not optimizer.built:
            optimizer.build(self._trained)
        trained_ids = {id(v) for v in self._trained}
        everything = list(model.variables) + list(self.objective.variables)
        self._others = _unique(v for v in everything if id(v) not in trained_ids)
        self._opt = list(optimizer.variables)
        self._groups = (self._trained, self._others, self._opt)
        self._state = None  # the device state, while the Keras variables still point at it
        self._published = None
        self._metric_sums = [0.0, 0.0]
        self._shadows = None
        donate = (0,) if strategy.platform != "cpu" else ()  # XLA:CPU does not reuse donated buffers
        self._train_step = jax.jit(self._train_step_fn, donate_argnums=donate)
        self._eval_step = jax.jit(self._eval_step_fn)

    @property
    def micro_batch_size(self):
        return self.global_batch_size // self.accum_steps

    # -- the state --------------------------------------------------------------------------------
    def _device_state(self):
        """(trained, others, optimizer) values on the mesh: the last loop's, unless something
        (a restore, a user) assigned the Keras variables since."""
        current = [[v.value for v in group] for group in self._groups]
        if self._state is not None and all(
            a is b for group, seen in zip(current, self._published) for a, b in zip(group, seen)
        ):
            return self._state
        return tuple([self.strategy.put_replicated(value) for value in group] for group in current)

    def _publish(self, state):
        """Points the Keras variables at `state` (this process's copy on its first device)."""
        for group, values in zip(self._groups, state):
            for variable, value in zip(group, values):
                variable.assign(value.addressable_data(0))
        self._state = state
        self._published = [[v.value for v in group] for group in self._groups]

    def _run(self, fn, trained, others):
        """fn()'s result with the variables at these values, and the others' values after it."""
        mapping = list(zip(self._trained, trained)) + list(zip(self._others, others))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            out = fn()
        return out, [scope.get_current_value(v) for v in self._others]

    # -- training ---------------------------------------------------------------------------------
    def _micro_batch(self, trained, others, images, labels):
        """(loss, per-example metric sum), gradients and the others' new values of one micro-batch."""

        def loss_fn(trained):
            def forward():
                return self.objective.per_example(images, labels, training=True)

            (losses, accuracy), new_others = self._run(forward, trained, others)
            hits = jnp.sum(accuracy)
            return jnp.sum(losses) / self.global_batch_size, (new_others, hits)

        (loss, (new_others, hits)), grads = jax.value_and_grad(loss_fn, has_aux=True)(trained)
        return loss, hits, grads, new_others

    def _train_step_fn(self, state, images, labels):
        trained, others, opt = state
        if self.accum_steps == 1:
            loss, hits, grads, others = self._micro_batch(trained, others, images, labels)
        else:

            def body(carry, batch):
                grads_sum, loss_sum, hits_sum, others = carry
                loss, hits, grads, others = self._micro_batch(trained, others, *batch)
                grads_sum = [g + m.astype(g.dtype) for g, m in zip(grads_sum, grads)]
                return (grads_sum, loss_sum + loss, hits_sum + hits, others), None

            zeros = [jnp.zeros_like(v) for v in trained]
            carry = (zeros, jnp.float32(0.0), jnp.float32(0.0), others)
            # Micro-batch i: the i-th slice of every replica's rows, as each tf replica splits its own.
            replicas = self.strategy.num_replicas_in_sync
            batches = tuple(micro_batches(x, self.accum_steps, replicas) for x in (images, labels))
            (grads, loss, hits, others), _ = jax.lax.scan(body, carry, batches)
        norm = global_norm(grads)
        if self.grad_norm_clip:
            factor = clip_factor(norm, self.grad_norm_clip)
            grads = [g * factor.astype(g.dtype) for g in grads]
        trained, opt = self.optimizer.stateless_apply(opt, grads, trained)
        return (trained, others, opt), loss, norm, hits

    def train(self, iterator, num_steps):
        """Runs `num_steps` steps; returns mean loss, mean gradient norm and finiteness."""
        state = self._device_state()
        outputs = []
        try:
            for _ in range(num_steps):
                images, labels = next(iterator)
                state, loss, norm, hits = self._train_step(state, images, labels)
                outputs.append((loss, norm, hits))
        finally:
            self._publish(state)
        loss, norm, hits = (np.asarray(jnp.stack(column), np.float64) for column in zip(*outputs))
        self.step.assign_add(num_steps)
        out = {
            "loss": float(loss.mean()),
            "grad_norm": float(norm.mean()),
            "finite": bool(np.isfinite(loss).all() and np.isfinite(norm).all()),
            "metrics": {},
        }
        if out["finite"]:
            self.last_loss.assign(out["loss"])
        if self.objective.train_metric:
            self._metric_sums = [self._metric_sums[0] + hits.sum(), self._metric_sums[1] + num_steps]
            out["metrics"] = self.train_metrics()
        return out

    def train_metrics(self):
        """The objective's train accuracy since the last call (mean over its examples)."""
        hits, steps = self._metric_sums
        self._metric_sums = [0.0, 0.0]
        return {self.metric_name: hits / (steps * self.global_batch_size)} if steps else {}

    # -- evaluation -------------------------------------------------------------------------------
    def _eval_step_fn(self, state, images, labels, weights):
        trained, others, _ = state

        def forward():
            return self.objective.per_example(images, labels, training=False)

        (losses, hits), _ = self._run(forward, trained, others)
        weights = weights.astype(jnp.float32)
        return jnp.stack([jnp.sum(losses * weights), jnp.sum(hits * weights), jnp.sum(weights)])

    def evaluate(self, dataset):
        """One pass over a Feed of (images, labels, weights); padding has weight 0."""
        state = self._device_state()
        totals = [self._eval_step(state, *batch) for batch in dataset]
        if not totals:
            raise ValueError("the evaluation split has no examples.")
        loss, hits, count = (float(v) for v in np.asarray(jnp.sum(jnp.stack(totals), axis=0)))
        if count == 0:
            raise ValueError("the evaluation split has no examples.")
        return {"loss": loss / count, self.metric_name: hits / count, "examples": int(count)}

    # -- checkpoints (trainers/run_checkpoints.py) ------------------------------------------------
    def checkpoint_objects(self):
        """Host copies of the whole state for tf.train.Checkpoint, and the counters."""
        if self._shadows is None:
            with tf.device("/cpu:0"):
                self._shadows = [
                    [
                        tf.Variable(
                            tf.zeros(v.shape, _CHECKPOINT_DTYPES.get(str(v.dtype), str(v.dtype))),
                            trainable=False,
                        )
                        for v in group
                    ]
                    for group in self._groups
                ]
        trained, others, opt = self._shadows
        return {
            "jax_state": {"trained": trained, "others": others, "optimizer": opt},
            "step": self.step,
            "last_loss": self.last_loss,
        }

    def before_save(self):
        self.checkpoint_objects()
        for group, shadows in zip(self._groups, self._shadows):
            for variable, shadow in zip(group, shadows):
                value = np.asarray(variable.value)
                shadow.assign(value.astype(shadow.dtype.as_numpy_dtype))

    def after_restore(self):
        for group, shadows in zip(self._groups, self._shadows):
            for variable, shadow in zip(group, shadows):
                variable.assign(shadow.numpy().astype(jnp.dtype(variable.dtype)))
        self._state = None


def _unique(variables):
    seen, unique = set(), []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            unique.append(v)
    return unique
