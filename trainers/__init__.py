"""The keras-vit trainers: tf.distribute fine-tuning, pre-training and few-shot probes.

They need TensorFlow and TFDS, which `pip install keras-vit` (the library alone) does not bring,
and they run Keras on its TensorFlow backend whatever KERAS_BACKEND says: they select it here,
before anything imports Keras (TensorFlow's import does), while the library itself runs on any
backend.

TensorFlow's start-up lines are hidden unless the command line has --verbose
(trainers/console.py).
"""

import os
import sys

if "keras" not in sys.modules:
    os.environ["KERAS_BACKEND"] = "tensorflow"
elif sys.modules["keras"].backend.backend() != "tensorflow":
    raise ImportError(
        f"the trainers run on Keras' TensorFlow backend, and Keras was already imported with "
        f"{sys.modules['keras'].backend.backend()!r}: import trainers before keras, or set "
        "KERAS_BACKEND=tensorflow"
    )

from trainers import console, reproducible  # noqa: E402  (import nothing from TensorFlow)

if reproducible.is_pinned_command(getattr(sys, "orig_argv", ())):
    # The demo's table is the same on every x86-64 CPU only with these set before TensorFlow
    # loads (trainers/reproducible.py).
    reproducible.pin_environment()

_VERBOSE = console.verbose_requested(sys.argv)
if not _VERBOSE:
    # TensorFlow's runtime log lines (XLA service, tf.data notes) below errors stay hidden too.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

try:
    with console.native_stderr_hidden(hide=not _VERBOSE and "tensorflow" not in sys.modules):
        import tensorflow  # noqa: F401
except ImportError as error:  # the library was installed without the [train] extra
    raise ImportError('the trainers need TensorFlow and TFDS: pip install "keras-vit[train]"') from error
