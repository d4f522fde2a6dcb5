"""What the engines' own checks share: the Keras backend a process started on."""

import keras

from trainers.engines import REGISTRY
from trainers.errors import UsageError


def check_backend(name):
    """UsageError unless this process started Keras on the backend the engine `name` runs on."""
    wanted, backend = REGISTRY[name].backend, keras.backend.backend()
    if wanted != backend:
        raise UsageError(
            f"--engine={name} runs Keras on its {wanted} backend, but this process "
            f"started Keras on {backend}: pass --engine={name} on the command line, or set "
            f"KERAS_BACKEND={wanted} before importing keras or trainers"
        )
