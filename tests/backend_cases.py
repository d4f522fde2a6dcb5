"""What every Keras backend must compute alike, run on the backend of the process it is in.

Keras fixes its backend per process. So the test process (TensorFlow) writes the cases once,
`write_cases(directory)`: tiny models as .keras files, their weights and inputs; `compute`
then loads and runs every case on the backend of the process that calls it, and returns
{name: NumPy array}. tests/test_backends.py calls it in the test process for TensorFlow and,
through `on_backend`, in ONE child process per other backend (a process start costs seconds):

    KERAS_BACKEND=torch python tests/backend_cases.py DIRECTORY OUT.npz

The child also writes back what it saved on its backend (a .keras file and an .npz), which the
test process loads on TensorFlow.
"""

import contextlib
import gc
import io
import json
import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import PIL.Image
import signal_stack
from fixtures import DISTINCT

import keras_vit
from keras_vit import initializers, masked_patches, predict, visualize, weights
from keras_vit.preprocessing import DoubleScalingWarning, decode_predictions, preprocess_input

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The official-layout fixture and the logits an independent implementation gives for it
# (../shared/fixtures/README.md): ../shared sits beside the repository.
FIXTURES = os.path.join(os.path.dirname(ROOT), "shared", "fixtures")
OTHER_BACKENDS = ("jax", "torch", "openvino")
# Keras' backends that run models but cannot train them (Keras' OpenVINO backend: inference only).
INFERENCE_ONLY_BACKENDS = ("openvino",)

HYBRID = dict(
    DISTINCT, image_size=32, patch_size=1, num_layers=1, resnet_layers=(1, 1), resnet_width=0.5
)  # 32 channels at the root: one per GroupNorm group
# One model for any size, stored for a 4 x 4 grid; called on the stored grid and a non-square one.
ANY_SIZE = dict(DISTINCT, image_size=(None, None), base_image_size=16)
ANY_SIZES = ((16, 16), (24, 40))
# The classes of the any-size model's images for `evaluate` (of its 5).
EVALUATE_LABELS = np.array([3, 1], dtype="int32")
OTHER_POSEMBS = ("learned_2d", "sincos_2d", "relative")
# The fixture's architecture (../shared/fixtures/README.md), as a model of any size.
FIXTURE_MODEL = dict(
    image_size=(None, None),
    base_image_size=32,
    patch_size=8,
    hidden_size=48,
    num_layers=2,
    num_heads=3,
    mlp_dim=96,
    num_classes=7,
    include_preprocessing=False,
    classifier_activation=None,
)
LEARNING_RATE = 0.1


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x), np.float32)


def _randomise(model, seed):
    """Random values in every weight: zero-initialised heads and class tokens would hide bugs."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.2, w.shape).astype("float32") for w in model.get_weights()])
    return model


def _save(model, directory, name):
    model.save(os.path.join(directory, f"{name}.keras"))
    model.save_weights(os.path.join(directory, f"{name}.weights.h5"))
    with open(os.path.join(directory, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(model.get_config(), f)


def _load(directory, name):
    return keras.saving.load_model(os.path.join(directory, f"{name}.keras"), safe_mode=True)


def models():
    """{case: a new model of that case} (random weights; write_cases randomises them)."""
    common = dict(classifier_activation=None, include_preprocessing=False)
    built = {
        "token": keras_vit.ViT(image_size=(16, 12), **common, **DISTINCT),
        "gap": keras_vit.ViT(
            image_size=(16, 12), classifier="gap", representation_size=6, **common, **DISTINCT
        ),
        "hybrid": keras_vit.ViT(**common, **HYBRID),
        "any_size": keras_vit.ViT(classifier_activation=None, **ANY_SIZE),
    }
    for posemb in OTHER_POSEMBS:
        built[posemb] = keras_vit.ViT(classifier_activation=None, posemb=posemb, **ANY_SIZE)
    # Pixels in, ImageNet-1k probabilities out: what preprocess_input and decode_predictions serve.
    built["imagenet"] = keras_vit.ViT(image_size=16, **dict(DISTINCT, num_classes=1000))
    return built


def inputs():
    """{case: its input images}: [-1, 1] for the models without preprocessing, else pixels."""
    rng = np.random.default_rng(0)
    found = {
        "token": rng.uniform(-1, 1, (3, 16, 12, 3)),
        "gap": rng.uniform(-1, 1, (3, 16, 12, 3)),
        "hybrid": rng.uniform(-1, 1, (2, 32, 32, 3)),
    }
    for size in ANY_SIZES:
        found["pixels_{}x{}".format(*size)] = rng.uniform(0, 255, (2, *size, 3))
    found["labels"] = np.array([0, 3, 4])
    return {key: value.astype("float32" if key != "labels" else "int32") for key, value in found.items()}


def write_cases(directory):
    """Saves every case's model (.keras, .weights.h5, config) and the inputs to `directory`."""
    for seed, (name, model) in enumerate(models().items()):
        _save(_randomise(model, seed), directory, name)
    found = inputs()
    np.savez(os.path.join(directory, "inputs.npz"), **found)
    # An image file for the predict command: the first 16 x 16 image, as 8-bit pixels.
    PIL.Image.fromarray(found["pixels_16x16"][0].astype("uint8")).save(os.path.join(directory, "photo.png"))


