"""The session data of the trainer tests that several files share: cifar10 and one reference run.

A pytest plugin of tests/conftest.py (its fixtures are every test's).
"""

import os

import pytest
from fixtures import session_artefact, shared_fake_tfds


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
