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
backend, and on the JAX backend Keras' tf.data support imports TensorFlow later) in a user's
program, not in the project's commands, which import no triton: on Linux, where both are
installed and TensorFlow is not yet imported. It loads the library only, not triton's Python
package (Python's `import triton` later finds it loaded): 0.07 s, and 72 MB more resident memory,
of which 67 MB are the library file's own clean pages (its symbol tables, which the kernel can
drop and read again) and 3 MB the process's own (triton 3.8, the AMD EPYC of family 25). A
library that does not load (a broken install) leaves things as they were. The standard library
only.
"""

import ctypes
import importlib.util
import os
import sys

# Triton's compiled library, inside its package directory.
LIBRARY = os.path.join("_C", "libtriton.so")


def installed(name, find_spec=importlib.util.find_spec):
    """The spec of top-level package `name`, or None where it is not installed (or an import
    hook refuses it, as an environment without it would)."""
    try:
        return find_spec(name)
    except (ImportError, ValueError):
        return None


def library_path(find_spec=importlib.util.find_spec):
    """Where triton's library is installed, or None where triton or TensorFlow is not."""
    if installed("tensorflow", find_spec) is None:
        return None
    triton = installed("triton", find_spec)
    if triton is None or not triton.submodule_search_locations:
        return None
    path = os.path.join(triton.submodule_search_locations[0], LIBRARY)
    return path if os.path.isfile(path) else None


def load_before_tensorflow(
    command=False, modules=None, platform=None, find_spec=importlib.util.find_spec, load=None
):
    """Loads triton's library where TensorFlow's later load would otherwise make importing triton
    crash; returns whether it did. `command`: this process runs one of the project's commands,
    which import no triton (the benchmarks import PyTorch before TensorFlow), so nothing is loaded."""
    modules = sys.modules if modules is None else modules
    platform = sys.platform if platform is None else platform
    if command or not platform.startswith("linux") or "tensorflow" in modules or "triton" in modules:
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
