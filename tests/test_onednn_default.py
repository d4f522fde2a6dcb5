"""keras_vit/onednn_default.py: TensorFlow's oneDNN kernels asked for on every x86 CPU (TensorFlow
picks them itself only on CPUs with AVX-512 VNNI, AVX-512 BF16 or AMX; on an AVX2 EPYC keras_vit's
training step ran 2.3x faster with them), unless the user chose, or TensorFlow already started."""

import subprocess
import sys

import pytest

from keras_vit import onednn_default


def test_unset_on_x86_before_tensorflow_it_asks_for_onednn():
    environ = {}
    assert onednn_default.ask_for_onednn(environ, modules={}, machine="x86_64")
    assert environ == {"TF_ENABLE_ONEDNN_OPTS": "1"}


def test_a_users_choice_tensorflow_already_started_or_another_cpu_leave_it_alone():
    for environ, modules, machine in [
        ({"TF_ENABLE_ONEDNN_OPTS": "0"}, {}, "x86_64"),  # switched off by the user: stays off
        ({}, {"tensorflow": object()}, "x86_64"),  # read already: setting it now would be a lie
        ({}, {}, "aarch64"),  # ARM builds: other kernels, nothing measured
    ]:
        before = dict(environ)
        assert not onednn_default.ask_for_onednn(environ, modules=modules, machine=machine)
        assert environ == before


@pytest.mark.slow  # a fresh interpreter importing TensorFlow: about 6 s
def test_importing_keras_vit_first_gives_tensorflow_its_onednn_kernels():
    """The whole path in a fresh interpreter (the variable is read once per process): a user's
    program that imports keras_vit, then asks TensorFlow."""
    code = (
        "import os; os.environ.pop('TF_ENABLE_ONEDNN_OPTS', None)\n"
        "import keras_vit\n"
        "from tensorflow.python.util import _pywrap_util_port\n"
        "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), _pywrap_util_port.IsMklEnabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "True"]
