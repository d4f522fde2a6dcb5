"""The Vision Transformer model, its variant table and the public constructors."""

import keras
from keras import ops

from keras_vit import _clash, initializers, position_embeddings, preprocessing, resnet  # noqa: F401
from keras_vit import layers as vit_layers
from keras_vit import weights as weights_lib
from keras_vit.variants import VARIANTS

DEFAULT_IMAGE_SIZE = 224
DEFAULT_CLASSES = 1000


def _pair(value):
    if isinstance(value, int):
        return (value, value)
    return tuple(int(v) for v in value)


def _image_size(value):
    """(height, width) of an image size: None (any size) for either or both."""
    if value is None:
        return (None, None)
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) != 2:
        raise ValueError(f"image_size must be an int or (height, width), got {value}.")
    return tuple(None if v is None else int(v) for v in value)


def patch_grid(image_size, patch_size, resnet_layers):
    """The (h, w) patch grid for an image size (None where the size is None).

    Like the official VALID patch convolution, a partial last row or column of patches is
    dropped (ViT-H/14 at 384 px has a 27 x 27 grid). The hybrid's SAME-padded stem rounds up
    at each of its stride-2 steps.
    """
    patch = _pair(patch_size)
    size = list(image_size)
    if resnet_layers is not None:
        # Root conv and max pool (stride 2 each), then every stage after the first.
        for _ in range(resnet.downsamplings(resnet_layers)):
            size = [None if s is None else -(-s // 2) for s in size]
    grid = tuple(None if s is None else s // p for s, p in zip(size, patch))
    if min((g for g in grid if g is not None), default=1) < 1:
        raise ValueError(
            f"image size {tuple(image_size)} is smaller than one patch of the token "
            f"grid (patch size {patch}); use a larger image_size."
        )
    return grid


@keras.saving.register_keras_serializable(package="keras_vit")
class ViT(keras.Model):
    """Vision Transformer (Dosovitskiy et al., 2021) as a functional Keras model.

    Args:
        image_size: int or (height, width). A size that is not a multiple of the patch
            size drops the partial last patch row/column, as the official models do.
            None, or None for the height or the width, makes one model that takes images
            of any size on that axis: the position embeddings are stored for the grid of
            `base_image_size` and resized to each call's grid (see
            `keras_vit.layers.PositionEmbedding`).
        patch_size: patch side P (on the ResNet feature map for hybrids).
        hidden_size, num_layers, num_heads, mlp_dim: D, L, heads and M of the encoder.
        num_classes: size of the head.
        classifier: "token" (class token) or "gap" (mean of patch tokens; no class token).
        representation_size: optional tanh "pre-logits" layer before the head.
        dropout_rate, attention_dropout_rate: dropout in the MLP/embeddings and attention.
        stochastic_depth_rate: drop-path rate of the last block; block i uses
            rate * i / (L - 1), as in timm and big_vision.
        include_top: whether to add the head.
        pooling: with include_top=False: None (all tokens), "token" or "gap".
        classifier_activation: activation of the head, None for logits.
        include_preprocessing: True: inputs are pixels in [0, 255]; False: in [-1, 1].
        num_channels: image channels.
        resnet_layers: units per stage of a BiT ResNet stem (hybrid variants), () for the
            stem's root alone (R+ViT-Ti/16), or None (no stem).
        resnet_width: width multiplier of that stem.
        base_image_size: int or (height, width): for an image_size with None, the size
            whose grid the stored position embeddings cover on those axes (default 224;
            the constructors pass the weights' own size). Unused for a fixed size.
        posemb: position information: "learned_1d" (official), "learned_2d", "sincos_2d",
            "relative" or "none"; see `keras_vit.position_embeddings`.
    """

    def __init__(
        self,
        image_size=DEFAULT_IMAGE_SIZE,
        patch_size=16,
        hidden_size=768,
        num_layers=12,
        num_heads=12,
        mlp_dim=3072,
        num_classes=DEFAULT_CLASSES,
        classifier="token",
        representation_size=None,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        stochastic_depth_rate=0.0,
        include_top=True,
        pooling=None,
        classifier_activation="softmax",
        include_preprocessing=True,
        num_channels=3,
        resnet_layers=None,
        resnet_width=1,
        base_image_size=None,
        posemb="learned_1d",
        **kwargs,
    ):
        position_embeddings.check_posemb(posemb, hidden_size)
        if not kwargs.get("name"):
            # Keras would derive "vi_t" from the class name, which is what its messages would
            # call the model. Only the model's own name: its layers' names are the weight format.
            uid = keras.backend.get_uid("vit")
            kwargs["name"] = "vit" if uid == 1 else f"vit_{uid - 1}"
        if classifier not in ("token", "gap"):
            raise ValueError(f"classifier must be 'token' or 'gap', got {classifier!r}.")
        if pooling not in (None, "token", "gap"):
            raise ValueError(f"pooling must be None, 'token' or 'gap', got {pooling!r}.")
        if include_top:
            pooling = classifier
        if pooling == "token" and classifier == "gap":
            raise ValueError("pooling='token' needs a class token; this model has classifier='gap'.")
        image_size = _image_size(image_size)
        grid = patch_grid(image_size, patch_size, resnet_layers)
        dynamic = None in image_size
        if dynamic:
            base = _image_size(base_image_size or DEFAULT_IMAGE_SIZE)
            if None in base:
                raise ValueError(f"base_image_size must be a size, got {base_image_size}.")
            # A fixed axis keeps its own size: only the None axes follow the base size.
            base = tuple(b if s is None else s for s, b in zip(image_size, base))
            stored_grid = patch_grid(base, patch_size, resnet_layers)
        else:
            stored_grid = grid
        resnet_layers = None if resnet_layers is None else tuple(resnet_layers)
        policy = kwargs.pop("dtype", None)

        inputs = keras.Input((*image_size, num_channels), name="image")
        x = inputs
        if include_preprocessing:
            x = keras.layers.Rescaling(1 / 127.5, offset=-1.0, name="rescaling", dtype=policy)(x)
        if resnet_layers is not None:
            x = resnet.resnet_stem(x, resnet_layers, resnet_width, dtype=policy)
        patch_input = x
        x = vit_layers.PatchEmbedding(patch_size, hidden_size, name="embedding", dtype=policy)(x)
        prefix = 1 if classifier == "token" else 0
        if prefix:
            x = vit_layers.ClassToken(name="cls", dtype=policy)(x)
        # An any-size model's position layers read each call's grid off the patch input.
        grid_source = {"patch_input": patch_input} if dynamic else {}
        posemb_args = (stored_grid, prefix, patch_size if dynamic else None)
        if posemb == "learned_1d" and dynamic:
            x = vit_layers.PositionEmbedding(
                stored_grid, prefix, patch_size=patch_size, name="posembed_input", dtype=policy
            )(x, patch_input)
        elif posemb == "learned_1d":
            x = vit_layers.PositionEmbedding(grid, prefix, name="posembed_input", dtype=policy)(x)
        else:
            position_layer = position_embeddings.input_layer(posemb, *posemb_args, dtype=policy)
            if position_layer is not None:  # None: relative (in the attention) and none
                x = position_layer(x, **grid_source)
        attention_layer = position_embeddings.attention_layer(posemb, *posemb_args)
        x = keras.layers.Dropout(dropout_rate, name="embedding_dropout", dtype=policy)(x)
        for index in range(num_layers):
            rate = stochastic_depth_rate * index / max(num_layers - 1, 1)
            x = vit_layers.EncoderBlock(
                num_heads,
                mlp_dim,
                dropout_rate=dropout_rate,
                attention_dropout_rate=attention_dropout_rate,
                stochastic_depth_rate=rate,
                attention_layer=attention_layer,
                name=f"encoderblock_{index}",
                dtype=policy,
            )(x, **(grid_source if attention_layer else {}))
        x = keras.layers.LayerNormalization(
            epsilon=vit_layers.LAYER_NORM_EPSILON, name="encoder_norm", dtype=policy
        )(x)
        if pooling:
            x = vit_layers.TokenPooling(pooling, prefix, name=f"{pooling}_pool", dtype=policy)(x)
        if pooling and representation_size:
            # Flax's nn.Dense default (LeCun normal, zero bias), not Keras' glorot_uniform.
            x = keras.layers.Dense(
                representation_size,
                activation="tanh",
                name="pre_logits",
                kernel_initializer=initializers.LecunNormal(num_input_axes=1),
                dtype=policy,
            )(x)
        if include_top:
            # The official head starts at zero; logits and softmax stay float32 under
            # mixed precision.
            x = keras.layers.Dense(
                num_classes,
                activation=classifier_activation,
                kernel_initializer="zeros",
                name="head",
                dtype="float32",
            )(x)
        elif x.dtype != "float32":
            x = keras.layers.Activation("linear", name="output_float32", dtype="float32")(x)
        super().__init__(inputs=inputs, outputs=x, **kwargs)

        self.image_size = image_size
        self.patch_size = patch_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.num_classes = num_classes
        self.classifier = classifier
        self.representation_size = representation_size
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.stochastic_depth_rate = stochastic_depth_rate
        self.include_top = include_top
        self.pooling = pooling
        self.classifier_activation = classifier_activation
        self.include_preprocessing = include_preprocessing
        self.num_channels = num_channels
        self.resnet_layers = resnet_layers
        self.resnet_width = resnet_width
        self.base_image_size = _image_size(base_image_size) if base_image_size else None
        self.grid_size = grid
        self.posemb = posemb
        self._warned_double_scaling = False

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "num_classes": self.num_classes,
            "classifier": self.classifier,
            "representation_size": self.representation_size,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "stochastic_depth_rate": self.stochastic_depth_rate,
            "include_top": self.include_top,
            "pooling": None if self.include_top else self.pooling,
            "classifier_activation": self.classifier_activation,
            "include_preprocessing": self.include_preprocessing,
            "num_channels": self.num_channels,
            "resnet_layers": self.resnet_layers,
            "resnet_width": self.resnet_width,
            "base_image_size": self.base_image_size,
            "posemb": self.posemb,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def token_grid(self, image_size):
        """The (h, w) token grid of images of `image_size` (int or (height, width)).

        `grid_size` for a fixed-size model; for one that takes any size, the grid of a
        given input (e.g. for `keras_vit.visualize.attention_rollout`).
        """
        return patch_grid(_image_size(image_size), self.patch_size, self.resnet_layers)

    def _check_pixels(self, images):
        # Pixels are never negative: a model that scales [0, 255] itself and is given negative
        # values is given scaled data, which it scales a second time. Checked only where the
        # data holds values (eager calls, the arrays given to fit/evaluate/predict), so a
        # compiled step never pays for it; warned once per model.
        if not self.include_preprocessing or self._warned_double_scaling:
            return
        self._warned_double_scaling = preprocessing.warn_if_scaled_for_model(images, self.name)

    def __call__(self, *args, **kwargs):
        if args:
            self._check_pixels(args[0])
        return super().__call__(*args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        self._check_pixels(x)
        return super().fit(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        self._check_pixels(x)
        return super().evaluate(x, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self._check_pixels(x)
        return super().predict(x, *args, **kwargs)

    def attention_maps(self, images):
        """Every block's attention probabilities for a batch, first block first.

        Returns a list of L arrays of shape (B, heads, T, T), T = tokens including the class
        token. Runs the layers eagerly with the unfused attention, so the fused path of the
        normal forward pass is untouched. A model that takes any size takes any size here
        too (T then follows the images: see `token_grid`).
        """
        self._check_pixels(images)
        x = ops.convert_to_tensor(images)
        patch_input = None
        for layer in self.layers:
            if layer.name == "encoderblock_0":
                break
            if isinstance(layer, (keras.layers.InputLayer, keras.layers.Dropout)):
                continue
            if layer.name == "embedding":
                patch_input = x
            if layer.name in position_embeddings.INPUT_LAYERS and layer.patch_size is not None:
                x = layer(x, patch_input)
            else:
                x = layer(x)
        maps = []
        relative_any_size = self.posemb == "relative" and None in self.image_size
        grid_source = {"patch_input": patch_input} if relative_any_size else {}
        for index in range(self.num_layers):
            x, probs = self.get_layer(f"encoderblock_{index}")(
                x, training=False, return_attention_scores=True, **grid_source
            )
            maps.append(probs)
        return maps

    def representation_model(self):
        """A model from images to the representation few-shot probes use.

        The pre-logits output when the model has that layer, else the pooled token
        (the class token, or the mean of patch tokens for classifier 'gap').
        """
        names = [layer.name for layer in self.layers]
        for name in ("pre_logits", "token_pool", "gap_pool"):
            if name in names:
                return keras.Model(self.input, self.get_layer(name).output, name=f"{self.name}_repr")
        prefix = 1 if self.classifier == "token" else 0
        pooled = vit_layers.TokenPooling(self.classifier, prefix, name=f"{self.classifier}_pool")(
            self.get_layer("encoder_norm").output
        )
        return keras.Model(self.input, pooled, name=f"{self.name}_repr")


def _read_weights(variant, weights, cache_dir=None):
    """What the weights decide about the model (native size, classes, pre-logits), and the
    params of a local file, read once."""
    if weights is None:
        return {}, None
    if not isinstance(weights, str):
        raise ValueError(
            f"weights must be None, a registry name or a file path, got {type(weights).__name__}."
        )
    return weights_lib.read_checkpoint(weights, variant=variant, cache_dir=cache_dir)


def create_model(variant, weights=None, image_size=None, num_classes=None, cache_dir=None, **kwargs):
    """Builds an official variant by name ("ViT-B_16", "R50+ViT-B_16", ...), optionally with weights.

    Args:
        variant: a key of VARIANTS.
        weights: None, a registry name (keras_vit.weights.REGISTRY) or a path to a .npz,
            .weights.h5 or .keras file. A file with learned_2d or relative position weights
            sets `posemb` too (unless given); registry weights need posemb="learned_1d".
        image_size: int or (height, width); default: the weights' own size, else 224.
            None for either or both (e.g. (None, None)): one model for any size, whose
            position embeddings keep the weights' own grid (no resize when loading) and are
            resized to each input's grid when called.
        num_classes: head size; default: the weights' own count, else 1000. Another count
            than the checkpoint's gets a new zero-initialised head.
        cache_dir: where downloads are cached (default: the Keras cache, under KERAS_HOME).
        **kwargs: any other ViT argument, overriding the variant's (e.g. dropout_rate).
    """
    if variant not in VARIANTS:
        raise ValueError(f"Unknown model {variant!r}; known models: {', '.join(VARIANTS)}.")
    if weights in weights_lib.REGISTRY and kwargs.get("posemb", "learned_1d") != "learned_1d":
        raise ValueError(
            f"the official weights {weights!r} have learned 1-D position embeddings; build with "
            f"posemb='learned_1d' to load them, or without weights for posemb={kwargs['posemb']!r}."
        )
    info, params = _read_weights(variant, weights, cache_dir)
    config = dict(VARIANTS[variant])
    for key in ("representation_size", "classifier", "posemb"):
        if info.get(key) is not None:
            config[key] = info[key]
    config.update(kwargs)
    config["image_size"] = image_size or info.get("image_size") or DEFAULT_IMAGE_SIZE
    if None in _image_size(config["image_size"]) and not config.get("base_image_size"):
        config["base_image_size"] = info.get("image_size") or DEFAULT_IMAGE_SIZE
    config["num_classes"] = num_classes or info.get("num_classes") or DEFAULT_CLASSES
    config.setdefault("name", variant.lower().replace("+", "_").replace("-", "_"))
    model = ViT(**config)
    if weights is not None:
        weights_lib.load_weights(model, weights, variant=variant, cache_dir=cache_dir, params=params)
    return model


def _application(
    variant,
    include_top,
    weights,
    input_shape,
    pooling,
    classes,
    classifier_activation,
    include_preprocessing,
    **kwargs,
):
    image_size, num_channels = None, kwargs.pop("num_channels", 3)
    if input_shape is not None:
        if len(input_shape) != 3 or input_shape[2] is None:
            raise ValueError(
                f"input_shape must be (height, width, channels) with a channel count "
                f"(height and width may be None), got {input_shape}."
            )
        image_size, num_channels = tuple(input_shape[:2]), input_shape[2]
    return create_model(
        variant,
        weights=weights,
        image_size=image_size,
        num_classes=classes,
        include_top=include_top,
        pooling=pooling,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing,
        num_channels=num_channels,
        **kwargs,
    )


_DOC = """Instantiates {variant}, optionally with official weights.

    Args:
        include_top: whether to keep the classification head. Without it, `pooling` picks
            the output: None (all tokens, (B, T, D)), "token" or "gap" ((B, D), through the
            pre-logits layer when the weights have one).
        weights: None (random), a registry name (see keras_vit.weights.REGISTRY), or a path
            to an official .npz (vit_jax or big_vision layout), a .weights.h5 or a .keras file.
        input_shape: (height, width, channels); default: the weights' own resolution, else
            224 x 224 x 3. Another size resizes the position embeddings when they load.
            (None, None, 3) (or None for one of the two) makes one model for any image size:
            the embeddings keep the weights' own grid and are resized to each input's grid
            when called, as loading would resize them for a model of that fixed size.
        pooling: see include_top.
        classes: head size; default: the weights' own, else 1000. Another count than the
            checkpoint's gets a new zero-initialised head.
        classifier_activation: activation of the head; None returns logits.
        include_preprocessing: True: the model takes pixels in [0, 255]; False: in [-1, 1].
        **kwargs: other ViT arguments (dropout_rate, stochastic_depth_rate, name, ...).

    Returns:
        A `keras_vit.ViT` model.
    """


def _make_constructor(function_name, variant):
    def constructor(
        include_top=True,
        weights=None,
        input_shape=None,
        pooling=None,
        classes=None,
        classifier_activation="softmax",
        include_preprocessing=True,
        **kwargs,
    ):
        return _application(
            variant,
            include_top,
            weights,
            input_shape,
            pooling,
            classes,
            classifier_activation,
            include_preprocessing,
            **kwargs,
        )

    constructor.__name__ = constructor.__qualname__ = function_name
    constructor.__doc__ = _DOC.format(variant=variant)
    return constructor


ViT_Ti16 = _make_constructor("ViT_Ti16", "ViT-Ti_16")
ViT_S16 = _make_constructor("ViT_S16", "ViT-S_16")
ViT_S32 = _make_constructor("ViT_S32", "ViT-S_32")
ViT_B8 = _make_constructor("ViT_B8", "ViT-B_8")
ViT_B16 = _make_constructor("ViT_B16", "ViT-B_16")
ViT_B32 = _make_constructor("ViT_B32", "ViT-B_32")
ViT_L16 = _make_constructor("ViT_L16", "ViT-L_16")
ViT_L32 = _make_constructor("ViT_L32", "ViT-L_32")
ViT_H14 = _make_constructor("ViT_H14", "ViT-H_14")
R_ViT_Ti16 = _make_constructor("R_ViT_Ti16", "R+ViT-Ti_16")
R26_ViT_S32 = _make_constructor("R26_ViT_S32", "R26+ViT-S_32")
R26_ViT_B32 = _make_constructor("R26_ViT_B32", "R26+ViT-B_32")
R50_ViT_B16 = _make_constructor("R50_ViT_B16", "R50+ViT-B_16")
R50_ViT_B32 = _make_constructor("R50_ViT_B32", "R50+ViT-B_32")
R50_ViT_L16 = _make_constructor("R50_ViT_L16", "R50+ViT-L_16")
R50_ViT_L32 = _make_constructor("R50_ViT_L32", "R50+ViT-L_32")

# Public constructor name -> official variant name.
CONSTRUCTORS = {
    "ViT_Ti16": "ViT-Ti_16",
    "ViT_S16": "ViT-S_16",
    "ViT_S32": "ViT-S_32",
    "ViT_B8": "ViT-B_8",
    "ViT_B16": "ViT-B_16",
    "ViT_B32": "ViT-B_32",
    "ViT_L16": "ViT-L_16",
    "ViT_L32": "ViT-L_32",
    "ViT_H14": "ViT-H_14",
    "R_ViT_Ti16": "R+ViT-Ti_16",
    "R26_ViT_S32": "R26+ViT-S_32",
    "R26_ViT_B32": "R26+ViT-B_32",
    "R50_ViT_B16": "R50+ViT-B_16",
    "R50_ViT_B32": "R50+ViT-B_32",
    "R50_ViT_L16": "R50+ViT-L_16",
    "R50_ViT_L32": "R50+ViT-L_32",
}
