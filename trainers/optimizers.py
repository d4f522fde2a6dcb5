"""The trainers' optimizers and learning-rate schedule, as the official ViT code defines them.

* `WarmupDecay` is vit_jax's `create_learning_rate_schedule`, evaluated at the same step
  index: the n-th update (n = 0, 1, ...) uses lr(n), as optax's schedule count does, so the
  very first update of a warmed-up run has a learning rate of zero.
* `TraceSGD` is optax's `sgd(momentum=0.9)` (`trace` then scale by -lr): m = 0.9 m + g and
  w -= lr m. Keras' SGD folds the learning rate into its velocity (v = 0.9 v - lr g), which
  under a changing learning rate takes different steps.
* `make_optimizer` hands the Trainer an optimizer that does not all-reduce again: the Trainer
  reduces and clips the gradients itself (see trainers/loop.py).
"""

import dataclasses
import math

import keras
from keras import ops

# The values of --optimizer, --decay_type and --momentum_dtype (trainers/fields.py offers these).
OPTIMIZERS = ("sgd", "adam")
DECAY_TYPES = ("cosine", "linear")
MOMENTUM_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
    """The update a run asks for, resolved from its config once (trainers/plan_pieces.py)."""

    optimizer: str  # --optimizer: one of OPTIMIZERS
    base_lr: float
    total_steps: int  # the schedule's length
    warmup_steps: int
    decay_type: str  # one of DECAY_TYPES
    momentum_dtype: str  # one of MOMENTUM_DTYPES
    weight_decay: float
    grad_norm_clip: float  # the global norm the Trainer clips the gradients to (0: no clipping)

    def schedule(self):
        """The WarmupDecay of these settings."""
        return WarmupDecay(self.base_lr, self.total_steps, self.warmup_steps, self.decay_type)

    def make_optimizer(self, schedule, loss_scaling=False):
        """make_optimizer's optimizer of these settings, at `schedule`'s learning rate."""
        return make_optimizer(
            self.optimizer,
            schedule,
            momentum_dtype=self.momentum_dtype,
            weight_decay=self.weight_decay,
            loss_scaling=loss_scaling,
        )


