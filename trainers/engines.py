"""The engine under a run (--engine): what distributes, compiles and takes the step.

Everything above the step is shared (config, data, evaluators, controller, actions, console,
banner, checkpoints' files and faults, exports). An engine supplies three things:

* its distribution: a tf.distribute strategy (tf) or a JaxStrategy (jax,
  trainers/jax_distribute.py), created from the same --strategy, --tpu and --cpu_devices;
* its Trainer: trainers/loop.py (tf) or trainers/jax_loop.py (jax), with one interface
  (train, evaluate, step, checkpoint_objects, before_save, after_restore);
* whether XLA is a choice (tf: --jit_compile) or always on (jax);
* its objectives besides classification (trainers/objectives.py, trainers/jax_objectives.py).

tf is the default: TPUStrategy, MirroredStrategy and MultiWorkerMirroredStrategy as they were.
jax runs Keras on its JAX backend, which the process chose when it started (trainers/engine_env.py).
"""

import keras
import tensorflow as tf

from trainers import distribute, loop, objectives
from trainers.engine_env import BACKENDS
from trainers.errors import UsageError

# --engine's values: tf.distribute, or Keras on JAX under one XLA program (one backend each).
ENGINES = tuple(BACKENDS)
# --jit_compile's values (use_jit decides "auto").
JIT_COMPILE = ("auto", "true", "false")


def check(config):
    """UsageError when the engine cannot run in this process or with these flags."""
    engine = config.get("engine", "tf")
    if engine not in ENGINES:
        raise UsageError(f"unknown --engine={engine!r}: use one of {', '.join(ENGINES)}")
    backend = keras.backend.backend()
    if BACKENDS[engine] != backend:
        raise UsageError(
            f"--engine={engine} runs Keras on its {BACKENDS[engine]} backend, but this process "
            f"started Keras on {backend}: pass --engine={engine} on the command line, or set "
            f"KERAS_BACKEND={BACKENDS[engine]} before importing keras or trainers"
        )
    if engine == "jax" and config.get("mixed_precision") == "float16":
        raise UsageError(
            "--mixed_precision=float16 (loss scaling) is for --engine=tf; the jax engine's reduced "
            "precision is bfloat16: use --mixed_precision=bfloat16 or auto"
        )
    if engine == "jax" and config.get("jit_compile", "auto") == "false":
        raise UsageError("--engine=jax always compiles the step with XLA: leave --jit_compile at auto")


def create_strategy(engine="tf", strategy="auto", *, tpu=None, cpu_devices=1, cpu_threads=0):
    """The distribution of `engine` for --strategy, --tpu, --cpu_devices and --cpu_threads."""
    if engine == "jax":
        from trainers import jax_distribute  # JAX is imported by the jax engine only

        distribute.set_cpu_threads(cpu_threads)  # tf.data's CPU kernels
        return jax_distribute.create_strategy(strategy, tpu=tpu, cpu_devices=cpu_devices)
    return distribute.create_strategy(strategy, tpu=tpu, cpu_devices=cpu_devices, cpu_threads=cpu_threads)


def strategy_of(config):
    """The run's distribution under its engine, from its config."""
    return create_strategy(
        config.get("engine", "tf"),
        config.strategy,
        tpu=config.tpu or None,
        cpu_devices=config.cpu_devices or 1,
        cpu_threads=config.get("cpu_threads", 0),
    )


def trainer_class(strategy):
    """The Trainer of the engine `strategy` belongs to."""
    if is_jax(strategy):
        from trainers import jax_loop

        return jax_loop.Trainer
    return loop.Trainer


def make_objective(strategy, name, target, model):
    """The engine's objective `name` (--objective) with masked patch prediction's `target`
    (--masked_target), for `model`; None for classification."""
    if is_jax(strategy) and name == "masked_patch":
        from trainers import jax_objectives

        # The step holds every replica's rows: the objective keeps each replica's replacements apart.
        return jax_objectives.MaskedPatch(model, target, strategy.num_replicas_in_sync)
    return objectives.make_objective(name, target, model)


def is_jax(strategy):
    return getattr(strategy, "engine", "tf") == "jax"


def name(strategy):
    return "jax" if is_jax(strategy) else "tf"


def use_jit(setting, strategy):
    """XLA for the per-replica step. "auto": on GPUs only. TPUStrategy compiles the whole step
    with XLA anyway. On CPU, "true" works for any number of replicas (loop.Trainer), but the
    step measured slower under XLA than without (docs/guides/benchmarks.md), so "auto" leaves
    it off there."""
    if is_jax(strategy):
        return True  # the jax engine always compiles its step
    if setting != "auto":
        return setting == "true"
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return False
    return distribute.all_gpus(distribute.worker_devices(strategy))
