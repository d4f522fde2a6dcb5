"""The library on Keras' backends: TensorFlow, JAX, PyTorch and OpenVINO compute the same outputs.

The cases (tests/backend_cases.py: tiny plain, 'gap', hybrid and any-size models saved as
.keras files, the official-layout fixture, attention maps, the analysis numbers, a training
step, mixed_bfloat16) run here for TensorFlow and in one child process per other backend
(Keras fixes its backend per process). Each backend's outputs are held against the NumPy
reference (tests/reference_numpy.py), the fixture's independent logits, and TensorFlow's.
OpenVINO's backend runs inference only: no training step there.
"""

import os

import keras
import numpy as np
import pytest
import reference_numpy  # tests/reference_numpy.py: written from DESIGN.md's equations
import signal_stack
from backend_cases import (
    ANY_SIZES,
    EVALUATE_LABELS,
    FIXTURES,
    INFERENCE_ONLY_BACKENDS,
    OTHER_BACKENDS,
    compute,
    on_backend,
    write_cases,
)

from keras_vit import cpu_info, weights

# A child process per backend takes 30-60 s on 2 cores.
BACKENDS = ["tensorflow"] + [pytest.param(b, marks=pytest.mark.slow) for b in OTHER_BACKENDS]
CLASSIFIERS = {"token": "token", "gap": "gap", "hybrid": "token"}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    directory = tmp_path_factory.mktemp("backend_cases")
    write_cases(str(directory))
    return directory


@pytest.fixture(scope="module")
def outputs(cases):
    """outputs(backend) -> {name: array}, computed once per backend for the whole module."""
    found = {}

    def run(backend):
        if backend not in found:
            if backend == "tensorflow":
                found[backend] = compute(str(cases), written=str(cases))
            else:
                found[backend] = on_backend(backend, cases, cases / f"{backend}-outputs.npz")
        return found[backend]

    return run


def _load(cases, name):
    return keras.saving.load_model(os.fspath(cases / f"{name}.keras"), safe_mode=True)


def _inputs(cases):
    return dict(np.load(cases / "inputs.npz", allow_pickle=False))


