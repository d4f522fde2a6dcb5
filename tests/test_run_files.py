"""keras_vit.run_files: the names of the files a trainer's run leaves, which keras_vit reads back."""

import os

import finetuned_runs
import pytest

from keras_vit import run_files, weights


@pytest.fixture(scope="module")
def digits_workdir(tmp_path_factory):
    return finetuned_runs.digits_workdir(tmp_path_factory)


@pytest.mark.slow
def test_a_finished_run_leaves_the_files_keras_vit_looks_for(digits_workdir):
    """Catches the trainers writing a file under another name than the one `--workdir` and
    `weights=WORKDIR` look for (the run would then load as unfinished, or not at all)."""
    written = set(os.listdir(digits_workdir))
    assert {run_files.CONFIG_FILE, run_files.MODEL_FILE, run_files.CLASS_NAMES_FILE} <= written
    assert weights.run_weights_file(digits_workdir) == os.path.join(digits_workdir, run_files.MODEL_FILE)
