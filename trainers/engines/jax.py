"""The jax engine (--engine=jax): Keras on its JAX backend, the whole step one XLA program.

A data-parallel mesh over every device of every process (trainers/jax_distribute.py), fed by the
same tf.data pipelines; the Trainer of trainers/jax_loop.py (`jax.jit` of the whole step, the
micro-batches in a `lax.scan`); the objectives of trainers/objectives.py; several
processes agree on a SIGTERM's stop with one all-gathered flag per loop boundary. Its module
imports JAX: it loads only for a run on this engine (trainers/engines/__init__.py).
"""

import jax
import jax.numpy as jnp

from trainers import distribute, jax_distribute, jax_loop, objectives
from trainers.engines import always_xla_note, common
from trainers.errors import UsageError


class JaxEngine:
    name = "jax"
    packages = ("tensorflow", "keras", "jax")
    # The step is always one XLA program: --jit_compile stays at auto.
    fixed_fields = ("jit_compile",)
    # XLA runs the step on threads of its own; --cpu_threads sets tf.data's CPU kernels.
    cpu_threads_scope = " for tf.data"

    def check(self, config):
        common.check_backend(self.name)

    def check_training(self, config):
        if config.mixed_precision == "float16":
            raise UsageError(
                "--mixed_precision=float16 (loss scaling) is for --engine=tf; the jax engine's reduced "
                "precision is bfloat16: use --mixed_precision=bfloat16 or auto"
            )
        if config.jit_compile == "false":
            raise UsageError("--engine=jax always compiles the step with XLA: leave --jit_compile at auto")

    def create_strategy(self, strategy, *, tpu=None, cpu_devices=1, cpu_threads=0):
        distribute.set_cpu_threads(cpu_threads)  # tf.data's CPU kernels
        return jax_distribute.create_jax_strategy(strategy, tpu=tpu, cpu_devices=cpu_devices)

    def describe(self, strategy):
        return strategy.describe()

    def is_chief(self, strategy):
        return strategy.is_chief

    def task_id(self, strategy):
        return strategy.task_id

    def processes(self, strategy):
        return strategy.processes()

    def stop_coordinator(self, strategy):
        return _Processes(strategy) if strategy.process_count > 1 else None

    def gpu_memory_limit(self, strategy):
        return strategy.memory_limit()

    def gpu_compute_capabilities(self, strategy):
        found = [getattr(d, "compute_capability", "") for d in strategy.local_devices]
        return [tuple(int(n) for n in c.split(".")[:2]) for c in found if c]

    def use_jit(self, setting, strategy, *, precision, hidden_size, num_patches):
        return True, always_xla_note(self.name)

    def kernels(self):
        return "not pinned (the jax engine's step runs XLA's CPU code)"

    def trainer(self, **settings):
        return jax_loop.JaxTrainer(**settings)

    def objective(self, name, target, model, strategy):
        # The step holds every replica's rows: masked patch prediction keeps each replica's
        # replacements apart.
        return objectives.make_objective(name, target, model, strategy.num_replicas_in_sync)

    def feature_step(self, represent, strategy):
        return _JaxFeatureStep(represent, strategy)


class _Processes:
    """Several JAX processes: one flag all-gathered at every loop boundary (every process calls
    `saved_checkpoint` at each boundary, so the collectives pair up); `run` as in
    trainers/preemption.py's handler of several tf workers."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.run = None

    def saved_checkpoint(self):
        if not self.strategy.any_process(self.run.signalled):
            return False
        self.run.save()
        return True


class _JaxFeatureStep:
    """The jax engine's feature step: the representation as one compiled program over the mesh's
    batches (trainers/jax_distribute.py Feed), the weights replicated on its devices; each part
    fetched whole to every host, as the tf path's gather does."""

    def __init__(self, represent, strategy):
        self.represent, self.strategy = represent, strategy

        def forward(state, images):
            trainable, non_trainable = state
            out, _ = represent.stateless_call(trainable, non_trainable, images, training=False)
            return out.astype(jnp.float32)

        self._forward = jax.jit(forward)
        self._state = None

    def refresh(self):
        """Replicates the model's current weights onto the mesh (once per pass over a split)."""
        self._state = tuple(
            [self.strategy.put_replicated(v.value) for v in variables]
            for variables in (self.represent.trainable_variables, self.represent.non_trainable_variables)
        )

    def __call__(self, batch):
        images, labels, weights = batch
        features = self._forward(self._state, images)
        return tuple(self.strategy.fetch(t) for t in (features, labels, weights))


ENGINE = JaxEngine()
