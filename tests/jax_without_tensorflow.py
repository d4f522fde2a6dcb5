"""The library on Keras' JAX backend in a process where TensorFlow is not installed: one child per
test run, shared by the tests of tests/test_fileio.py, tests/test_packaging.py,
tests/test_predict.py, tests/test_preprocessing.py and tests/test_fused_attention.py (the backend
is chosen at start-up, and TensorFlow's absence is the process's; the checks need such a
process, not one each).

The child makes TensorFlow, TFDS, TensorBoard, scikit-learn and ml_collections (what only the
trainers and the tests need) impossible to import, as in an environment that installed the
library alone, then runs each part below in turn. A part that fails is recorded with its
traceback and does not stop the others, so each test reports its own part.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import PIL.Image
import pytest
from fixtures import session_artefact
from synthetic_checkpoints import TI16, vit_jax_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Parts: "fileio" (tests/test_fileio.py), "library" (tests/test_packaging.py), "classify"
# (tests/test_predict.py), "preprocessing" (tests/test_preprocessing.py), "fused_attention"
# (tests/test_fused_attention.py). Argument: the folder with classify's inputs and the results.
_PROGRAM = textwrap.dedent("""
    import importlib.abc
    import json
    import os
    import sys
    import traceback

    BLOCKED = {"tensorflow", "tensorflow_datasets", "tensorboard", "sklearn", "ml_collections"}


    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    assert not BLOCKED & set(sys.modules)
    sys.meta_path.insert(0, NotInstalled())
    folder = sys.argv[1]


    def fileio_part():
        # keras_vit's convert, fileio and weights import, save and load without TensorFlow.
        import keras
        import keras_vit
        from keras_vit import convert, fileio, weights  # noqa: F401

        m = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
                          mlp_dim=16, num_classes=3)
        path = os.path.join(folder, "fileio.npz")
        weights.save_npz(m, path)
        weights.load_weights(m, path)
        return {"backend": keras.backend.backend()}


    def library_part():
        import keras
        import numpy as np

        import keras_vit

        assert keras.backend.backend() == "jax", keras.backend.backend()
        for name in ("weights", "checkpoints", "fileio", "initializers"):
            assert hasattr(keras_vit, name), name
        path = os.path.join(folder, "model.npz")
        images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")

        model = keras_vit.ViT_Ti16(input_shape=(32, 32, 3), classes=5, classifier_activation=None)
        head = model.get_layer("head")  # zero at initialisation: give the logits something to show
        head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape))
        logits = np.asarray(model(images))
        keras_vit.weights.save_npz(model, path)

        other = keras_vit.ViT_Ti16(input_shape=(32, 32, 3), classes=5, classifier_activation=None)
        assert not np.allclose(np.asarray(other(images)), logits)
        keras_vit.weights.load_weights(other, path)
        np.testing.assert_array_equal(np.asarray(other(images)), logits)
        built = keras_vit.ViT_Ti16(weights=path, classifier_activation=None)  # size, classes from the file
        np.testing.assert_array_equal(np.asarray(built(images)), logits)

        info = keras_vit.weights.describe(path)
        assert info == dict(image_size=(32, 32), num_classes=5, representation_size=None,
                            classifier="token"), info
        return {}


    def classify_part():
        import keras_vit
        from keras_vit import predict

        with open(os.path.join(folder, "classify.json")) as f:
            inputs = json.load(f)
        model = keras_vit.create_model("ViT-Ti_16", weights=inputs["weights"])
        return {"top": predict.classify(model, inputs["paths"])}


    def preprocessing_part():
        # preprocess_input's check of already-scaled pixels, on JAX: silent under jax.jit (traced
        # values), a DoubleScalingWarning for a model called eagerly on them.
        import warnings

        import jax
        import numpy as np

        import keras_vit
        from keras_vit.preprocessing import DoubleScalingWarning, preprocess_input

        with warnings.catch_warnings():
            warnings.simplefilter("error", DoubleScalingWarning)
            scaled = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
            jax.jit(preprocess_input)(scaled)  # traced: no value to check, no error
            model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
                                  mlp_dim=8, num_classes=3)
            try:
                model(jax.numpy.asarray(scaled))
            except DoubleScalingWarning:
                return {"warned": True}
        return {"warned": False}


    def fused_attention_part():
        import jax, jax.numpy as jnp, numpy as np
        from keras_vit import fused_attention

        rng = np.random.default_rng(0)
        q, k, v = (jnp.asarray(rng.normal(size=(2, 5, 3, 8)), "float32") for _ in range(3))
        # Under jax.jit, as inside a model's compiled step: eagerly, every op (and, for the gradients,
        # every op of the backward pass) would be compiled on its own, a few seconds on 2 cores.
        plain = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="xla"))
        padded = jax.jit(lambda q, k, v: fused_attention.padded_attention(q, k, v, implementation="xla"))
        out = padded(q, k, v)
        assert out.shape == (2, 5, 3, 8), out.shape
        np.testing.assert_allclose(out, plain(q, k, v), atol=1e-6)
        # Gradients too: the padded token must get no weight and pass nothing back.
        weights = jnp.asarray(rng.normal(size=out.shape), "float32")
        grad = lambda f: jax.jit(jax.grad(lambda *a: jnp.sum(f(*a) * weights), argnums=(0, 1, 2)))(q, k, v)
        for a, b in zip(grad(padded), grad(plain)):
            np.testing.assert_allclose(a, b, atol=1e-6)

        # Odd length in bfloat16 asks for the padded path only on a GPU; with the device check forced,
        # a CPU's missing cuDNN sends it back to Keras' attention, with the same numbers.
        qb, kb, vb = (x.astype("bfloat16") for x in (q, k, v))
        assert not fused_attention.needs_padding_for_flash(qb, kb)
        on_gpu = fused_attention._on_gpu
        fused_attention._on_gpu = lambda: True
        try:
            assert fused_attention.needs_padding_for_flash(qb, kb)
            assert not fused_attention.needs_padding_for_flash(q, k)  # float32: no flash kernel
            # even: Keras' path works
            assert not fused_attention.needs_padding_for_flash(qb[:, :4], kb[:, :4])
            np.testing.assert_allclose(
                fused_attention.dot_product_attention(qb, kb, vb).astype("float32"),
                plain(qb, kb, vb).astype("float32"),
                atol=1e-2,
            )
        finally:
            fused_attention._on_gpu = on_gpu
        return {}


    PARTS = (
        ("fileio", fileio_part),
        ("library", library_part),
        ("classify", classify_part),
        ("preprocessing", preprocessing_part),
        ("fused_attention", fused_attention_part),
    )
    results = {}
    for name, part in PARTS:
        try:
            results[name] = {"ok": True, **part()}
        except BaseException:
            results[name] = {"ok": False, "error": traceback.format_exc()}
    results["blocked_imported"] = sorted(BLOCKED & {name.partition(".")[0] for name in sys.modules})
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(results, f)
    print("ok")
