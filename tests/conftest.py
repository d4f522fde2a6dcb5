"""Test-session set-up: the TensorFlow backend and two logical CPU devices.

Splitting the CPU must happen before TensorFlow initialises its devices, so it is done
here, at import, before any test module imports keras or tensorflow. Multi-replica code is
then testable in-process with MirroredStrategy(["/cpu:0", "/cpu:1"]).
"""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

# The repository root, so tests import keras_vit, trainers and configs from the work tree.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