def compute(directory, written=None):
    """{output name: array} of every case, on this process's backend.

    `written`: a directory where the loaded token model is saved again, as
    `<backend>.keras` and `<backend>.npz` (the files this backend writes).
    """
    x = dict(np.load(os.path.join(directory, "inputs.npz"), allow_pickle=False))
    out = {}
    for name in ("token", "gap", "hybrid"):
        model = _load(directory, name)
        out[f"{name}/logits"] = _numpy(model(x[name]))
        out[f"{name}/maps"] = np.stack([_numpy(m) for m in model.attention_maps(x[name])])
    model = _load(directory, "any_size")
    for size in ANY_SIZES:
        pixels = x["pixels_{}x{}".format(*size)]
        key = "any_size/{}x{}".format(*size)
        out[f"{key}/logits"] = _numpy(model(pixels))
        out[f"{key}/predict"] = _numpy(model.predict(pixels, verbose=0))
        out[f"{key}/maps"] = np.stack([_numpy(m) for m in model.attention_maps(pixels)])
    pixels = x["pixels_{}x{}".format(*ANY_SIZES[-1])]
    for key, value in visualize.analyse(model, pixels, num_components=4).items():
        out[f"analyse/{key}"] = np.asarray(value, np.float32)
    for posemb in OTHER_POSEMBS:
        out[f"{posemb}/logits"] = _numpy(_load(directory, posemb)(pixels))
        out[f"{posemb}/maps"] = np.stack([_numpy(m) for m in _load(directory, posemb).attention_maps(pixels)])
    out.update(_fixture_logits())
    out.update(_preprocessing(directory, x["pixels_16x16"]))
    out.update(_predict_command(directory))
    if keras.backend.backend() not in INFERENCE_ONLY_BACKENDS:
        out.update(_after_one_training_step(directory, x))
    out.update(_predict_after_new_weights(directory, pixels))
    out.update(_mixed_bfloat16(directory, pixels))
    out.update(_initial_weights())
    if keras.backend.backend() == "openvino":
        # The models above that predicted are freed by now, in the order they were made: with an
        # OpenVINO Core per compiled graph (Keras' own predict) that leaves this thread a freed
        # signal stack, and the next signal would end the process (tests/signal_stack.py).
        gc.collect()
        out["openvino/signal_stack_mapped"] = np.array(signal_stack.is_mapped(signal_stack.current()))
    if keras.backend.backend() == "jax":
        out["any_size/jax_jit"] = _jax_jit(model, pixels)
    if written:
        token = _load(directory, "token")
        token.save(os.path.join(written, f"{keras.backend.backend()}.keras"))
        weights.save_npz(token, os.path.join(written, f"{keras.backend.backend()}.npz"))
    return out