""")


def _make(folder):
    """classify's inputs (a ViT-Ti/16 checkpoint in the official layout at 32 px with a 1000-class
    head, and a JPEG and a PNG photo), then the child's run."""
    from sklearn.datasets import load_sample_image  # only for this artefact's photos

    weights = os.path.join(folder, "ti16_imagenet.npz")
    np.savez(weights, **vit_jax_params(0, image_size=32, num_classes=1000, **TI16))
    paths = [os.path.join(folder, "china.jpg"), os.path.join(folder, "flower.png")]
    PIL.Image.fromarray(load_sample_image("china.jpg")).save(paths[0], quality=90)
    PIL.Image.fromarray(load_sample_image("flower.jpg")).save(paths[1])
    with open(os.path.join(folder, "classify.json"), "w") as f:
        json.dump({"weights": weights, "paths": paths}, f)
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", _PROGRAM, folder],
        env=env,
        cwd=folder,  # nothing importable there but what PYTHONPATH names
        capture_output=True,
        text=True,
        timeout=300,
    )
    with open(os.path.join(folder, "process.json"), "w") as f:
        json.dump({"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-3000:]}, f)


@pytest.fixture(scope="session")
def jax_without_tensorflow(tmp_path_factory):
    """The shared child's results, made once per test run: `part(name)` returns the part's fields
    after checking that the child ran to its end, the part passed, and no blocked package was
    imported; `inputs` names classify's checkpoint and photos."""
    folder = session_artefact(tmp_path_factory, "jax_without_tensorflow", _make)
    return JaxWithoutTensorflow(folder)


class JaxWithoutTensorflow:
    def __init__(self, folder):
        with open(os.path.join(folder, "process.json")) as f:
            self.process = json.load(f)
        self.results = None  # the child stopped before writing them: process["stderr"] says why
        if os.path.exists(os.path.join(folder, "results.json")):
            with open(os.path.join(folder, "results.json")) as f:
                self.results = json.load(f)
        with open(os.path.join(folder, "classify.json")) as f:
            self.inputs = json.load(f)

    def part(self, name):
        assert self.process["returncode"] == 0, self.process["stderr"]
        assert self.process["stdout"].strip().splitlines()[-1] == "ok", self.process["stdout"][-2000:]
        assert self.results["blocked_imported"] == [], self.results["blocked_imported"]
        result = self.results[name]
        assert result["ok"], result["error"]
        return result
