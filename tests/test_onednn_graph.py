"""keras_vit.onednn_graph: whether a call being traced will run on TensorFlow's oneDNN CPU kernels,
which decides whether keras_vit's CPU inference paths change the graph."""

import platform
import sys

import pytest
import tensorflow as tf

from keras_vit import onednn_default, onednn_graph


@pytest.mark.parametrize(
    "machine, flag, expected",
    [
        ("x86_64", None, True),  # keras_vit asks for them on x86 (keras_vit/onednn_default.py)
        ("AMD64", "1", True),
        ("x86_64", "0", False),  # the user turned oneDNN off
        ("x86_64", "false", False),
        ("aarch64", None, False),  # ARM builds run other kernels, where nothing was measured
    ],
)
def test_before_tensorflow_starts_onednn_is_on_for_x86_unless_switched_off(
    monkeypatch, machine, flag, expected
):
    monkeypatch.delitem(sys.modules, "tensorflow")  # put back after the test
    monkeypatch.setattr(onednn_default.platform, "machine", lambda: machine)
    if flag is None:
        monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    else:
        monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", flag)
    assert onednn_graph.onednn_on() is expected


def test_once_tensorflow_started_its_own_answer_counts(monkeypatch):
    """TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, at its import, and by default runs oneDNN's
    kernels only on CPUs with AVX-512 VNNI, AVX-512 BF16 or AMX: a variable changed afterwards, or
    a process that imported TensorFlow before keras_vit on an AVX2 CPU, must not make keras_vit
    build a graph for kernels that will not run."""
    from tensorflow.python.util import _pywrap_util_port

    started = _pywrap_util_port.IsMklEnabled()
    # The tests' process asked for them before TensorFlow started (tests/conftest.py), as keras_vit does.
    assert started is (platform.machine().lower() in onednn_graph.X86)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    assert onednn_graph.onednn_on() is started
    # As TensorFlow answers where it started without them (an AVX2 CPU, TensorFlow imported
    # before keras_vit): the variable set afterwards does not turn them on.
    monkeypatch.setattr(_pywrap_util_port, "IsMklEnabled", lambda: False)
    assert onednn_graph.onednn_on() is False
    # "0" stays keras_vit's switch for its oneDNN paths, read at each trace.
    monkeypatch.setattr(_pywrap_util_port, "IsMklEnabled", lambda: True)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert onednn_graph.onednn_on() is False


def test_only_a_trace_without_xla_counts():
    seen = []
    traced = tf.function(lambda x: seen.append(onednn_graph.traced_without_xla()) or x)
    traced.get_concrete_function(tf.TensorSpec((2,)))
    tf.function(traced.python_function, jit_compile=True).get_concrete_function(tf.TensorSpec((2,)))
    assert seen == [True, False]  # XLA compiles the graph: TensorFlow's kernels would not run it
    assert onednn_graph.traced_without_xla() is False  # eager: no graph at all


def test_a_gpu_means_no_onednn(monkeypatch):
    monkeypatch.setattr(onednn_default.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    seen = []

    def trace(x):
        seen.append(onednn_graph.runs_on_onednn())
        return x

    for gpu in (False, True):
        monkeypatch.setattr(onednn_graph, "has_gpu", lambda gpu=gpu: gpu)
        tf.function(trace).get_concrete_function(tf.TensorSpec((2,)))
    assert seen == [True, False]


@pytest.mark.parametrize(
    "value, expected", [(None, True), ("1", True), (" 0 ", False), ("False", False), ("off", False)]
)
def test_a_path_is_on_unless_its_switch_says_0_false_or_off(monkeypatch, value, expected):
    # Catches a switch read as on when set to "off" or with spaces, or off when unset.
    if value is None:
        monkeypatch.delenv("KERAS_VIT_SOME_PATH", raising=False)
    else:
        monkeypatch.setenv("KERAS_VIT_SOME_PATH", value)
    assert onednn_graph.switched_on("KERAS_VIT_SOME_PATH") is expected
