"""keras_vit/_clash.py: a keras_vit package mixed with the index's unrelated `keras-vit` stops
with one line, whichever of the two was installed last.

Each case copies our package into tmp_path, writes the other project's files into the copy the
way pip would leave them, and runs a fresh interpreter there (its working directory comes first
on sys.path, before this checkout's editable install).
"""

import os
import shutil
import subprocess
import sys

import pytest

import keras_vit
from keras_vit import _clash

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.dirname(os.path.abspath(keras_vit.__file__))

# What the other project's wheel holds, as far as it matters here: __init__.py with only a
# version, and layers.py, which must never be reached (it stands in for code that fails deep
# inside, or worse, runs).
THEIR_FILES = {
    "__init__.py": '__version__ = "1.0.0"\n',
    "layers.py": 'raise RuntimeError("the other project\'s layers.py was imported")\n',
    "config.py": "BASE = {}\n",
    "utils.py": "def helper():\n    return None\n",
    "vit.py": "def ViT_B16():\n    return None\n",
}


def _mixed_package(root, theirs_last):
    """root/keras_vit: ours, with the other project's files installed over it or under it."""
    target = root / "keras_vit"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in THEIR_FILES.items():
        if theirs_last or not (target / name).exists():  # installed first: ours overwrote these
            (target / name).write_text(text, encoding="utf-8")
    return target


def _run(cwd, *args, backend=None):
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONDONTWRITEBYTECODE": "1"}
    if backend:
        env["KERAS_BACKEND"] = backend
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _assert_refused(proc, package_dir):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert len(lines) == 1, proc.stderr[-2000:]  # one line, no traceback
    assert str(package_dir) in lines[0]
    assert "config.py, utils.py, vit.py" in lines[0] and "'keras-vit'" in lines[0]
    assert "pip uninstall -y keras-vit" in lines[0]
    assert "pip install --force-reinstall --no-deps keras-vision-transformer" in lines[0]


def test_our_package_has_none_of_their_files():
    assert _clash.foreign_files(PACKAGE) == []


def test_ours_installed_over_theirs_stops_import(tmp_path):
    package = _mixed_package(tmp_path, theirs_last=False)
    assert "from keras_vit import _clash" in (package / "__init__.py").read_text(encoding="utf-8")  # ours
    _assert_refused(_run(tmp_path, "-c", "import keras_vit"), package)


@pytest.mark.parametrize(
    "args, backend",
    [
        # The commands stop before Keras starts TensorFlow on the default backend.
        (("-m", "keras_vit.predict", "cat.jpg"), None),
        (("-m", "keras_vit.export", "--help"), None),
        (("-m", "keras_vit.visualize", "--help"), None),
        (("-m", "keras_vit.convert", "a.npz", "b.npz"), None),
        # Library modules that import Keras first (on JAX here: quiet, so one line is all).
        (("-c", "import keras_vit.models"), "jax"),
        (("-c", "from keras_vit import weights"), "jax"),
    ],
)
def test_theirs_installed_over_ours_stops_our_modules(tmp_path, args, backend):
    package = _mixed_package(tmp_path, theirs_last=True)
    # Their __init__.py answers a bare import; it is the modules behind it that must refuse.
    assert _run(tmp_path, "-c", "import keras_vit; print(keras_vit.__version__)").stdout.strip() == "1.0.0"
    _assert_refused(_run(tmp_path, *args, backend=backend), package)


@pytest.mark.slow
def test_trainers_refuse_a_mixed_package(tmp_path):
    package = _mixed_package(tmp_path, theirs_last=True)
    _assert_refused(_run(tmp_path, "-m", "trainers.finetune", "--help"), package)
