"""benchmarks.inference's rules, without timing: which contestant runs in which mode and dtype,
the rows of keras_vit with one of its own paths switched off, and its one-line flag errors (the
benchmark's runs: tests/test_benchmarks.py)."""

import os

import pytest
from benchmark_runs import FRAMEWORK_VARIABLE

# This process loaded TensorFlow first (conftest.py): the benchmarks must leave PyTorch out.
os.environ[FRAMEWORK_VARIABLE] = "tf"

from benchmarks import flops, inference  # noqa: E402
from keras_vit import xla_inference  # noqa: E402


@pytest.mark.parametrize("avx512", [True, False])
def test_only_keras_hub_and_the_xla_runtime_compile_keras_hub_in_bfloat16_without_avx512(monkeypatch, avx512):
    # The rule behind the rows' names: keras-hub's fastest mode is XLA in float32, and in bfloat16
    # only on a CPU without AVX-512 (where TensorFlow has no fast bfloat16 kernels either);
    # keras_vit's row is what Keras' predict runs (keras_vit compiles itself where it helps).
    monkeypatch.setattr(xla_inference, "cpu_prefers_xla", lambda: not avx512)
    uses_xla = {
        (k, d): inference.keras_uses_xla(k, d)
        for k in ("keras_vit", inference.ON_XLA, "keras-hub")
        for d in ("float32", "bfloat16")
    }
    assert [key for key, xla in uses_xla.items() if xla] == [
        (inference.ON_XLA, "float32"),
        ("keras-hub", "float32"),
        *([] if avx512 else [("keras-hub", "bfloat16")]),
    ]
    assert not inference.runs_in(inference.ON_XLA, "bfloat16")
    # TensorFlow's graph of keras_vit is a row of its own only where keras_vit compiles itself.
    assert {inference.runs_in(inference.ON_GRAPH, d) for d in ("float32", "bfloat16")} == {not avx512}
    # ... and the whole rows (bfloat16) only where it does not: inside XLA's call they are the default.
    assert inference.runs_in(inference.WHOLE_ROWS, "bfloat16") == avx512
    assert inference.contestant_name("keras_vit", "float32") == "keras_vit TF"
    assert inference.contestant_name("keras-hub", "bfloat16") == "keras-hub TF" + ("" if avx512 else "+XLA")


@pytest.mark.parametrize("path", ["row_parts", "xla_inference"])
def test_a_row_without_a_path_of_keras_vit_is_traced_with_that_paths_switch_off(monkeypatch, path):
    # The rows the gains of keras_vit.row_parts (bfloat16) and keras_vit.xla_inference (on an x86
    # CPU without AVX-512) are read against: their traces must see the path's switch off,
    # keras_vit's own traces on, and the switch must not stay off for what runs after.
    from keras_vit import onednn_graph, row_parts

    module, decides, kind, dtype = {
        "row_parts": (row_parts, "count", inference.WHOLE_ROWS, "bfloat16"),
        "xla_inference": (xla_inference, "applies", inference.ON_GRAPH, "float32"),
    }[path]
    monkeypatch.setattr(xla_inference, "cpu_prefers_xla", lambda: path == "xla_inference")
    monkeypatch.setattr(onednn_graph, "has_gpu", lambda: False)
    seen, real, on = [], getattr(module, decides), onednn_graph.switched_on
    monkeypatch.setattr(module, decides, lambda *a: seen.append(on(module.SWITCH)) or real(*a))
    monkeypatch.delenv(module.SWITCH, raising=False)
    # Two blocks: the last computes the class token alone (keras_vit.class_token_only), whatever
    # the switch, so the first is the one that asks.
    shape = flops.shape("ViT-Ti_16", num_layers=2)
    states = {}
    for contestant in ("keras_vit", kind):
        seen.clear()
        inference.local_step(contestant, shape, 32, 1, dtype)()
        states[contestant] = set(seen)
    assert states == {"keras_vit": {True}, kind: {False}}
    assert module.SWITCH not in os.environ
    # A run started with the switch set keeps its own setting after.
    monkeypatch.setenv(module.SWITCH, "off")
    inference.local_step(kind, shape, 32, 1, dtype)
    assert os.environ[module.SWITCH] == "off"
    assert not inference.runs_in(inference.WHOLE_ROWS, "float32")  # the table's bfloat16 rows only


def test_bad_flags_are_one_line_errors(capsys):
    with pytest.raises(SystemExit, match="--cases entry 'ViT-B_16': write VARIANT:IMAGE_SIZE"):
        inference.main(["--cases=ViT-B_16"])
    with pytest.raises(SystemExit, match="unknown peer 'pytorch'"):
        inference.main(["--cases=ViT-Ti_16:32", "--peers=pytorch"])
    with pytest.raises(SystemExit, match="--dtypes=float16: choose float32 and/or bfloat16"):
        inference.main(["--cases=ViT-Ti_16:32", "--dtypes=float16", "--peers=none"])
    with pytest.raises(
        SystemExit,
        match="unknown runtime 'tflite': choose from torch, onnxruntime, openvino, keras-openvino, "
        "tf-whole-rows, tf-graph, tf-xla or none",
    ):
        inference.main(["--cases=ViT-Ti_16:32", "--peers=none", "--runtimes=tflite"])
