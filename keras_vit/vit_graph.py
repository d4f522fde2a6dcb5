"""What `keras_vit.ViT` checks in its arguments, and the layers it builds from them, in order.

The constructor is three steps: `settle` checks the arguments and resolves the ones that depend
on each other (a model without classes has no head, a head pools with the classifier, ...);
`build` calls the layers on a `keras.Input`, part by part (`_stem`, `_tokens`, `_encoder`,
`_pool_and_head`); the model keeps every settled argument as an attribute.

Layer names are the weight format (keras_vit/keras_layout.py): every name given here is a key of
each checkpoint keras_vit reads or writes, so none may change.
"""

import dataclasses
import difflib
import numbers
import operator

import keras
import numpy as np

from keras_vit import bias_add, grids, initializers, posembs, resnet
from keras_vit import layers as vit_layers

DEFAULT_CLASSES = 1000
# What the head reads: the class token, or the mean of the patch tokens (global average pooling).
CLASSIFIERS = ("token", "gap")
POOLINGS = (None, "token", "gap")


def check_arguments(given, valid, where, renamed=None):
    """A TypeError naming the closest valid argument for the first unknown one in `given`.

    `renamed`: {an argument of another signature: the one that means it here}.
    """
    renamed = renamed or {}
    for name in given:
        if name in valid:
            continue
        if name in renamed:
            hint = f"; use {renamed[name]}"
        else:
            close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else f"; valid ones: {', '.join(sorted(valid))}"
        raise TypeError(f"{where} got an unexpected keyword argument {name!r}{hint}")


def class_count(value, what):
    """`value` as an int >= 0 (NumPy integers too); a one-line ValueError for anything else."""
    try:
        count = operator.index(value) if not isinstance(value, bool) else -1
    except TypeError:
        count = -1
    if count < 0:
        raise ValueError(f"{what} must be a whole number >= 0 (0: no head), got {value!r}.")
    return count


def check_data_format():
    if keras.config.image_data_format() != "channels_last":
        raise ValueError(
            "keras_vit models take channels_last images (batch, height, width, channels), but "
            "keras.config.image_data_format() is 'channels_first'; call "
            "keras.config.set_image_data_format('channels_last') before building the model"
        )


def class_names_of(names, num_classes):
    """`names` as a list of one string per class, or None; a one-line ValueError otherwise."""
    if names is None:
        return None
    if isinstance(names, (str, bytes)) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"class_names must be a list of strings, one per class, got {names!r:.80}.")
    names = list(names)
    if len(names) != num_classes:
        raise ValueError(
            f"class_names has {len(names)} names for num_classes={num_classes}; give one name per "
            "class, in the order of the model's outputs (or None)"
        )
    return names


