"""Position-embedding types: `ViT(posemb=NAME)` builds the type registered as NAME.

Each type is one module here that declares a `PosembType` (keras_vit/posembs/base.py): its
layers, its weights and their names, how they follow another grid, its width check. The model,
the weight layouts, the Hugging Face export and the trainers' --posemb read the types through
the registry (keras_vit/posembs/registry.py), never by name. `keras_vit.position_embeddings`
describes the built-in ones.
"""

# First, before layers.py: refuses a package mixed with another's files (keras_vit/_clash.py).
from keras_vit import _clash  # noqa: F401, I001

from keras_vit.posembs import learned_1d, learned_2d, none, relative, sincos_2d
from keras_vit.posembs.base import ATTENTION_LAYER, PosembType
from keras_vit.posembs.registry import (
    check,
    get,
    input_layer_names,
    layer_variables,
    names,
    of_params,
    register,
    top_level_layers,
    types,
    unregister,
    weightless,
)

# The registry line: the built-in types, in the order --posemb and the messages list them.
BUILT_IN = tuple(register(module.TYPE).name for module in (learned_1d, learned_2d, sincos_2d, relative, none))

# The type of every official checkpoint, and the default.
OFFICIAL = learned_1d.TYPE.name

__all__ = [
    "ATTENTION_LAYER",
    "BUILT_IN",
    "OFFICIAL",
    "PosembType",
    "check",
    "get",
    "input_layer_names",
    "layer_variables",
    "names",
    "of_params",
    "register",
    "top_level_layers",
    "types",
    "unregister",
    "weightless",
]
