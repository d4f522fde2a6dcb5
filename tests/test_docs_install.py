"""docs/install.md's blocks, and every `pip install` command of the docs (README.md,
docs/guides/data.md, deploy.md, benchmarks.md): each installs this package's real extras.
"""

import importlib.util
import os
import re
import signal
import subprocess
import sys

import pytest
from docs_standins import (
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    unrunnable,
)
from readme_blocks import ROOT, split_command

from keras_vit import _clash


def test_pip_installs_name_real_extras():
    reason = "installs from the package registry"
    commands = [
        *unrunnable("install", reason).commands,
        *unrunnable("install-from-clone", reason).commands,
        # The first command of these blocks; their tests run the rest.
        block("benchmarks-cpu").commands[0],
        block("benchmarks-gpu").commands[0],
        block("tfds").commands[0],
        block("export").commands[0],
    ]
    assert all(command.startswith("pip install ") for command in commands), commands
    setup = open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read()
    name = re.search(r"name=\"([^\"]+)\"", setup).group(1)
    assert name == "keras-vision-transformer"  # not "keras-vit": an unrelated project's name
    # Other packages a command of the docs installs beside ours, and why.
    others = {"jax[cuda13]": "JAX's CUDA build, for benchmarks.accelerator on a GPU"}
    for command in commands:
        _, argv = split_command(command)
        target = argv[-1]
        assert target.split("[")[0] in (name, "."), command
        packages = [a for a in argv[2:-1] if not a.startswith("-") and a != target]
        assert set(packages) <= set(others), command
        for extra in re.findall(r"\[(\w+)\]", target):
            assert re.search(rf"[\"']{extra}[\"']\s*:", setup), f"setup.py has no [{extra}] extra"


def test_no_backend_sample():
    # Install's sample is the line `import keras_vit` prints (tests/test_packaging.py runs it in a
    # fresh environment without the backend).
    from keras_vit import startup

    assert block("no-backend").text.strip() == startup.no_backend_message("jax", {"KERAS_BACKEND": "jax"}, {})


def test_clash_fix_commands():
    # The install page's fix is the one the clash message prints (tests/test_clash.py triggers it).
    fix = unrunnable("clash-fix", "changes the installed packages").commands
    said = _clash.message("/site-packages/keras_vit", ["vit.py"])
    assert len(fix) == 2 and all(f"`{command}`" in said for command in fix), (fix, said)


@pytest.mark.slow  # a fresh interpreter importing TensorFlow, timm and triton: about 10 s
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or importlib.util.find_spec("triton") is None,
    reason="triton is not installed",
)
def test_timm_after_keras_vit_runs():
    """The page's program as a user runs it, in a fresh interpreter: `import timm` after keras_vit
    died of SIGSEGV before keras_vit loaded triton's library first (keras_vit/triton_first.py)."""
    code = block("timm-after-keras-vit").text.rstrip() + "\nprint(model.name, type(peer).__name__)\n"
    environ = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ)
    assert done.returncode != -signal.SIGSEGV, "the page's program crashed"
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["vit_ti_16", "VisionTransformer"]
