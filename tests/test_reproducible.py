"""trainers.reproducible: which command pins the CPU kernels, and how a process reports them;
the exactly rounded rsqrt and softmax the pinned processes compute with."""

import platform

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers import reproducible


@pytest.mark.parametrize(
    "argv,pinned",
    [
        (["python", "-m", "trainers.demo", "--workdir=runs/demo"], True),
        ([".venv/bin/python", "-u", "-m", "trainers.demo"], True),
        (["python", "-m", "trainers.finetune", "--dataset=digits"], False),
        (["python", "-m", "pytest", "tests/test_demo.py", "-k", "trainers.demo"], False),
        (["python", "-c", "import trainers.demo"], False),
        ([], False),
    ],
)
def test_only_the_demo_command_is_pinned(argv, pinned):
    assert reproducible.is_pinned_command(argv) is pinned


PINNED = (
    "pinned (TF_ENABLE_ONEDNN_OPTS=0, ONEDNN_MAX_CPU_ISA=AVX2, KERAS_VIT_IEEE_MATH=1, "
    "OPENBLAS_CORETYPE=Haswell)"
)


def test_describe_names_every_variable_that_differs(monkeypatch):
    monkeypatch.setattr(reproducible, "_onednn_ops_on", lambda: False)
    monkeypatch.setattr(reproducible, "math_pinned", lambda: True)
    for name, value in reproducible.ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    assert reproducible.describe() == PINNED
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert reproducible.describe() == "not pinned (ONEDNN_MAX_CPU_ISA=(unset))"
    # TensorFlow decided on its oneDNN ops when it loaded: the variable set later does not count.
    monkeypatch.setattr(reproducible, "_onednn_ops_on", lambda: True)
    assert reproducible.describe() == "not pinned (ONEDNN_MAX_CPU_ISA=(unset), oneDNN custom ops on)"
    # The variable asks the trainers to replace TensorFlow's functions when they load.
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setattr(reproducible, "_onednn_ops_on", lambda: False)
    monkeypatch.setattr(reproducible, "math_pinned", lambda: False)
    assert reproducible.describe() == "not pinned (TensorFlow's rsqrt and softmax not replaced)"


@pytest.fixture
def pinned_math(monkeypatch):
    """pin_math in this process, undone after the test (other tests compute with TensorFlow's own)."""
    for module, name, _ in reproducible._REPLACED:
        monkeypatch.setattr(getattr(tf, module), name, getattr(getattr(tf, module), name))
    reproducible.pin_math()
    assert reproducible.math_pinned()


def _positive(size):
    return np.random.default_rng(0).uniform(1e-3, 10.0, size).astype(np.float32)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="Eigen's AVX code paths")
def test_tensorflows_own_rsqrt_is_an_approximation_whose_bits_are_the_cpus():
    """What the pin is for: TensorFlow's float32 rsqrt is RSQRTPS plus a Newton step, not the
    exactly rounded 1 / sqrt(x) (which IEEE 754 fixes on every CPU)."""
    x = _positive(10_000)
    assert np.mean(tf.math.rsqrt(x).numpy() != np.float32(1) / np.sqrt(x)) > 0.05


def test_pinned_rsqrt_and_softmax_are_exactly_rounded_through_keras(pinned_math):
    x = _positive(10_000)
    # Keras' TensorFlow backend (LayerNormalization, attention) calls the replaced functions.
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras.ops.rsqrt(x)), np.float32(1) / np.sqrt(x))
    logits = np.random.default_rng(1).normal(size=(8, 17)).astype(np.float32)
    shifted = tf.math.exp(logits - logits.max(axis=-1, keepdims=True)).numpy()
    expected = shifted / tf.reduce_sum(shifted, axis=-1, keepdims=True).numpy()
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras.ops.softmax(logits)), expected)
    np.testing.assert_allclose(expected.sum(-1), 1.0, rtol=1e-6)
    # And it differentiates like the kernel it replaces.
    variable = tf.Variable(logits)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.softmax(variable, axis=0) ** 2)
    with tf.GradientTape() as own:
        own_loss = tf.reduce_sum(tf.raw_ops.Softmax(logits=tf.transpose(variable)) ** 2)
    np.testing.assert_allclose(loss.numpy(), own_loss.numpy(), rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(loss, variable), own.gradient(own_loss, variable), atol=1e-6)
