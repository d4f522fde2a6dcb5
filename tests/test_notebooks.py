"""Every colab/ notebook runs top to bottom, offline, with SMALL on (nbclient, a real kernel).

The notebooks read TFDS data from $TFDS_DATA_DIR, which here is a data_dir prepared offline by
the real TFDS builders (../shared/tools/fake_tfds.py); photos and digits ship with
scikit-learn, and the SMALL models start from random weights, so nothing is downloaded. Each
kernel is a process of its own, forked from tests/command_server.py's server of the notebooks'
environment, which imported TensorFlow and the trainers once for the four (each kernel imports
ipykernel itself, as it starts).
"""

import os

import command_server
import nbformat
import pytest
from jupyter_client.provisioning import local_provisioner
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


@pytest.fixture(scope="module")
def keras_home(tmp_path_factory):
    """An empty KERAS_HOME, so that no cached download is used; one for the four notebooks, as
    Keras reads it when imported: their kernels share one server."""
    return str(tmp_path_factory.mktemp("keras_home"))


def _forked_kernel(log_path):
    """jupyter_client's `launch_kernel` for Python's own kernel: the same command line, forked."""

    def launch(cmd, stdin=None, stdout=None, stderr=None, env=None, independent=False, cwd=None, **kwargs):
        assert cmd[1:3] == ["-m", command_server.KERNEL], cmd
        with open(log_path, "w") as log:  # the kernel's own output; the cells' goes to nbclient
            return command_server.start_process(
                command_server.KERNEL, cmd[3:], env, log, log, cwd=cwd or os.getcwd(), own_group=True
            )

    return launch


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_notebook_runs_top_to_bottom(name, data_dir, keras_home, tmp_path, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", data_dir)
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    monkeypatch.setenv("KERAS_HOME", keras_home)
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(local_provisioner, "launch_kernel", _forked_kernel(tmp_path / "kernel.log"))
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
