"""keras_vit/openvino_predict.py's choices, without Keras' OpenVINO backend: the precision each dtype
policy compiles at, when a graph is compiled again, how a `predict` call's steps come back, and
what an `evaluate` step computes from them. The compiled graphs themselves run in
tests/test_backends.py's OpenVINO child (its precision, `predict` and `evaluate` after
`set_weights`, the signal stack after models are freed)."""

import keras
import numpy as np
import pytest

from keras_vit import openvino_predict


class _Weight:
    def __init__(self):
        self.value = object()


class _Model:
    def __init__(self, policy="float32"):
        self.weights = [_Weight(), _Weight()]
        self.dtype_policy = keras.DTypePolicy(policy)


class _Compiled:
    """Stands in for an OpenVINO compiled model: the batch's row sums, and its shape as compiled."""

    def __init__(self, shape):
        self.shape = shape

    def __call__(self, x):
        assert x.shape == self.shape  # a graph of one shape runs that shape only

        class Result:
            def to_tuple(self):
                return (x.reshape(len(x), -1).sum(axis=1),)

        return Result()


@pytest.fixture
def compiles(monkeypatch):
    """The shapes compiled, in order."""
    shapes = []

    def compile(self, shape, dtype):
        shapes.append(shape)
        return _Compiled(shape), "output"  # one output, as a classifier has

    monkeypatch.setattr(openvino_predict.CompiledPredict, "compile", compile)
    return shapes


@pytest.mark.parametrize(
    "policy, hint",
    [
        ("float32", "f32"),
        ("mixed_bfloat16", "bf16"),
        ("bfloat16", "bf16"),
        ("float16", "f16"),
        ("mixed_float16", "f16"),
    ],
)
def test_the_precision_is_the_policys_compute_dtype(policy, hint):
    assert openvino_predict.precision_hint(_Model(policy)) == hint


def test_a_compute_dtype_openvino_has_no_precision_for_is_one_line():
    with pytest.raises(ValueError, match="not float64: build the model under one of those dtype policies"):
        openvino_predict.precision_hint(_Model("float64"))


def test_each_shape_compiles_once_and_the_two_latest_are_kept(compiles):
    predict = openvino_predict.CompiledPredict(_Model())
    batches = [np.ones((n, 2, 2, 3), "float32") for n in (8, 8, 3, 8, 3)]
    for x in batches:
        np.testing.assert_array_equal(predict.run(x), np.full(len(x), 12.0))
    assert compiles == [(8, 2, 2, 3), (3, 2, 2, 3)]  # a predict's batches and its last one
    predict.run(np.ones((1, 2, 2, 3), "float32"))  # a third shape drops the oldest
    predict.run(np.ones((3, 2, 2, 3), "float32"))
    predict.run(np.ones((8, 2, 2, 3), "float32"))
    assert compiles == [(8, 2, 2, 3), (3, 2, 2, 3), (1, 2, 2, 3), (8, 2, 2, 3)]
    predict.run(np.ones((8, 2, 2, 3), "float64"))  # another dtype is another graph
    assert compiles[-1] == (8, 2, 2, 3) and len(compiles) == 5


def test_a_weight_assigned_since_compiles_again(compiles):
    model = _Model()
    predict = openvino_predict.CompiledPredict(model)
    x = np.ones((2, 2, 2, 3), "float32")
    predict.run(x)
    predict.run(x)
    assert len(compiles) == 1
    model.weights[1].value = object()  # as Keras' OpenVINO variables take a new value
    predict.run(x)
    assert len(compiles) == 2
    model.weights.append(_Weight())  # a weight more (a layer built since)
    predict.run(x)
    assert len(compiles) == 3


def test_the_steps_of_one_call_come_back_as_one_batch(compiles):
    predict = openvino_predict.CompiledPredict(_Model())
    steps = [(np.ones((2, 1, 1, 3), "float32"),), (np.full((1, 1, 1, 3), 2.0, "float32"), None, None)]
    np.testing.assert_array_equal(predict(steps), [3.0, 3.0, 6.0])
    np.testing.assert_array_equal(predict([steps[1]]), [6.0])


def test_the_process_has_one_core():
    assert openvino_predict.core() is openvino_predict.core()


def test_evaluate_steps_take_the_compiled_graphs_outputs_with_keras_loss_and_metrics(compiles):
    # evaluate and test_on_batch on OpenVINO: the outputs are the compiled graph's (the stand-in's
    # row sums, which the model's own call would not give), the loss and metrics compile()'s, and
    # the "loss" entry the running mean over examples, as Keras' own test_step keeps it.
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(loss="mse", metrics=["mae"])
    predict = openvino_predict.CompiledPredict(model)
    model.make_predict_function = lambda force=False: predict
    x = np.array([[1.0, 2.0], [3.0, 4.0]], "float32")  # row sums 3 and 7
    logs = openvino_predict.test_step(model, (x, np.array([2.0, 9.0], "float32")))
    assert float(logs["loss"]) == pytest.approx(2.5)  # (1 + 4) / 2
    assert float(logs["mae"]) == pytest.approx(1.5)
    logs = openvino_predict.test_step(model, (x, np.array([3.0, 7.0], "float32")))
    assert float(logs["loss"]) == pytest.approx(1.25)  # the mean over the four examples
    assert compiles == [(2, 2)]  # one graph for both batches