def _initial_weights():
    """The weights a build starts with, drawn on this backend: the hybrid and a plain model with
    its masked patch predictor under keras_vit.initializers.seeded(3), and the plain model after
    keras.utils.set_random_seed(5). Every backend must start from the same values."""
    out = {}
    for tag in ("seeded", "set_random_seed"):
        keras.utils.set_random_seed(5)
        with initializers.seeded(3) if tag == "seeded" else contextlib.nullcontext():
            plain = keras_vit.ViT(
                image_size=16, include_preprocessing=False, representation_size=6, **DISTINCT
            )
            built = [*plain.weights, *masked_patches.MaskedPatchPredictor(plain).trainable_variables]
            if tag == "seeded":
                built += keras_vit.ViT(**HYBRID).weights
        out.update({f"init_{tag}/{v.path}": _numpy(v) for v in built})
    return out


def _fixture_logits():
    """The official-layout file loaded into a model of any size, run at 32 and 64 px, and into a
    64 px model (the loader resizes the position embeddings once)."""
    path = os.path.join(FIXTURES, "tiny_vit_vit_jax_layout.npz")
    model = keras_vit.ViT(**FIXTURE_MODEL)
    weights.load_weights(model, path)
    reference = np.load(os.path.join(FIXTURES, "tiny_vit_reference_outputs.npz"), allow_pickle=False)
    out = {f"fixture/logits_{size}": _numpy(model(reference[f"x_{size}_nhwc"])) for size in (32, 64)}
    fixed = keras_vit.ViT(**dict(FIXTURE_MODEL, image_size=64))
    weights.load_weights(fixed, path)
    out["fixture/fixed_64"] = _numpy(fixed(reference["x_64_nhwc"]))
    return out


def _preprocessing(directory, pixels):
    """preprocess_input on a tensor of this backend, the warning for scaled images, and
    decode_predictions of the model's output tensor."""
    model = _load(directory, "imagenet")
    scaled = preprocess_input(keras.ops.convert_to_tensor(pixels))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DoubleScalingWarning)
        model(scaled)
    decoded = decode_predictions(model(pixels), top=3)
    return {
        "preprocessing/scaled": _numpy(scaled),
        "preprocessing/warned": np.array([w.category is DoubleScalingWarning for w in caught]),
        "preprocessing/decoded_ids": np.array([[wnid for wnid, _, _ in row] for row in decoded]),
        "preprocessing/decoded_scores": np.array([[s for _, _, s in row] for row in decoded], np.float32),
    }


def _predict_command(directory):
    """`python -m keras_vit.predict --json` of the ImageNet case's .keras file on an image file, run
    in this process: the classes it prints, and their probabilities."""
    printed = io.StringIO()
    argv = ["--json", "--top=3", f"--model={os.path.join(directory, 'imagenet.keras')}"]
    with contextlib.redirect_stdout(printed):
        status = predict.main([*argv, os.path.join(directory, "photo.png")])
    assert status == 0, status
    (found,) = json.loads(printed.getvalue())
    return {
        "predict_command/indices": np.array([p["index"] for p in found["predictions"]]),
        "predict_command/probabilities": np.array(
            [p["probability"] for p in found["predictions"]], np.float32
        ),
    }


