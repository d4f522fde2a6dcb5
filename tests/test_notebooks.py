"""Every colab/ notebook runs top to bottom, offline, with SMALL on (nbclient, a real kernel).

The notebooks read TFDS data from $TFDS_DATA_DIR, which here is a data_dir prepared offline by
the real TFDS builders (../shared/tools/fake_tfds.py); photos and digits ship with
scikit-learn, and the SMALL models start from random weights, so nothing is downloaded.
"""

import os

import nbformat
import pytest
from nbclient import NotebookClient
from trainer_cli import make_fake_tfds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLAB = os.path.join(ROOT, "colab")
NOTEBOOKS = ["quickstart.ipynb", "finetune.ipynb", "fewshot.ipynb", "inspect.ipynb"]
# Set after the notebook's own switches, as a user would edit them: tiny models, no server.
OVERRIDES = "SMALL = True\nSHOW_TENSORBOARD = False"


def _read(name):
    return nbformat.read(os.path.join(COLAB, name), as_version=4)


def test_the_notebooks_are_the_ones_in_colab():
    assert sorted(n for n in os.listdir(COLAB) if n.endswith(".ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_saved_without_outputs_and_with_a_badge_and_a_switch(name):
    notebook = _read(name)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not cell.outputs and cell.execution_count is None for cell in code)
    assert (
        f"colab.research.google.com/github/keras-vit/keras-vit/blob/main/colab/{name}"
        in notebook.cells[0].source
    )
    assert "parameters" in code[0].metadata.get("tags", []) and "SMALL = None" in code[0].source
    assert not any("def " in cell.source for cell in code)  # the package's code, not a copy


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tfds")
    make_fake_tfds(path, "oxford_iiit_pet", per_class=3, test_per_class=1)
    make_fake_tfds(path, "cifar10", per_class=3, test_per_class=2)
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_notebook_runs_top_to_bottom(name, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", data_dir)
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))  # no cached download is used
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    notebook = _read(name)
    notebook.cells.insert(2, nbformat.v4.new_code_cell(OVERRIDES))
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pictures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pictures) >= {"quickstart.ipynb": 1, "finetune.ipynb": 1, "fewshot.ipynb": 1}.get(name, 4)
