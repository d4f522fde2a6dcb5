"""Triton's compiler library loaded before TensorFlow, so that importing PyTorch's compiler later
does not kill the process.

TensorFlow's wheels from 2.20 on load their library with RTLD_GLOBAL (tensorflow/tensorflow#124205),
which makes the LLVM linked into TensorFlow the process's global copy. Triton's library links
its own LLVM; loaded after TensorFlow, its LLVM calls bind to TensorFlow's copy of another
version and the interpreter dies of a segmentation fault in the import. PyTorch imports triton
with its compiler (`torch.compile`, `torch._dynamo`) and with torchvision's ops, so
`import keras_vit` followed by `import timm` crashed wherever triton is installed, which PyTorch's
Linux wheels bring (TensorFlow 2.21, triton 3.8, torch 2.14, timm 1.0.31). Loaded first, with
RTLD_LOCAL, triton's library binds to its own LLVM and keeps it to itself, and TensorFlow's, loaded
after it, to TensorFlow's: both then work in one process, in either order of their Python imports.

keras_vit/startup.py calls `load_before_tensorflow` before importing Keras (Keras imports its
backend, and on the JAX backend Keras' tf.data support imports TensorFlow later): on Linux, where
both are installed and TensorFlow is not yet imported. It loads the library only (about 0.05 s),
not triton's Python package; Python's `import triton` later finds it loaded. A library that does
not load (a broken install) leaves things as they were. The standard library only.
"""

import ctypes
import importlib.util
import os
import sys

# Triton's compiled library, inside its package directory.
LIBRARY = os.path.join("_C", "libtriton.so")


def library_path(find_spec=importlib.util.find_spec):
    """Where triton's library is installed, or None where triton or TensorFlow is not."""
    if find_spec("tensorflow") is None:
        return None
    triton = find_spec("triton")
    if triton is None or not triton.submodule_search_locations:
        return None
    path = os.path.join(triton.submodule_search_locations[0], LIBRARY)
    return path if os.path.isfile(path) else None


def load_before_tensorflow(modules=None, platform=None, find_spec=importlib.util.find_spec, load=None):
    """Loads triton's library where TensorFlow's later load would otherwise make importing triton
    crash; returns whether it did."""
    modules = sys.modules if modules is None else modules
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux") or "tensorflow" in modules or "triton" in modules:
        return False
    path = library_path(find_spec)
    if path is None:
        return False
    load = load or (lambda path: ctypes.CDLL(path, mode=os.RTLD_LOCAL))
    try:
        load(path)
    except OSError:
        return False
    return True
