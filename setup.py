"""Packaging for keras-vit: the Vision Transformer library and its tf.distribute trainers."""
from setuptools import find_packages, setup

setup(
    name="keras-vit",
    version="0.1.0",
    description="Vision Transformer (Dosovitskiy et al., ICLR 2021) for Keras 3, with "
                "official checkpoints and a tf.distribute trainer.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_vit", "keras_vit.*", "trainers", "trainers.*",
                                    "configs", "configs.*"]),
    package_data={"keras_vit": ["data/*.json"]},
    install_requires=[
        "tensorflow>=2.16",
        # Earlier Keras releases have known safe_mode bypasses.
        "keras>=3.13.2",
        "tensorflow-datasets",
        # tfds.builder imports it, but tensorflow-datasets does not declare it.
        "importlib_resources",
        "tensorboard",
        "absl-py",
        "ml-collections",
        "numpy",
        "scipy",
        "pillow",
        # The bundled real data set (UCI handwritten digits) for the demo.
        "scikit-learn",
    ],
    extras_require={
        "test": ["pytest", "pytest-timeout", "jax[cpu]", "ruff"],
        "plots": ["matplotlib"],
        # The peer that benchmarks/ measures against in the same run.
        "bench": ["keras-hub"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
