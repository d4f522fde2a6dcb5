"""The registry of position-embedding types: `ViT(posemb=NAME)` builds the type registered as NAME.

The built-in types register in keras_vit/posembs/__init__.py, in the order --posemb and the
messages list them (the first is the default). A type of one's own registers the same way,
`register(MyType())`, before a model of it is built or a file of it is read.
"""

from keras_vit.posembs.base import ATTENTION_LAYER

_TYPES = {}


def register(posemb_type):
    """Adds `posemb_type` (a PosembType instance) under its name; returns it.

    Refused: a name registered already, and a layer another type declares with other variables
    (a Keras weights file names a layer's variables only by its layer, so the two could not be
    told apart there).
    """
    name = posemb_type.name
    if not isinstance(name, str) or not name:
        raise ValueError(f"a position-embedding type needs a name, got {name!r}")
    if name in _TYPES:
        raise ValueError(f"posemb type {name!r} is registered twice")
    declared = layer_variables()
    for layer, names in posemb_type.variables.items():
        if layer in declared and tuple(declared[layer]) != tuple(names):
            raise ValueError(
                f"posemb type {name!r}: layer {layer!r} holds {', '.join(declared[layer])} in another "
                "type; give the layer another name"
            )
    _TYPES[name] = posemb_type
    return posemb_type


def unregister(name):
    """Removes the type registered as `name` (for a test's own type)."""
    del _TYPES[name]


def names():
    """The registered names, in registration order."""
    return tuple(_TYPES)


def types():
    """The registered types, in registration order."""
    return tuple(_TYPES.values())


def check(name, hidden_size):
    """A one-line ValueError for an unknown type or a width the type cannot use."""
    # A tuple, not the dict: an unhashable value is refused with the same message.
    if name not in names():
        raise ValueError(f"posemb must be one of {', '.join(names())}; got {name!r}.")
    _TYPES[name].check_width(hidden_size)


def get(name):
    """The type registered as `name`; the one-line ValueError of `check` for another."""
    if name not in names():
        check(name, None)
    return _TYPES[name]


def layer_variables():
    """{layer name: its variable names} over every type's own weights."""
    return {layer: tuple(found) for kind in _TYPES.values() for layer, found in kind.variables.items()}


def top_level_layers():
    """The names of the types' own top-level layers: their weights are under `Transformer/`."""
    return tuple(layer for layer in layer_variables() if layer != ATTENTION_LAYER)


def input_layer_names():
    """The names of the layers that add position information to the tokens, over every type."""
    return tuple(kind.layer_name for kind in _TYPES.values() if kind.layer_name)


def of_params(params):
    """The name of the type whose weights a vit_jax-layout dict holds, or None (none stored)."""
    for kind in _TYPES.values():
        key = kind.identifying_key()
        if key is not None and key in params:
            return kind.name
    return None


def weightless():
    """The names of the types that store no weights (a file cannot tell them apart)."""
    return tuple(kind.name for kind in _TYPES.values() if not kind.variables)