def _after_one_training_step(directory, x):
    """Logits of the token model after one SGD step (no dropout: the step is deterministic)."""
    model = _load(directory, "token")
    model.compile(
        optimizer=keras.optimizers.SGD(LEARNING_RATE),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    loss = model.train_on_batch(x["token"], x["labels"])
    return {"train/loss": np.float32(loss), "train/logits": _numpy(model(x["token"]))}


def _predict_after_new_weights(directory, pixels):
    """`predict` and `evaluate` of the any-size model before and after `set_weights` (a backend
    that kept the graph it compiled first would predict with the old weights), in batches of one
    (two steps), and `test_on_batch` after."""
    model = _load(directory, "any_size")
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    labels = EVALUATE_LABELS[: len(pixels)]
    before = _numpy(model.predict(pixels, batch_size=1, verbose=0))
    evaluated_before = _evaluated(model, pixels, labels)
    model.set_weights([w * 0.5 for w in model.get_weights()])
    evaluated = _evaluated(model, pixels, labels)
    tested = _loss_and_accuracy(model.test_on_batch(pixels, labels, return_dict=True))
    out = {
        "any_size/predict_before_set_weights": before,
        "any_size/predict_after_set_weights": _numpy(model.predict(pixels, batch_size=1, verbose=0)),
        "any_size/call_after_set_weights": _numpy(model(pixels)),
        "any_size/predict_on_batch_after_set_weights": _numpy(model.predict_on_batch(pixels)),
        "any_size/evaluate_before_set_weights": evaluated_before,
        "any_size/evaluate_after_set_weights": evaluated,
        "any_size/test_on_batch_after_set_weights": tested,
    }
    if keras.backend.backend() == "openvino":
        out["openvino/precision_float32"] = _openvino_precision(model)
    return out


def _evaluated(model, pixels, labels):
    """[loss, accuracy] of `evaluate` in batches of one (two steps)."""
    return _loss_and_accuracy(model.evaluate(pixels, labels, batch_size=1, verbose=0, return_dict=True))


def _loss_and_accuracy(logs):
    return np.array([logs["loss"], logs["accuracy"]], np.float64)


def _openvino_precision(model):
    """The precision OpenVINO compiled `model`'s last `predict` graphs in (keras_vit/openvino_predict.py)."""
    compiled = model.predict_function.compiled.values()
    return np.array([c.get_property("INFERENCE_PRECISION_HINT").get_type_name() for c, _ in compiled])


def _mixed_bfloat16(directory, pixels):
    """The any-size model built under the global mixed_bfloat16 policy, its weights loaded:
    called, and through `predict`."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        with open(os.path.join(directory, "any_size.json"), encoding="utf-8") as f:
            model = keras_vit.ViT.from_config(json.load(f))
        model.load_weights(os.path.join(directory, "any_size.weights.h5"))
        logits = model(pixels)
        predicted = model.predict(pixels, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    dtype = keras.backend.standardize_dtype(logits.dtype)
    out = {
        "bfloat16/logits": _numpy(logits),
        "bfloat16/predict": _numpy(predicted),
        "bfloat16/dtype": np.array(dtype),
    }
    if keras.backend.backend() == "openvino":
        out["openvino/precision_bfloat16"] = _openvino_precision(model)
    return out


def _jax_jit(model, pixels):
    """The any-size model's stateless call under jax.jit (the grid is read while tracing)."""
    import jax

    @jax.jit
    def forward(trainable, non_trainable, images):
        return model.stateless_call(trainable, non_trainable, images, training=False)[0]

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    return _numpy(forward(trainable, non_trainable, pixels))


def on_backend(backend, directory, out):
    """Runs `compute` in a child process on Keras' `backend`; returns its arrays (files it
    writes go to `directory`)."""
    env = dict(
        os.environ,
        KERAS_BACKEND=backend,
        JAX_PLATFORMS="cpu",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=ROOT,
    )
    # No JAX compilation cache (tests/conftest.py): the one child on JAX compiles some 700 of
    # Keras' eager ops that no other process uses again, and JAX writes each to the size-bounded
    # cache only after reading the size and time of every entry already there: 81 s of CPU for
    # the child with the cache, 56 s without, and the rest of the run's entries would pay for
    # these 700 at each write.
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), str(directory), str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    if proc.returncode:
        raise AssertionError(f"the cases failed on {backend}:\n{proc.stderr[-4000:]}")
    return dict(np.load(out, allow_pickle=False))


def main(directory, out):
    found = compute(directory, written=directory)
    np.savez(out, **found)


if __name__ == "__main__":
    main(*sys.argv[1:])