@dataclasses.dataclass(frozen=True)
class Settled:
    """The arguments of a ViT as its layers use them (see `settle`), and what they imply."""

    arguments: dict  # every ViT argument, resolved: what the model keeps as its attributes
    grid: tuple  # the (h, w) token grid; None on an axis of any size
    stored_grid: tuple  # the grid the position weights are stored for
    policy: object  # a keras.DTypePolicy, or None for the global one

    def __getattr__(self, name):
        try:
            return self.__dict__["arguments"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def dynamic(self):
        """Whether the model takes any size on an axis (its position layers read each call's grid)."""
        return None in self.arguments["image_size"]

    @property
    def prefix(self):
        """Tokens before the patches: 1 for the class token, else 0."""
        return 1 if self.arguments["classifier"] == "token" else 0


def settle(arguments, dtype=None):
    """`Settled` for ViT's keyword `arguments` (a dict of all of them) and its `dtype` policy."""
    a = dict(arguments)
    posembs.check(a["posemb"], a["hidden_size"])
    if a["fc_norm"] and a["classifier"] != "gap":
        raise ValueError("fc_norm=True normalises the mean of the patch tokens; it needs classifier='gap'.")
    if a["classifier"] not in CLASSIFIERS:
        raise ValueError(f"classifier must be 'token' or 'gap', got {a['classifier']!r}.")
    if a["pooling"] not in POOLINGS:
        raise ValueError(f"pooling must be None, 'token' or 'gap', got {a['pooling']!r}.")
    a["num_classes"] = class_count(a["num_classes"], "num_classes")
    if a["include_top"] and a["num_classes"] == 0:
        # As in timm: no classes, no head; the output is the pooled representation.
        a["include_top"], a["pooling"] = False, a["pooling"] or a["classifier"]
    if a["include_top"]:
        a["pooling"] = a["classifier"]
    if a["pooling"] == "token" and a["classifier"] == "gap":
        raise ValueError("pooling='token' needs a class token; this model has classifier='gap'.")
    a["class_names"] = class_names_of(a["class_names"], a["num_classes"])
    for flag in ("include_top", "include_preprocessing"):
        if not isinstance(a[flag], (bool, np.bool_)):  # "no" would count as True
            raise ValueError(f"{flag} must be True or False, got {a[flag]!r}.")
    patch = a["patch_size"]
    sides = tuple(patch) if isinstance(patch, (tuple, list)) else (patch,)
    # Integral: NumPy's integers too, as grids.pair takes them.
    if len(sides) > 2 or not all(
        isinstance(p, numbers.Integral) and not isinstance(p, bool) and p >= 1 for p in sides
    ):
        raise ValueError(f"patch_size must be a whole number >= 1 or a pair of them, got {patch!r}.")
    if isinstance(patch, np.integer):  # a Python int in the config, which JSON takes
        a["patch_size"] = int(patch)
    a["image_size"] = grids.image_size(a["image_size"])
    grid = grids.patch_grid(a["image_size"], a["patch_size"], a["resnet_layers"])
    stored = grids.stored_grid(a["image_size"], a["patch_size"], a["resnet_layers"], a["base_image_size"])
    a["resnet_layers"] = None if a["resnet_layers"] is None else tuple(a["resnet_layers"])
    a["base_image_size"] = grids.image_size(a["base_image_size"]) if a["base_image_size"] else None
    # One policy object for every layer: a string, a dict (from a config) or a DTypePolicy.
    policy = None if dtype is None else keras.dtype_policies.get(dtype)
    return Settled(arguments=a, grid=grid, stored_grid=stored, policy=policy)


def build(s):
    """(inputs, outputs, whether the blocks take the patch input) of the ViT `s` settles."""
    inputs = keras.Input((*s.image_size, s.num_channels), name="image")
    patch_input = _stem(inputs, s)
    x, attention_layer = _tokens(patch_input, s)
    # An any-size model's position layers read each call's grid off the patch input.
    grid_source = {"patch_input": patch_input} if s.dynamic else {}
    blocks_take_grid = bool(grid_source and attention_layer)
    x = _encoder(x, s, attention_layer, grid_source if blocks_take_grid else {})
    return inputs, _pool_and_head(x, s), blocks_take_grid


def _stem(x, s):
    """The input scaled to [-1, 1] (pixels in [0, 255]), through the hybrid's ResNet stem if any."""
    if s.include_preprocessing:
        x = keras.layers.Rescaling(1 / 127.5, offset=-1.0, name="rescaling", dtype=s.policy)(x)
    if s.resnet_layers is not None:
        x = resnet.resnet_stem(x, s.resnet_layers, s.resnet_width, dtype=s.policy)
    return x


def _tokens(patch_input, s):
    """(patch tokens with the class token and position information, the blocks' position layer)."""
    x = vit_layers.PatchEmbedding(s.patch_size, s.hidden_size, name="embedding", dtype=s.policy)(patch_input)
    if s.prefix:
        x = vit_layers.ClassToken(name="cls", dtype=s.policy)(x)
    # stored_grid: a fixed size's own grid; for any size, the grid of base_image_size.
    position = posembs.get(s.posemb)
    posemb_args = (s.stored_grid, s.prefix, s.patch_size if s.dynamic else None)
    position_layer = position.input_layer(*posemb_args, dtype=s.policy)
    if position_layer is not None:  # None: the type adds nothing to the tokens (relative, none)
        x = position_layer(x, **({"patch_input": patch_input} if s.dynamic else {}))
    x = keras.layers.Dropout(s.dropout_rate, name="embedding_dropout", dtype=s.policy)(x)
    return x, position.attention_layer(*posemb_args)


def _encoder(x, s, attention_layer, grid_source):
    """The L encoder blocks, then the final LayerNorm (unless fc_norm normalises the pooled token)."""
    for index in range(s.num_layers):
        x = vit_layers.EncoderBlock(
            s.num_heads,
            s.mlp_dim,
            dropout_rate=s.dropout_rate,
            attention_dropout_rate=s.attention_dropout_rate,
            stochastic_depth_rate=s.stochastic_depth_rate * index / max(s.num_layers - 1, 1),
            attention_layer=attention_layer,
            layer_norm_epsilon=s.layer_norm_epsilon,
            gelu_approximate=s.gelu_approximate,
            name=f"encoderblock_{index}",
            dtype=s.policy,
        )(x, **grid_source)
    if not s.fc_norm:
        x = keras.layers.LayerNormalization(
            epsilon=s.layer_norm_epsilon, name="encoder_norm", dtype=s.policy
        )(x)
    return x


def _pool_and_head(x, s):
    """Pooling, fc_norm, the pre-logits layer and the head, as the arguments ask; float32 out."""
    if s.pooling:
        x = vit_layers.TokenPooling(s.pooling, s.prefix, name=f"{s.pooling}_pool", dtype=s.policy)(x)
        if s.fc_norm:
            x = keras.layers.LayerNormalization(epsilon=s.layer_norm_epsilon, name="fc_norm", dtype=s.policy)(
                x
            )
    if s.pooling and s.representation_size:
        # Flax's nn.Dense default (LeCun normal, zero bias), not Keras' glorot_uniform; the bias
        # gradient of a bfloat16 training call summed in float32 (keras_vit.bias_add).
        x = bias_add.SummedBiasDense(
            s.representation_size,
            activation="tanh",
            name="pre_logits",
            kernel_initializer=initializers.LecunNormal(num_input_axes=1),
            dtype=s.policy,
        )(x)
    if s.include_top:
        # The official head starts at zero; logits and softmax stay float32 under mixed precision.
        return keras.layers.Dense(
            s.num_classes,
            activation=s.classifier_activation,
            kernel_initializer="zeros",
            name="head",
            dtype="float32",
        )(x)
    if x.dtype != "float32":
        x = keras.layers.Activation("linear", name="output_float32", dtype="float32")(x)
    return x
