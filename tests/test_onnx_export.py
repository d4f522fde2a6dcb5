"""keras_vit.onnx_export: the streaming merge of external data into one file, and the child's errors.

The conversion itself (a child process on Keras' PyTorch backend) is run by tests/test_export.py,
which checks the file in onnxruntime against the Keras model.
"""

import os

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from keras_vit import onnx_export


def _two_layer_model(rng):
    """x @ w1 + b1 -> relu -> @ w2: two weight matrices (external data) and a bias kept inline."""
    w1 = rng.normal(size=(300, 200)).astype(np.float32)
    w2 = rng.normal(size=(200, 7)).astype(np.float32)
    b1 = rng.normal(size=(200,)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Add", ["h", "b1"], ["hb"]),
            helper.make_node("Relu", ["hb"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"]),
        ],
        "two_layers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 300])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 7])],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b1, "b1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, (w1, b1, w2)


def test_external_data_is_merged_into_one_file_that_reads_as_the_same_model(tmp_path):
    rng = np.random.default_rng(0)
    model, (w1, b1, w2) = _two_layer_model(rng)
    folder = tmp_path / "external"
    folder.mkdir()
    graph_path = str(folder / "model.onnx")
    # b1 (800 bytes) stays inside the graph, w1 and w2 go to model.onnx.data, as torch.onnx writes.
    onnx.save_model(
        model, graph_path, save_as_external_data=True, location="model.onnx.data", size_threshold=1024
    )
    stored = onnx.load(graph_path, load_external_data=False)
    assert sorted(t.name for t in stored.graph.initializer if t.data_location == TensorProto.EXTERNAL) == [
        "w1",
        "w2",
    ]

    merged = str(tmp_path / "merged.onnx")
    onnx_export.embed_external_data(graph_path, merged)
    assert sorted(os.listdir(tmp_path)) == ["external", "merged.onnx"]  # one file, nothing beside it
    loaded = onnx.load(merged)  # refuses a file that still points to external data it lacks
    onnx.checker.check_model(loaded)
    tensors = {t.name: t for t in loaded.graph.initializer}
    assert sorted(tensors) == ["b1", "w1", "w2"]
    assert all(t.data_location == TensorProto.DEFAULT and not t.external_data for t in tensors.values())
    for name, value in {"w1": w1, "b1": b1, "w2": w2}.items():
        np.testing.assert_array_equal(numpy_helper.to_array(tensors[name]), value)
    assert [n.op_type for n in loaded.graph.node] == ["MatMul", "Add", "Relu", "MatMul"]

    x = rng.normal(size=(3, 300)).astype(np.float32)
    session = onnxruntime.InferenceSession(merged, providers=["CPUExecutionProvider"])
    [y] = session.run(None, {"x": x})
    np.testing.assert_allclose(y, np.maximum(x @ w1 + b1, 0) @ w2, rtol=1e-4, atol=1e-3)


def test_external_data_that_ends_early_is_an_error(tmp_path):
    model, _ = _two_layer_model(np.random.default_rng(0))
    graph_path = str(tmp_path / "model.onnx")
    onnx.save_model(model, graph_path, save_as_external_data=True, location="m.data", size_threshold=0)
    data = tmp_path / "m.data"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(ValueError, match="external data ends early"):
        onnx_export.embed_external_data(graph_path, str(tmp_path / "merged.onnx"))


def test_the_conversion_refuses_another_backend(tmp_path):
    with pytest.raises(ValueError, match="runs on KERAS_BACKEND=torch, not tensorflow"):
        onnx_export.convert(str(tmp_path), str(tmp_path / "model.onnx"))


def test_optimize_folds_the_shape_arithmetic_and_lifts_constants_to_initializers():
    """The graph torch.onnx writes before its optimizer: a weight as a Constant node, and a
    reshape target computed from constants. After `optimize`, the weight is an initializer (a
    Constant node would hold the tensor inside the graph's protobuf, which has a 2 GB limit and
    which embed_external_data does not stream) and the arithmetic is folded away; the outputs
    are the same in onnxruntime."""
    import onnx_ir

    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 6)).astype(np.float32)

    def constant(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))

    graph = helper.make_graph(
        [
            constant("w", w),
            constant("a", np.array([-2, 2], np.int64)),
            constant("b", np.array([1, 1], np.int64)),
            helper.make_node("Add", ["a", "b"], ["shape"]),  # [-1, 3]
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Reshape", ["h", "shape"], ["y"]),
        ],
        "unoptimized",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.normal(size=(5, 4)).astype(np.float32)
    model = onnx_ir.from_proto(proto)
    onnx_export.optimize(model)
    optimized = onnx_ir.to_proto(model)

    assert [node.op_type for node in optimized.graph.node] == ["MatMul", "Reshape"]
    initializers = {t.name: numpy_helper.to_array(t) for t in optimized.graph.initializer}
    assert sorted(np.asarray(v).tolist() for v in initializers.values() if v.ndim == 1) == [[-1, 3]]
    [weight] = [v for v in initializers.values() if v.ndim == 2]
    np.testing.assert_array_equal(weight, w)

    def run(m):
        session = onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, {"x": x})[0]

    outputs = run(optimized)
    np.testing.assert_array_equal(outputs, run(proto))
    assert outputs.shape == (10, 3)
