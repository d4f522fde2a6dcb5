"""The engines under a run (--engine): what distributes, compiles and takes the step.

Everything above the step is shared (config, data, evaluators, controller, actions, console,
banner, checkpoints' files and faults, exports); everything that differs between engines is an
`Engine`'s (trainers/engines/interface.py declares its members, one by one). An engine is one
module of this package that defines `ENGINE`, and one line of `REGISTRY` below:

* tf (trainers/engines/tf.py): tf.distribute's TPUStrategy, MirroredStrategy and
  MultiWorkerMirroredStrategy, the step in a tf.function per loop call (trainers/loop.py);
* jax (trainers/engines/jax.py): Keras on its JAX backend, the whole step one XLA program over a
  data-parallel mesh (trainers/jax_distribute.py, trainers/jax_loop.py).

Shared code asks the engine of a config (`get(config.engine)`, `check`, `strategy_of`) or of a
distribution (`of(strategy)`), never which engine it is. This module itself is the standard
library only: trainers/engine_env.py reads the registry's backends before Keras loads, and an
engine's module (with its framework) is imported when the engine is first asked for, so a tf
engine run never loads JAX.
"""

import dataclasses
import importlib


@dataclasses.dataclass(frozen=True)
class Registration:
    """What is known of an engine before its module loads (trainers/engine_env.py reads it)."""

    module: str  # the module that defines ENGINE, an Engine
    backend: str  # the Keras backend it runs on (KERAS_BACKEND, set before Keras loads)
    # XLA_FLAGS that show N CPU devices to the backend (with N in it), set before it loads; "": none
    cpu_devices_xla_flag: str = ""
    # Its step is one XLA program whatever --jit_compile says (then a field it fixes itself), for
    # what names a run of it without loading its module (benchmarks/shared.py).
    always_xla: bool = False


# --engine's values, the first the default. A new engine: its module, and a line here.
REGISTRY = {
    "tf": Registration("trainers.engines.tf", backend="tensorflow"),
    "jax": Registration(
        "trainers.engines.jax",
        backend="jax",
        cpu_devices_xla_flag="--xla_force_host_platform_device_count={}",
        always_xla=True,
    ),
}
ENGINES = tuple(REGISTRY)
DEFAULT = ENGINES[0]
# --jit_compile's values: XLA for the step, decided by the engine (Engine.use_jit).
JIT_COMPILE = ("auto", "true", "false")


def always_xla_note(name):
    """The banner's reason for XLA under an engine whose step is always one XLA program."""
    return f"the {name} engine compiles its whole step"


def get(name):
    """The Engine registered as `name` (its module imported on first use); KeyError if none is."""
    return importlib.import_module(REGISTRY[name].module).ENGINE


def of(strategy):
    """The engine a distribution belongs to: an engine's own distribution names it (`engine`), a
    tf.distribute strategy does not."""
    return get(getattr(strategy, "engine", DEFAULT))


def name_of(config):
    """The engine a config asks for (--engine)."""
    return config.engine


def check(config, training=False):
    """The engine a config asks for, after its own refusals (trainers.errors.UsageError): an
    unknown name, a backend this process did not start Keras on, and for a `training` config the
    flags it does not take."""
    name = name_of(config)
    if name not in REGISTRY:
        # Here only: the errors module loads the library (and Keras), which this module must not.
        from trainers.errors import UsageError

        raise UsageError(f"unknown --engine={name!r}: use one of {', '.join(ENGINES)}")
    engine = get(name)
    engine.check(config)
    if training:
        engine.check_training(config)
    return engine


def create_strategy(engine=DEFAULT, strategy="auto", *, tpu=None, cpu_devices=1, cpu_threads=0):
    """The distribution of `engine` for --strategy, --tpu, --cpu_devices and --cpu_threads."""
    return get(engine).create_strategy(strategy, tpu=tpu, cpu_devices=cpu_devices, cpu_threads=cpu_threads)


def strategy_of(config):
    """The run's distribution under its engine, from its config."""
    return create_strategy(
        name_of(config),
        config.strategy,
        tpu=config.tpu or None,
        cpu_devices=config.cpu_devices or 1,
        cpu_threads=config.cpu_threads,
    )
