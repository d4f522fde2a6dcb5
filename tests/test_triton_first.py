"""keras_vit/triton_first.py: triton's library loaded before TensorFlow, so that a program that
imports keras_vit and then PyTorch's compiler (timm, torch.compile) does not die of a segmentation
fault (TensorFlow's LLVM made global by its RTLD_GLOBAL load, tensorflow/tensorflow#124205)."""

import importlib.util
import os
import signal
import subprocess
import sys
import types

import pytest

from keras_vit import triton_first


def installed(tmp_path, *, with_library=True, with_tensorflow=True):
    """A find_spec that sees a triton package in `tmp_path` (with or without its library) and
    TensorFlow where asked."""
    package = tmp_path / "triton"
    (package / "_C").mkdir(parents=True)
    if with_library:
        (package / "_C" / "libtriton.so").write_bytes(b"")
    specs = {"triton": types.SimpleNamespace(submodule_search_locations=[str(package)])}
    if with_tensorflow:
        specs["tensorflow"] = types.SimpleNamespace(submodule_search_locations=["tf"])
    return specs.get


def test_on_linux_before_tensorflow_it_loads_tritons_library_locally(tmp_path):
    loaded = []
    assert triton_first.load_before_tensorflow(
        modules={}, platform="linux", find_spec=installed(tmp_path), load=loaded.append
    )
    assert loaded == [str(tmp_path / "triton" / "_C" / "libtriton.so")]


def refused(name):
    raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def test_nothing_is_loaded_where_it_is_too_late_not_needed_or_not_there(tmp_path):
    cases = [
        ({}, "linux", installed(tmp_path / "f"), True),  # a command of ours: it imports no triton
        ({"tensorflow": object()}, "linux", installed(tmp_path / "a")),  # TensorFlow's LLVM won already
        ({"triton": object()}, "linux", installed(tmp_path / "b")),  # triton first: nothing to do
        ({}, "darwin", installed(tmp_path / "c")),  # no RTLD_GLOBAL clash measured there
        ({}, "linux", installed(tmp_path / "d", with_tensorflow=False)),  # no TensorFlow to clash with
        ({}, "linux", installed(tmp_path / "e", with_library=False)),  # a triton without its library
        ({}, "linux", {}.get),  # no triton
        ({}, "linux", refused),  # an import hook that refuses TensorFlow, as if not installed
    ]
    for modules, platform, find_spec, *command in cases:
        loaded = []
        assert not triton_first.load_before_tensorflow(
            bool(command), modules, platform, find_spec, load=loaded.append
        )
        assert loaded == []


def test_a_library_that_does_not_load_leaves_the_import_going(tmp_path):
    def refuse(path):
        raise OSError(f"{path}: cannot open shared object file")

    assert not triton_first.load_before_tensorflow(False, {}, "linux", installed(tmp_path), load=refuse)


@pytest.mark.slow  # a fresh interpreter importing TensorFlow and triton: about 8 s
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or importlib.util.find_spec("triton") is None,
    reason="triton is not installed",
)
def test_a_program_importing_keras_vit_then_pytorchs_compiler_runs_both():
    """The crash itself, in a fresh interpreter: without the early load this dies of SIGSEGV in
    `import triton` (TensorFlow 2.21, triton 3.8); with it, XLA-compiled TensorFlow and triton's
    compiler both work."""
    code = (
        "import keras_vit, tensorflow as tf\n"
        "double = tf.function(lambda x: 2.0 * x, jit_compile=True)\n"
        "import triton\n"
        "from triton._C.libtriton import getenv\n"
        "print(float(double(tf.constant(1.5))), getenv('KERAS_VIT_UNSET_VARIABLE'))\n"
    )
    environ = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ)
    assert done.returncode != -signal.SIGSEGV, "import triton after keras_vit crashed"
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["3.0", "None"]
