"""What a position-embedding type declares: the layers the model builds for it, its weights in a file.

A type is one value of `ViT(posemb=...)`. Its module subclasses `PosembType`, sets the class
attributes and overrides the methods it needs, and registers an instance
(`keras_vit.posembs.register`). The model, the weight layouts (.npz keys, Keras weight files, the
resize to another grid), the Hugging Face export and the trainers' --posemb read a type only
through this interface, so that a type is its own module and nothing else.
"""

import numpy as np
from keras import ops

from keras_vit import layers as vit_layers

# The official name of each encoder block's attention layer. A type whose weights live in the
# attention (attention_layer, as "relative") declares them under this name.
ATTENTION_LAYER = "MultiHeadDotProductAttention_1"


def npz_key(layer, variable):
    """The .npz key of a type's `variable` of `layer`, block 0's for the attention layer."""
    if layer == ATTENTION_LAYER:
        return f"Transformer/encoderblock_0/{layer}/{variable}"
    return f"Transformer/{layer}/{variable}"


class PosembType:
    """One position-embedding type. The defaults: a type that adds nothing and stores nothing."""

    # The `posemb` value.
    name = None
    # A few words for --posemb's help ("X and Y halves"); "" for none.
    summary = ""
    # The name of the layer `input_layer` returns, the one that adds position to the tokens
    # (None: the type adds nothing to them). Layer names are the weight format: never rename one.
    layer_name = None
    # The type's own weights, {layer name: variable names in the order the layer creates them}:
    # a Keras weights file keeps a layer's variables by that index, not by their names. A layer
    # other than ATTENTION_LAYER is a top-level one, under the official `Transformer/` scope;
    # `npz_key` gives the .npz keys. Two types that name one layer must name the same variables.
    variables = {}
    # {variable name: the axes that follow the patch grid}, resized when a file's grid is not the model's.
    grid_axes = {}
    # Whether timm's and transformers' ViTs have this position embedding (keras_vit.hf_export).
    hf_exportable = False

    def check_width(self, hidden_size):
        """A one-line ValueError for a token width `hidden_size` the type cannot use."""

    def input_layer(self, grid_size, num_prefix_tokens, patch_size=None, dtype=None):
        """The layer (named `layer_name`) that adds position information to the tokens, or None.

        `grid_size` is the (h, w) grid its weights are stored for; with `patch_size` set, the model
        takes any image size and calls the layer with `patch_input=` (the tensor the patches are
        cut from) so that it can follow each call's grid.
        """
        return None

    def attention_layer(self, grid_size, num_prefix_tokens, patch_size=None):
        """EncoderBlock's `attention_layer` argument ({"class_name", "config"}), or None for the plain one."""
        return None

    def stored_grid(self, params):
        """The (h, w) patch grid a vit_jax-layout dict stores this type's weights for, or None."""
        return None

    @property
    def adds_to_tokens(self):
        """Whether the tokens carry position embeddings of their own (what the visualisations compare)."""
        return self.layer_name is not None

    def identifying_key(self):
        """The .npz key whose presence says a file holds this type's weights, or None (no weights)."""
        for layer, names in self.variables.items():
            return npz_key(layer, names[0])
        return None

    def owns(self, key):
        """Whether the .npz `key` is one of this type's weights (in any block)."""
        layer, _, variable = key.rpartition("/")
        return variable in self.variables.get(layer.rpartition("/")[2], ())

    def adapt(self, key, value, shape, model, params, source):
        """The file's weight `key` made to fit the model's variable of `shape`: resized on its grid axes.

        `params` is the whole file (for what it records besides the weight), `source` names it in
        messages. A value that does not fit on another axis is returned as it is: the caller
        reports the mismatch.
        """
        axes = self.grid_axes.get(key.rpartition("/")[2], ())
        if not axes:
            return value
        value = np.asarray(value, np.float32)
        if value.ndim != len(shape) or any(
            value.shape[a] != shape[a] for a in range(value.ndim) if a not in axes
        ):
            return value
        resized = ops.convert_to_tensor(value)
        for axis in axes:
            resized = vit_layers._linear_resize_axis(resized, int(shape[axis]), axis=axis)
        return np.asarray(ops.convert_to_numpy(resized), np.float32)
