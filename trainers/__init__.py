"""The keras_vit trainers: tf.distribute fine-tuning, pre-training and few-shot probes.

They need TensorFlow and TFDS, which `pip install keras-vision-transformer` (the library alone)
does not bring (tf.data feeds both engines). They run Keras on the backend of their engine
(--engine=tf: TensorFlow, the default; --engine=jax: JAX), selected here before anything imports
Keras (TensorFlow's import does), while the library itself runs on any backend.

TensorFlow's start-up lines are hidden unless the command line has --verbose
(keras_vit/startup.py).
"""

import os
import sys

from trainers import early_signals, engine_env  # the standard library only

# A SIGTERM or Ctrl-C while TensorFlow or JAX load is noted, for the command to act on at its start.
early_signals.catch(getattr(sys, "orig_argv", ()))
# The backend the engine runs (trainers/engine_env.py), chosen before anything imports Keras.
if "keras" not in sys.modules:
    engine_env.prepare(sys.argv, getattr(sys, "orig_argv", ()))
elif sys.modules["keras"].backend.backend() not in engine_env.BACKENDS.values():
    raise ImportError(
        f"the trainers run on Keras' TensorFlow or JAX backend, and Keras was already imported with "
        f"{sys.modules['keras'].backend.backend()!r}: import trainers before keras, or set "
        "KERAS_BACKEND=tensorflow (the tf engine) or jax (the jax engine)"
    )

from trainers import reproducible  # noqa: E402  (the standard library only)

if reproducible.is_pinned_command(getattr(sys, "orig_argv", ())):
    # The demo's table is the same on every x86-64 CPU only with these set before TensorFlow
    # loads (trainers/reproducible.py).
    reproducible.pin_environment()

try:
    # First, before TensorFlow loads: refuses (SystemExit, one line) a keras_vit package mixed
    # with the files of the index's unrelated `keras-vit` (keras_vit/_clash.py). Our keras_vit
    # imports Keras and with it TensorFlow, its start-up lines hidden unless --verbose
    # (keras_vit/startup.py). On the JAX backend Keras does not import TensorFlow: it loads
    # here, as quietly.
    from keras_vit import _clash  # noqa: E402, F401, I001
    from keras_vit import startup  # noqa: E402, I001
    from trainers import console  # noqa: E402, I001

    with startup.native_stderr_hidden(hide=startup.quiet_start() and "tensorflow" not in sys.modules):
        import tensorflow  # noqa: E402, F401
except ImportError as error:  # the library was installed without the [train] extra
    if "tensorflow" in sys.modules:
        raise
    raise ImportError(
        'the trainers need TensorFlow and TFDS: pip install "keras-vision-transformer[train]"'
    ) from error

if os.environ.get(reproducible.IEEE_MATH) == "1":
    reproducible.pin_math()  # the demo's exactly rounded rsqrt and softmax (trainers/reproducible.py)

_VERBOSE = console.verbose_requested(sys.argv)
if not _VERBOSE:
    # TensorFlow's runtime log lines (XLA service, tf.data notes) below errors stay hidden too
    # (already set where keras_vit imported TensorFlow for a command; this covers the rest).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
