"""Which Keras backend a trainer process runs, decided before anything imports Keras.

The engine (--engine, trainers/engines/) fixes the backend: tf runs Keras on TensorFlow, jax on
JAX. Keras reads KERAS_BACKEND once, at its import, so a command's --engine is read here from
the command line, before TensorFlow (which imports Keras) loads. With --engine=jax and
--cpu_devices=N on a machine without accelerators, JAX is also told to show N CPU devices, which
it reads once, at its own import.

A program that imports the trainers as a library (not `python -m trainers.X`) keeps the backend
KERAS_BACKEND names when that is jax, so that it can run the JAX engine; anything else runs the
TensorFlow backend, as before. The standard library only: this runs before any other import.
"""

import os

from trainers.engines import DEFAULT, REGISTRY

ENGINE_FLAG = "--engine"
# Each registered engine's Keras backend (trainers/engines/__init__.py, the standard library only).
BACKENDS = {name: registration.backend for name, registration in REGISTRY.items()}


def _flag_value(argv, name):
    """The last value of --name=V or --name V in `argv`, or None."""
    value = None
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            value = arg.partition("=")[2]
        elif arg == name and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def command_module(orig_argv):
    """The module of `python -m MODULE ...`, or None."""
    for i, arg in enumerate(orig_argv):
        if arg == "-m" and i + 1 < len(orig_argv):
            return orig_argv[i + 1]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
    return None


def _is_trainer_command(orig_argv):
    """`python -m trainers.NAME ...`: the command line is the trainer's flags."""
    return (command_module(orig_argv) or "").startswith("trainers.")


def requested_engine(argv, orig_argv, environ):
    """The engine this process is for: the command's --engine, else (a library user) jax when
    KERAS_BACKEND says jax, else tf."""
    if _is_trainer_command(orig_argv):
        return _flag_value(argv, ENGINE_FLAG) or DEFAULT
    backend = environ.get("KERAS_BACKEND", "").strip()
    return next((name for name, found in BACKENDS.items() if found == backend), DEFAULT)


def prepare(argv, orig_argv, environ=os.environ):
    """Sets KERAS_BACKEND (and JAX's CPU device count) for the engine; returns the engine."""
    engine = requested_engine(argv, orig_argv, environ)
    registration = REGISTRY.get(engine, REGISTRY[DEFAULT])
    environ["KERAS_BACKEND"] = registration.backend
    count = _flag_value(argv, "--cpu_devices")
    if registration.cpu_devices_xla_flag and count and count.isdigit() and int(count) > 1:
        # Read by XLA when the backend starts; a device count set by hand is left alone.
        flags = environ.get("XLA_FLAGS", "")
        if registration.cpu_devices_xla_flag.partition("=")[0] not in flags:
            environ["XLA_FLAGS"] = f"{flags} {registration.cpu_devices_xla_flag.format(count)}".strip()
    return engine
