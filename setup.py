"""Packaging for keras-vision-transformer (import name keras_vit): the Vision Transformer library
and its tf.distribute trainers."""

import re

from setuptools import find_packages, setup

# The project's home; mkdocs.yml's repo_url names the same (tests/test_packaging.py).
HOME = "https://github.com/keras-vit/keras-vit"


def index_description(path="README.md"):
    """README.md as the package index shows it. The README links to docs/ and to its own sections
    by relative links, which work on GitHub and in the docs site but lead nowhere on the index's
    page, where the README stands alone: there they name the files and sections on GitHub."""
    text = open(path, encoding="utf-8").read()

    def absolute(match):
        target = match.group(1)
        if target.startswith("#"):
            return f"]({HOME}{target})"
        return f"]({HOME}/blob/main/{target})"

    return re.sub(r"\]\((?!https?://|mailto:)([^)\s]+)\)", absolute, text)


def read_version(path="keras_vit/_version.py"):
    """The version, from the one file that holds it, without importing the package (which imports
    Keras, not installed yet when this runs)."""
    text = open(path, encoding="utf-8").read()
    return re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE).group(1)


# The library alone: Keras 3 without a backend, so a JAX or PyTorch environment stays as it is;
# the backend extras below bring one (`import keras_vit` without it says which to install, in one
# line: keras_vit/startup.py). tests/test_packaging.py checks these against what keras_vit imports.
INSTALL_REQUIRES = [
    # Earlier Keras releases have known safe_mode bypasses.
    "keras>=3.13.2",
    "numpy",
    "scipy",
    # keras.utils.load_img, how images get to a model outside the trainers, needs it, and
    # Keras does not declare it.
    "pillow",
]

# Keras' backends, one extra each, named as the backends are (KERAS_BACKEND): pip install
# "keras-vision-transformer[jax]". keras_vit/startup.py names them when Keras' backend is missing.
# JAX brings its CPU jaxlib; on a GPU or TPU install JAX's build for it.
BACKEND_REQUIRES = {
    "tensorflow": ["tensorflow>=2.16"],
    "jax": ["jax"],
    "torch": ["torch"],
    # Inference only: Keras' OpenVINO backend runs `predict` and calls, not training.
    "openvino": ["openvino"],
}

# The trainers and configs (TensorFlow only): pip install "keras-vision-transformer[train]".
# tests/test_packaging.py checks these against what trainers/ and configs/ import.
TRAIN_REQUIRES = [
    "tensorflow>=2.16",
    "tensorflow-datasets",
    # tfds.builder imports it, but tensorflow-datasets does not declare it.
    "importlib_resources",
    "tensorboard",
    "absl-py",
    "ml-collections",
    # The bundled real data set (UCI handwritten digits) for the demo.
    "scikit-learn",
    # The attention and few-shot pictures the trainers log to TensorBoard.
    "matplotlib",
    # The jax engine (--engine=jax); on a GPU or TPU install JAX's build for it.
    "jax",
]

# `python -m keras_vit.export`: SavedModel and LiteRT files need TensorFlow, ONNX files torch,
# onnxscript, onnx-ir (its graph passes) and onnx (torch.onnx's exporter, on Keras' PyTorch
# backend); each is checked in onnxruntime or ai-edge-litert's interpreter (TensorFlow's own
# tf.lite.Interpreter is deprecated).
EXPORT_REQUIRES = [
    "tensorflow>=2.16",
    "torch",
    "onnxscript",
    "onnx-ir",
    "onnx",
    "onnxruntime",
    "ai-edge-litert",
]

# The documentation site (`make docs`, which `make test` runs): MkDocs with the Material theme,
# mkdocstrings for the API reference from the docstrings, and the plugin that makes the README the
# site's first page. Bounded to the major releases mkdocs.yml is written for.
DOCS_REQUIRES = [
    "mkdocs>=1.6,<2",
    "mkdocs-material>=9.5,<10",
    "mkdocstrings[python]>=0.26,<2",
    "mkdocs-include-markdown-plugin>=7,<8",
]

# Hugging Face Hub checkpoints (timm and transformers safetensors, keras_vit.hub): reading
# safetensors never unpickles; huggingface_hub downloads with its cache, offline mode and token.
HUB_REQUIRES = ["safetensors", "huggingface_hub"]

# The tests run the trainers too, so they need everything [train] installs. The list is
# repeated rather than written as "keras-vision-transformer[train]": pip resolves such a
# self-reference only since 21.2 (and an older pip or another installer may fetch it from the index).
# ruff is pinned: `make test` enforces its formatter's output, which changes between releases.
# nbclient, nbformat and ipykernel run the colab/ notebooks top to bottom (jupyter_client: the
# tests start the kernels themselves).
# keras-hub: tests/test_benchmarks.py runs the benchmarks against it (it brings tensorflow-text
# of the installed TensorFlow's release).
# optax: tests/test_optimizers.py holds the trainers' SGD against optax's own update.
# jax and torch: the library's parity tests run on all three Keras backends (tests/test_backends.py).
TEST_REQUIRES = [
    "pytest",
    "pytest-timeout",
    "pytest-xdist",  # `make test` runs the suite in two worker processes
    "jax[cpu]",
    "optax",
    "ruff==0.17.6",
    "nbclient",
    "nbformat",
    "ipykernel",
    "jupyter-client",
    "keras-hub",
    # tests/test_hf_*.py: random timm and transformers ViTs saved by their own code must give the
    # same logits in keras_vit, and keras_vit's exports must load back in them.
    "timm",
    "transformers",
    "torch",
    # docs/guides/deploy.md runs an ONNX export on OpenVINO too.
    "openvino",
]

# Not "keras-vit": that name on the package index is an unrelated project that also installs a
# `keras_vit` package (keras_vit/_clash.py refuses the mix of the two).
setup(
    name="keras-vision-transformer",
    version=read_version(),
    description="Vision Transformer (Dosovitskiy et al., ICLR 2021) for Keras 3, with "
    "official checkpoints and a tf.distribute trainer.",
    long_description=index_description(),
    long_description_content_type="text/markdown",
    url=HOME,
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(
        include=["keras_vit", "keras_vit.*", "trainers", "trainers.*", "configs", "configs.*"]
    ),
    # trainers.data's is the digits' stored split (trainers/data/digits.py).
    package_data={"keras_vit": ["data/*.json"], "trainers.data": ["*.npz"]},
    install_requires=INSTALL_REQUIRES,
    extras_require={
        **BACKEND_REQUIRES,
        "train": TRAIN_REQUIRES,
        "test": TEST_REQUIRES + TRAIN_REQUIRES + EXPORT_REQUIRES + HUB_REQUIRES,
        "hub": HUB_REQUIRES,
        "docs": DOCS_REQUIRES,
        "export": EXPORT_REQUIRES,
        "plots": ["matplotlib"],
        # The peers benchmarks/ measures against in the same run: keras-hub (same Keras) and
        # timm on PyTorch (timm brings torchvision); JAX runs the Keras contestants on a GPU
        # (benchmarks.accelerator; there, install JAX's CUDA build). keras_vit itself also runs
        # on Keras' PyTorch backend and, exported to ONNX (torch.onnx with onnxscript, onnx), on
        # ONNX Runtime and OpenVINO.
        "bench": ["keras-hub", "timm", "torch", "jax", "onnxscript", "onnx", "onnxruntime", "openvino"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
