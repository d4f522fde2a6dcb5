"""TensorFlow's oneDNN CPU kernels on every x86 CPU, not only the ones TensorFlow picks.

TensorFlow runs its CPU kernels on oneDNN by default only on CPUs with instructions for neural
networks (AVX-512 VNNI, AVX-512 BF16, AVX-VNNI, AMX); on the others, such as an AMD EPYC with AVX2 and no
AVX-512, it runs Eigen's, unless TF_ENABLE_ONEDNN_OPTS=1. There keras_vit's ViT-Ti/16 training
step (224 px, batch 16, float32) ran at 26% of TensorFlow's float32 matmul peak on Eigen's
kernels (3.7 images/s) and at 55% on oneDNN's (10.3 images/s; `python -m benchmarks.train`,
2026-12-02, docs/guides/benchmarks.md). TensorFlow reads the
variable once, as it is imported, so keras_vit sets it before importing Keras
(keras_vit/startup.py), where it is unset: a value the user set stays, TF_ENABLE_ONEDNN_OPTS=0
included, and a program that imported TensorFlow before keras_vit keeps TensorFlow's choice.
The standard library only.
"""

import os
import platform
import sys

VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
# Machines whose TensorFlow wheels have oneDNN's x86 kernels.
X86 = ("x86_64", "amd64", "x86", "i686")


def is_x86(machine=None):
    return (platform.machine() if machine is None else machine).lower() in X86


def ask_for_onednn(environ=None, modules=None, machine=None):
    """Sets TF_ENABLE_ONEDNN_OPTS=1 on an x86 machine where it is unset and TensorFlow is not yet
    imported; returns whether it did."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if VARIABLE in environ or "tensorflow" in modules or not is_x86(machine):
        return False
    environ[VARIABLE] = "1"
    return True