@pytest.mark.parametrize("backend", BACKENDS)
def test_logits_match_the_numpy_reference(backend, cases, outputs):
    got, x = outputs(backend), _inputs(cases)
    for name, classifier in CLASSIFIERS.items():
        params = weights.export_params(_load(cases, name))
        expected = reference_numpy.vit_forward(params, x[name], num_heads=3, classifier=classifier)
        np.testing.assert_allclose(got[f"{name}/logits"], expected, atol=2e-5, rtol=2e-5, err_msg=name)
    # The model of any size on its stored 4 x 4 grid and, its embeddings resized, on 6 x 10.
    params = weights.export_params(_load(cases, "any_size"))
    for height, width in ANY_SIZES:
        pixels = x[f"pixels_{height}x{width}"]
        expected = reference_numpy.vit_forward(
            params, pixels / 127.5 - 1, num_heads=3, resize_to_grid=(height // 4, width // 4)
        )
        np.testing.assert_allclose(got[f"any_size/{height}x{width}/logits"], expected, atol=2e-5, rtol=2e-5)
        # predict too, on every backend: OpenVINO's included, which Keras' backend would compile in
        # bfloat16 on a CPU with bfloat16 instructions (keras_vit/openvino_predict.py)
        np.testing.assert_allclose(got[f"any_size/{height}x{width}/predict"], expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_official_layout_file_reproduces_the_independent_logits(backend, outputs):
    # The fixture's logits come from a separate PyTorch implementation, at 32 px and, after the
    # official resize, at 64 px (../shared/fixtures/README.md).
    reference = np.load(os.path.join(FIXTURES, "tiny_vit_reference_outputs.npz"), allow_pickle=False)
    got = outputs(backend)
    for size in (32, 64):
        np.testing.assert_allclose(
            got[f"fixture/logits_{size}"], reference[f"logits_{size}"], atol=1e-5, rtol=0
        )
    # A 64 px model gets the embeddings resized by the loader instead: the same logits.
    np.testing.assert_allclose(got["fixture/fixed_64"], reference["logits_64"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_maps_are_distributions_over_each_inputs_tokens(backend, outputs):
    got = outputs(backend)
    tokens = {"token": 1 + 4 * 3, "gap": 4 * 3, "hybrid": 1 + 4 * 4}  # the stem: 8x smaller
    tokens.update({f"any_size/{h}x{w}": 1 + (h // 4) * (w // 4) for h, w in ANY_SIZES})
    for name, count in tokens.items():
        maps = got[f"{name}/maps"]  # (layers, batch, heads, T, T)
        assert maps.shape[2:] == (3, count, count), (name, maps.shape)
        np.testing.assert_allclose(maps.sum(axis=-1), 1.0, atol=1e-5, err_msg=name)
        assert (maps >= 0).all()


# Outputs that agree to float32 rounding; the rest need their own bound (below).
ATOL = {"analyse/attention_distance": 1e-4, "bfloat16/logits": 2e-2, "bfloat16/predict": 2e-2}


@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.slow) for b in OTHER_BACKENDS])
def test_every_output_equals_tensorflows(backend, outputs):
    got, expected = outputs(backend), outputs("tensorflow")
    if backend in INFERENCE_ONLY_BACKENDS:  # no training step to compare
        expected = {name: value for name, value in expected.items() if not name.startswith("train/")}
    assert set(expected) <= set(got)
    for name, value in expected.items():
        if value.dtype.kind in "USb":  # names, flags
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], value, atol=ATOL.get(name, 1e-5), rtol=0, err_msg=name)
    if backend not in INFERENCE_ONLY_BACKENDS:
        # The step trained: its logits moved from the saved model's.
        assert np.abs(got["train/logits"] - got["token/logits"]).max() > 1e-3


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_a_seed_gives_the_same_initial_weights_on_every_backend(backend, outputs):
    """Bit for bit: keras_vit's initialisers draw with NumPy, not with the backend's generator."""
    got, expected = outputs(backend), outputs("tensorflow")
    names = [name for name in expected if name.startswith("init_")]
    assert any("mask_embedding" in name for name in names) and any("conv_root" in name for name in names)
    for name in names:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scaled_images_warn_and_predictions_decode(backend, cases, outputs):
    got = outputs(backend)
    np.testing.assert_allclose(
        got["preprocessing/scaled"], _inputs(cases)["pixels_16x16"] / 127.5 - 1, atol=1e-6
    )
    assert got["preprocessing/warned"].tolist() == [True]  # once, for the images scaled twice
    scores = got["preprocessing/decoded_scores"]
    assert scores.shape == (2, 3) and (np.diff(scores, axis=1) <= 0).all()  # best first
    assert all(wnid.startswith("n") for wnid in got["preprocessing/decoded_ids"].ravel())


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_bfloat16_runs_and_returns_float32(backend, outputs):
    got = outputs(backend)
    assert str(got["bfloat16/dtype"]) == "float32"
    # bfloat16 keeps 8 bits of mantissa: about 1e-2 on logits of size 1, never the float32 ones.
    logits, exact = got["bfloat16/logits"], got["any_size/24x40/logits"]
    assert 0 < np.abs(logits - exact).max() < 5e-2


@pytest.mark.parametrize("backend", BACKENDS)
def test_predict_uses_the_weights_set_after_an_earlier_predict(backend, outputs):
    got = outputs(backend)
    after, called = got["any_size/predict_after_set_weights"], got["any_size/call_after_set_weights"]
    np.testing.assert_allclose(after, called, atol=2e-5, rtol=0)
    np.testing.assert_allclose(got["any_size/predict_on_batch_after_set_weights"], called, atol=2e-5, rtol=0)
    assert np.abs(after - got["any_size/predict_before_set_weights"]).max() > 1e-2  # the weights moved


@pytest.mark.parametrize("backend", BACKENDS)
def test_evaluate_uses_the_weights_set_after_an_earlier_evaluate(backend, outputs):
    # Keras' own evaluate on OpenVINO ran the graph it compiled first (the old weights) and in
    # bfloat16 on a CPU with bfloat16 instructions; keras_vit's runs predict's graph.
    got = outputs(backend)
    logits = got["any_size/call_after_set_weights"].astype("float64")
    labels = EVALUATE_LABELS[: len(logits)]
    loss = -np.log(reference_numpy.softmax(logits)[np.arange(len(labels)), labels]).mean()
    accuracy = (logits.argmax(axis=-1) == labels).mean()
    for name in ("evaluate", "test_on_batch"):
        got_loss, got_accuracy = got[f"any_size/{name}_after_set_weights"]
        np.testing.assert_allclose(got_loss, loss, rtol=2e-5, atol=2e-5, err_msg=name)
        assert got_accuracy == accuracy, name
    assert abs(got["any_size/evaluate_before_set_weights"][0] - loss) > 1e-3  # the weights moved


@pytest.mark.slow
def test_openvino_predict_computes_at_the_models_precision(outputs):
    # Keras' own OpenVINO predict would compile the float32 model in bfloat16 on a CPU with
    # bfloat16 instructions; keras_vit's compiles each batch shape at the compute dtype.
    got = outputs("openvino")
    assert got["openvino/precision_float32"].tolist() == ["f32", "f32"]  # batches of 1, then of 2
    if cpu_info.has_bfloat16():
        assert got["openvino/precision_bfloat16"].tolist() == ["bf16"]
    else:  # OpenVINO takes the hint where it has bfloat16 kernels for the CPU (emulated on AVX-512)
        assert got["openvino/precision_bfloat16"].tolist() in (["bf16"], ["f32"])
    # One Core compiled them all: the models freed in order left the signal stack in place.
    assert got["openvino/signal_stack_mapped"].item() or not signal_stack.LINUX


@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.slow) for b in OTHER_BACKENDS])
def test_files_written_on_the_backend_load_on_tensorflow(backend, cases, outputs):
    outputs(backend)  # the child wrote <backend>.keras and <backend>.npz
    x = _inputs(cases)["token"]
    expected = np.asarray(_load(cases, "token")(x))
    np.testing.assert_array_equal(np.asarray(_load(cases, backend)(x)), expected)
    params = dict(np.load(cases / f"{backend}.npz", allow_pickle=False))
    exported = weights.saved_params(_load(cases, "token"))  # the weights and the config
    assert sorted(params) == sorted(exported)
    for key, value in exported.items():
        np.testing.assert_array_equal(params[key], value, err_msg=key)


@pytest.mark.slow
def test_jax_jit_of_the_any_size_model_equals_tensorflow(outputs):
    # Under jax.jit the grid is read from the traced shapes: the position embeddings are
    # resized while tracing, for the 6 x 10 grid of these images.
    height, width = ANY_SIZES[-1]
    expected = outputs("tensorflow")[f"any_size/{height}x{width}/logits"]
    np.testing.assert_allclose(outputs("jax")["any_size/jax_jit"], expected, atol=1e-5, rtol=0)
