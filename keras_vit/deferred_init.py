"""Building a model whose weights are about to be loaded, without running their initializers.

A Keras layer runs each weight's initializer when it creates the weight. On the JAX backend each
random initializer is compiled for each shape on its first call, so a first
`keras.saving.load_model` of even a tiny ViT spent seconds drawing weights it then overwrote.
Inside `without_initializers()`, weights are created as Keras creates them in a
`keras.StatelessScope` (with no value: the initializer is kept for later), and on leaving it
they are given zeros made by NumPy, which costs no compilation on any backend; the loader then
assigns the checkpoint's values. A model built without it (every fresh model) is initialized
as before.

Keras' own loading (`keras.saving.load_model`, Orbax checkpoints) builds the model from its config
inside an `ObjectSharingScope` and loads every weight after it; `in_keras_load()` tells
`ViT.from_config` that it is called there.
"""

import contextlib

import keras
import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy, for the zeros of such weights)
import numpy as np
from keras.src.backend.common import global_state
from keras.src.backend.common import variables as keras_variables
from keras.src.backend.common.stateless_scope import StatelessScope, in_stateless_scope

_PENDING = "uninitialized_variables"  # Keras' list of weights created without a value
_SHARED_OBJECTS = "shared_objects/id_to_obj_map"  # set by ObjectSharingScope while it is active


def in_keras_load():
    """Whether Keras is deserializing a saved model, whose weights it loads next."""
    return global_state.get_global_attribute(_SHARED_OBJECTS) is not None


def _zeros(shape, dtype=None):
    return np.zeros(shape, np.dtype(keras.backend.standardize_dtype(dtype or "float32")))


@contextlib.contextmanager
def without_initializers():
    """Weights created inside get zeros in place of their initializers' draws (see the module).

    Only Keras initializers are replaced; a weight with a plain function as its initializer (a
    dropout layer's seed state) gets that function's value as usual. Inside another stateless
    scope (a trace) nothing changes: Keras defers those weights already.
    """
    if in_stateless_scope():
        yield
        return
    before = {id(v) for v in global_state.get_global_attribute(_PENDING, None) or ()}
    try:
        with StatelessScope(initialize_variables=False):
            yield
    finally:
        for variable in global_state.get_global_attribute(_PENDING, None) or ():
            if id(variable) not in before and isinstance(
                variable._initializer, keras.initializers.Initializer
            ):
                variable._initializer = _zeros
        # Gives every weight created inside its value; leaving any pending would make Keras
        # initialize it again at the next scope's exit (an error for a weight assigned since).
        keras_variables.initialize_all_variables()