class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `base_lr`, then cosine or linear decay until `total_steps`.

    vit_jax's schedule: progress = clip((step - warmup) / (total - warmup), 0, 1); linear
    decay ends at `linear_end`, cosine at 0; the warm-up multiplies by min(1, step / warmup).
    `step` is the optimizer's 0-based iteration, the index of the update being taken.
    """

    def __init__(self, base_lr, total_steps, warmup_steps=0, decay_type="cosine", linear_end=1e-5):
        if decay_type not in DECAY_TYPES:
            raise ValueError(f"decay_type must be 'cosine' or 'linear', got {decay_type!r}.")
        self.base_lr = float(base_lr)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay_type = decay_type
        self.linear_end = float(linear_end)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        decay_steps = max(1, self.total_steps - self.warmup_steps)
        progress = ops.clip((step - self.warmup_steps) / decay_steps, 0.0, 1.0)
        if self.decay_type == "cosine":
            lr = self.base_lr * 0.5 * (1.0 + ops.cos(math.pi * progress))
        else:
            lr = self.linear_end + (self.base_lr - self.linear_end) * (1.0 - progress)
        if self.warmup_steps:
            lr = lr * ops.minimum(1.0, step / self.warmup_steps)
        return lr

    def get_config(self):
        return dict(
            base_lr=self.base_lr,
            total_steps=self.total_steps,
            warmup_steps=self.warmup_steps,
            decay_type=self.decay_type,
            linear_end=self.linear_end,
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class TraceSGD(keras.optimizers.Optimizer):
    """SGD with optax's trace momentum: m = momentum * m + g; w -= lr * m.

    `momentum_dtype="bfloat16"` stores the trace in bfloat16 (vit_jax's accumulator_dtype,
    half the optimizer memory). The decay is taken in the trace's own dtype and the gradient
    added in float32, as optax's `trace` does (its `decay * t` keeps t's dtype): decaying a
    float32 copy instead drifts from optax by about 5e-3 relative within 8 steps. Weight decay,
    when given, is Keras' decoupled decay (w -= lr * wd * w before the update).
    """

    def __init__(
        self,
        learning_rate=0.01,
        momentum=0.9,
        momentum_dtype="float32",
        weight_decay=None,
        name="trace_sgd",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, name=name, **kwargs)
        if not 0.0 <= float(momentum) < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}.")
        if momentum_dtype not in MOMENTUM_DTYPES:
            raise ValueError(
                f"momentum_dtype must be one of {', '.join(MOMENTUM_DTYPES)}, got {momentum_dtype!r}."
            )
        self.momentum = float(momentum)
        self.momentum_dtype = momentum_dtype

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.traces = [
            self.add_variable(
                shape=v.shape,
                dtype=self.momentum_dtype,
                initializer="zeros",
                name=f"{_variable_name(v)}_trace",
            )
            for v in variables
        ]

    def update_step(self, gradient, variable, learning_rate):
        trace = self.traces[self._get_variable_index(variable)]
        decayed = ops.multiply(trace, ops.cast(self.momentum, trace.dtype))
        new_trace = ops.cast(gradient, "float32") + ops.cast(decayed, "float32")
        self.assign(trace, ops.cast(new_trace, trace.dtype))
        step = ops.cast(learning_rate, "float32") * new_trace
        self.assign_sub(variable, ops.cast(step, variable.dtype))

    def get_config(self):
        config = super().get_config()
        config.update({"momentum": self.momentum, "momentum_dtype": self.momentum_dtype})
        return config


def _variable_name(variable):
    return str(getattr(variable, "path", variable.name)).replace("/", "_").replace(":", "_")


def _no_aggregation(grads_and_vars):
    return list(grads_and_vars)


def make_optimizer(
    name,
    learning_rate,
    *,
    momentum=0.9,
    momentum_dtype="float32",
    beta_1=0.9,
    beta_2=0.999,
    weight_decay=0.0,
    loss_scaling=False,
):
    """An optimizer that applies gradients the Trainer has already all-reduced and clipped.

    "sgd": `TraceSGD` (the paper's fine-tuning; optax's momentum). "adam": Adam; with weight
    decay it is decoupled (AdamW: w -= lr * wd * w each step), which is what
    flax.optim.Adam's `weight_decay`, used for the paper's pre-training, does. Biases and
    norms are decayed too, as there. `loss_scaling` wraps it in a dynamic
    LossScaleOptimizer (float16).
    """
    if name == "sgd":
        inner = TraceSGD(
            learning_rate, momentum=momentum, momentum_dtype=momentum_dtype, weight_decay=weight_decay or None
        )
    elif name == "adam":
        if weight_decay:
            inner = keras.optimizers.AdamW(
                learning_rate, weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2, epsilon=1e-8
            )
        else:
            inner = keras.optimizers.Adam(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=1e-8)
    else:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}.")
    # Keras 3's TensorFlow optimizer all-reduces (SUM) the gradients it is given whenever it
    # runs in a replica context. Ours are reduced already; summing again would multiply them
    # by the replica count. If this hook ever disappears, fail loudly instead of training wrong.
    # (The jax engine's optimizer only ever sees the global gradient: nothing to switch off.)
    if keras.backend.backend() != "tensorflow":
        return keras.optimizers.LossScaleOptimizer(inner) if loss_scaling else inner
    if not hasattr(inner, "_all_reduce_sum_gradients"):
        raise RuntimeError(
            "This Keras version's optimizer has no _all_reduce_sum_gradients; "
            "the trainer cannot stop it from re-aggregating gradients."
        )
    inner._all_reduce_sum_gradients = _no_aggregation
    if loss_scaling:
        return keras.optimizers.LossScaleOptimizer(inner)
    return inner
