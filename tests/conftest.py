"""Test-session set-up: the TensorFlow backend and two logical CPU devices.

Splitting the CPU must happen before TensorFlow initialises its devices, so it is done
here, at import, before any test module imports keras or tensorflow. Multi-replica code is
then testable in-process with MirroredStrategy(["/cpu:0", "/cpu:1"]).
"""

import os
import sys

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# KERAS_VIT_PROCESS_LOG=FILE counts the child processes and TensorFlow imports (tests/child_processes.py).
if os.environ.get("KERAS_VIT_PROCESS_LOG"):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import child_processes

    child_processes.install(os.environ["KERAS_VIT_PROCESS_LOG"])

import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

# The repository root, so tests import keras_vit, trainers and configs from the work tree.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The stand-ins that several tests of the docs' pages use (tests/test_docs_*.py), one per session.
from docs_standins import default_tfds, registry_cache, tfds_dir  # noqa: E402, F401

# The tests' shared models and data (tests/fixtures.py); its pytest fixtures are exposed here.
from fixtures import (  # noqa: E402, F401
    fake_tfds_dir,
    multi_label_tfds_dir,
    session_artefact,
    shared_fake_tfds,
)

# The library on JAX without TensorFlow: one child per test run for the three files that check it.
from jax_without_tensorflow import jax_without_tensorflow  # noqa: E402, F401


@pytest.fixture(scope="session")
def cifar10_data_dir(tmp_path_factory):
    """fake_tfds_dir's cifar10 (20 train and 10 test images per class), for the trainer tests that
    read it (each one copies it before changing anything in it)."""
    return shared_fake_tfds("cifar10", tmp_path_factory)


@pytest.fixture(scope="session")
def cifar_reference(cifar10_data_dir, tmp_path_factory):
    """(workdir, CompletedProcess) of one uninterrupted trainer_cli.CIFAR_RUN on cifar10_data_dir,
    made once per test run: the results every resumed, recovered or re-distributed run of it must
    end with. Tests copy the workdir before changing it."""
    from trainer_cli import CIFAR_RUN, load_process, run_cli, save_process

    def make(folder):
        workdir = os.path.join(folder, "run")
        proc = run_cli("finetune", CIFAR_RUN + [f"--data_dir={cifar10_data_dir}", f"--workdir={workdir}"])
        assert proc.returncode == 0, proc.stderr[-3000:]
        save_process(proc, folder)

    folder = session_artefact(tmp_path_factory, "cifar_reference", make)
    return os.path.join(folder, "run"), load_process(folder)
