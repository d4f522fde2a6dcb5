"""The Vision Transformer model, its variant table and the public constructors."""

import inspect
import os

import keras
from keras import ops

from keras_vit import (
    _clash,  # noqa: F401  (first: refuses a package mixed with another's files)
    class_token_only,
    deferred_init,
    grids,
    keras_layout,
    npz_layout,
    openvino_predict,
    posembs,
    preprocessing,
    vit_graph,
    xla_inference,
)
from keras_vit import layers as vit_layers
from keras_vit import weights as weights_lib
from keras_vit.variants import VARIANTS
from keras_vit.vit_graph import CLASSIFIERS, DEFAULT_CLASSES, check_arguments, class_count  # noqa: F401

DEFAULT_IMAGE_SIZE = grids.DEFAULT_IMAGE_SIZE
# Keras' own arguments of a model, besides the ViT's.
_KERAS_ARGUMENTS = ("name", "trainable", "dtype")
_check_data_format = vit_graph.check_data_format

patch_grid = grids.patch_grid
_image_size = grids.image_size


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
            "relative" or "none" (see `keras_vit.position_embeddings`), or a type registered
            with `keras_vit.posembs.register`.
        layer_norm_epsilon: epsilon of every LayerNorm (1e-6 official and timm; transformers'
            ViT configs say 1e-12).
        gelu_approximate: True: the MLP's GELU is the tanh approximation (official, Flax's
            default); False: the exact erf GELU of timm and transformers checkpoints.
        fc_norm: with classifier="gap" only: normalise the pooled token (a LayerNorm named
            "fc_norm") in place of the tokens before pooling (timm's global_pool="avg" models).
        class_names: None, or one name per class in the order of the outputs (a Hub
            checkpoint's labels, say), which `keras_vit.predict` prints. Kept, as every
            argument is, by get_config, `.keras` files and the `.weights.h5` and `.npz` files
            keras_vit writes (`model.save_weights`, `keras_vit.weights.save_npz`).
        dtype: a Keras dtype policy for this model ("mixed_bfloat16", "mixed_float16",
            "bfloat16", a keras.DTypePolicy, ...); default: the global policy. Outputs stay
            float32; get_config keeps it.
        name, trainable: as for any Keras model; any other keyword is a TypeError.

    num_classes=0 with include_top=True builds no head (as timm): the output is the pooled
    representation, as include_top=False with pooling=classifier.
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
        layer_norm_epsilon=vit_layers.LAYER_NORM_EPSILON,
        gelu_approximate=vit_layers.GELU_APPROXIMATE,
        fc_norm=False,
        class_names=None,
        **kwargs,
    ):
        arguments = {name: value for name, value in locals().items() if name in _OWN_ARGUMENTS}
        check_arguments(kwargs, _VIT_ARGUMENTS, "ViT()")
        _check_data_format()
        settled = vit_graph.settle(arguments, kwargs.pop("dtype", None))
        if not kwargs.get("name"):
            # Keras would derive "vi_t" from the class name, which is what its messages would
            # call the model. Only the model's own name: its layers' names are the weight format.
            uid = keras.backend.get_uid("vit")
            kwargs["name"] = "vit" if uid == 1 else f"vit_{uid - 1}"
        inputs, outputs, self._blocks_take_grid = vit_graph.build(settled)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        if settled.policy is not None:
            # Functional models drop the dtype argument; compile() reads the model's policy
            # (mixed_float16 gets a loss-scaling optimizer).
            self.dtype_policy = settled.policy
        # Every argument, as the layers use it, is an attribute, and get_config returns them all.
        for name, value in settled.arguments.items():
            setattr(self, name, value)
        self.grid_size = settled.grid
        self.policy_argument = settled.policy
        self._warned_double_scaling = False

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        config.update({name: getattr(self, name) for name in _OWN_ARGUMENTS})
        # A head pools as its classifier says; pooling is an argument only without one.
        config["pooling"] = None if self.include_top else self.pooling
        policy = self.policy_argument
        config["dtype"] = None if policy is None else keras.dtype_policies.serialize(policy)
        if config["class_names"] is None:
            del config["class_names"]  # the default: a .keras file that keras_vit 0.1.0 also reads
        return config

    @classmethod
    def from_config(cls, config):
        if deferred_init.in_keras_load():
            # keras.saving.load_model assigns every weight next: drawing them first is wasted
            # (seconds on JAX, where each initializer compiles).
            with deferred_init.without_initializers():
                return cls(**config)
        return cls(**config)

    def save_weights(self, filepath, *args, **kwargs):
        """keras.Model.save_weights, plus the model's config and the grid of a non-square
        learned position table.

        The config (class names included) lets `load_model` rebuild the model from the file
        alone. A table of 200 rows could be 10 x 20 or 20 x 10: the file records which, so that
        it loads into a model of any size (`keras_vit.npz_layout.POSEMB_GRID`).
        """
        super().save_weights(filepath, *args, **kwargs)
        path = os.fspath(filepath)
        if path.endswith(".weights.h5") and os.path.isfile(path):  # not a sharded or remote save
            keras_layout.record_model(path, self)

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
            self._check_image_shape(args[0])
            self._check_pixels(args[0])
        return super().__call__(*args, **kwargs)

    def _check_image_shape(self, images):
        # Keras' own input check lets a channel count of 1 through either way: TensorFlow then ran
        # RGB images through a grayscale model as a grouped convolution, giving outputs, and the
        # reverse failed deep inside the patch embedding. Images smaller than one patch, in a
        # model of any size, failed as deep. Read from the static shape: no cost in a compiled step.
        shape = getattr(images, "shape", None)
        if shape is None or len(shape) != 4:
            return
        expected, got = self.num_channels, shape[-1]
        if got is not None and got != expected:
            raise ValueError(
                f"{self.name} takes images of {expected} channels but was given {got} (shape "
                f"{tuple(shape)}); convert the images, or build the model for {got} (num_channels, or "
                "input_shape's last axis)"
            )
        size = tuple(shape[1:3])
        if None not in size and self.resnet_layers is None:
            patch = grids.pair(self.patch_size)
            if size[0] < patch[0] or size[1] < patch[1]:
                raise ValueError(
                    f"{self.name} was given images of {size[0]} x {size[1]} pixels, smaller than one "
                    f"{patch[0]} x {patch[1]} patch; pass larger images"
                )

    def call(self, inputs, training=None, mask=None):
        # float32 inference traced on an x86 CPU without AVX-512: one XLA-compiled call
        # (keras_vit/xla_inference.py says where and why).
        if mask is None and xla_inference.applies(self, inputs, training):
            return xla_inference.compiled(self)(inputs)
        if self.pooling != "token":
            return super().call(inputs, training=training, mask=mask)
        # The output reads the class token alone: the last block computes that row only
        # (keras_vit/class_token_only.py), and the layers after it work on it row by row.
        block = class_token_only.last_encoder_block(self)
        return class_token_only.call(super().call, block, inputs, training=training, mask=mask)

    def fit(self, x=None, *args, **kwargs):
        self._check_pixels(x)
        return super().fit(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        self._check_pixels(x)
        return super().evaluate(x, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self._check_pixels(x)
        return super().predict(x, *args, **kwargs)

    def make_predict_function(self, force=False):
        # On Keras' OpenVINO backend: compiled per input shape, at the model's precision, and
        # again after its weights change (keras_vit/openvino_predict.py says why).
        if keras.backend.backend() != "openvino":
            return super().make_predict_function(force)
        if self.predict_function is None or force:
            self.predict_function = openvino_predict.CompiledPredict(self)
        return self.predict_function

    def test_step(self, *args):
        # evaluate and test_on_batch on Keras' OpenVINO backend: from the graph predict compiles.
        # Each backend's trainer has a signature of its own (JAX's takes its state first).
        if keras.backend.backend() != "openvino":
            return super().test_step(*args)
        return openvino_predict.test_step(self, *args)

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
            if layer.name in posembs.input_layer_names() and layer.patch_size is not None:
                x = layer(x, patch_input)
            else:
                x = layer(x)
        maps = []
        grid_source = {"patch_input": patch_input} if self._blocks_take_grid else {}
        for index in range(self.num_layers):
            x, probs = self.get_layer(f"encoderblock_{index}")(
                x, training=False, return_attention_scores=True, **grid_source
            )
            maps.append(probs)
        return maps

    def representation_model(self):
        """A model from images to the representation few-shot probes use.

        The pre-logits output when the model has that layer, else the pooled token
        (the class token, or the mean of patch tokens for classifier 'gap'). A class-token
        model's is a `class_token_only.ClassTokenModel`: its last block computes the class
        token alone, as the model's own call does.
        """
        model_class = class_token_only.ClassTokenModel if self.classifier == "token" else keras.Model
        names = [layer.name for layer in self.layers]
        for name in ("pre_logits", "fc_norm", "token_pool", "gap_pool"):
            if name in names:
                return model_class(self.input, self.get_layer(name).output, name=f"{self.name}_repr")
        prefix = 1 if self.classifier == "token" else 0
        last = "fc_norm" if self.fc_norm else "encoder_norm"
        tokens = self.get_layer(f"encoderblock_{self.num_layers - 1}" if self.fc_norm else last).output
        pooled = vit_layers.TokenPooling(
            self.classifier, prefix, name=f"{self.classifier}_pool", dtype=self.policy_argument
        )(tokens)
        if self.fc_norm:
            pooled = self.get_layer(last)(pooled)  # the model's own layer: shared weights
        return model_class(self.input, pooled, name=f"{self.name}_repr")


# Every keyword argument ViT() takes.
_OWN_ARGUMENTS = tuple(n for n in inspect.signature(ViT.__init__).parameters if n not in ("self", "kwargs"))
_VIT_ARGUMENTS = (*_OWN_ARGUMENTS, *_KERAS_ARGUMENTS)


def _read_weights(variant, weights, cache_dir=None, params=None):
    """What the weights decide about the model (native size, classes, pre-logits), and the
    params of a local file, read once."""
    if weights is None:
        return {}, None
    if not isinstance(weights, str):
        raise ValueError(
            f"weights must be None, a registry name or a file path, got {type(weights).__name__}."
        )
    return weights_lib.read_checkpoint(weights, variant=variant, cache_dir=cache_dir, params=params)


def create_model(
    variant, weights=None, image_size=None, num_classes=None, cache_dir=None, params=None, **kwargs
):
    """Builds an official variant by name ("ViT-B_16", "R50+ViT-B_16", ...), optionally with weights.

    Args:
        variant: a key of VARIANTS.
        weights: None, a registry name (keras_vit.weights.REGISTRY), a path to a .npz,
            .weights.h5 or .keras file, or a timm / transformers checkpoint (a Hub name such as
            "hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", a folder or a .safetensors
            file), whose LayerNorm epsilon, GELU form, pooling and class names the model takes
            (`model.class_names`). A file with learned_2d or relative position weights
            sets `posemb` too (unless given); registry weights need posemb="learned_1d".
        image_size: int or (height, width); default: the weights' own size, else 224.
            None for either or both (e.g. (None, None)): one model for any size, whose
            position embeddings keep the weights' own grid (no resize when loading) and are
            resized to each input's grid when called.
        num_classes: head size; default: the weights' own count, else 1000. Another count
            than the checkpoint's gets a new zero-initialised head.
        cache_dir: where downloads are cached (default: the Keras cache, under KERAS_HOME).
        params: the contents of the `weights` file as `keras_vit.weights.read_params` returned
            them, when the caller has read it already (it is then not read a second time).
        **kwargs: any other ViT argument, overriding the variant's (e.g. dropout_rate).
    """
    if variant not in VARIANTS:
        raise ValueError(f"Unknown model {variant!r}; known models: {', '.join(VARIANTS)}.")
    # Every argument is checked before any weights are read.
    check_arguments(kwargs, _VIT_ARGUMENTS, "create_model()")
    _check_data_format()
    if weights in weights_lib.REGISTRY and kwargs.get("posemb", posembs.OFFICIAL) != posembs.OFFICIAL:
        raise ValueError(
            f"the official weights {weights!r} have learned 1-D position embeddings; build with "
            f"posemb='learned_1d' to load them, or without weights for posemb={kwargs['posemb']!r}."
        )
    info, params = _read_weights(variant, weights, cache_dir, params)
    config = dict(VARIANTS[variant])
    for key in ("representation_size", "classifier", *weights_lib.MODEL_FIELDS):
        if info.get(key) is not None:
            config[key] = info[key]
    config.update(kwargs)
    config["image_size"] = image_size or info.get("image_size") or DEFAULT_IMAGE_SIZE
    if None in _image_size(config["image_size"]) and not config.get("base_image_size"):
        config["base_image_size"] = info.get("image_size") or DEFAULT_IMAGE_SIZE
    if num_classes is None:
        num_classes = info.get("num_classes") or DEFAULT_CLASSES
    config["num_classes"] = num_classes
    config.setdefault("name", variant.lower().replace("+", "_").replace("-", "_"))
    # The checkpoint's own class names (a Hub model's labels, a saved model's), for
    # keras_vit.predict; not for a new head of another size.
    names = info.get("class_names")
    if names is not None and len(names) == class_count(num_classes, "num_classes"):
        config.setdefault("class_names", names)
    if weights is None:
        return ViT(**config)
    with deferred_init.without_initializers():  # every weight is assigned from the file next
        model = ViT(**config)
    weights_lib.load_weights(model, weights, variant=variant, cache_dir=cache_dir, params=params)
    return model


def load_model(path):
    """The model a keras_vit file holds, as it was saved: all its arguments and its weights.

    `path`: a `.keras` file (read by `keras.saving.load_model`, in safe mode), or a `.npz` or
    `.weights.h5` file that keras_vit wrote (`keras_vit.weights.save_npz`,
    `model.save_weights`), local or remote: those carry the model's config. A file without
    one (an official checkpoint, a file of an older version) is a one-line CheckpointError:
    build its model with `create_model(variant, weights=path)`. No initializer runs: the
    model's weights are the file's from the start.
    """
    path = os.fspath(path)
    if path.endswith(".keras"):
        return keras.saving.load_model(path)
    params = weights_lib.read_params(path)
    config = npz_layout.saved_config(params)
    if config is None:
        raise weights_lib.CheckpointError(
            f"{path}: holds weights without a model config (an official checkpoint, or a file of "
            "an older keras_vit); build its model with keras_vit.create_model(variant, weights=path)"
        )
    with deferred_init.without_initializers():
        model = ViT(**config)
    weights_lib.assign_params(model, params, path)
    return model


# Arguments of ViT() that the constructors name as keras.applications does.
_RENAMED = {"image_size": "input_shape", "num_classes": "classes"}


def _application(
    function_name,
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
    check_arguments(kwargs, _CONSTRUCTOR_ARGUMENTS, f"{function_name}()", _RENAMED)
    if kwargs.pop("input_tensor", None) is not None:
        raise ValueError(
            f"{function_name}: input_tensor is not supported; build the model, then call it on "
            "the tensor: outputs = model(input_tensor)"
        )
    _check_data_format()
    if classes is not None:
        classes = class_count(classes, f"{function_name}: classes")
    image_size, num_channels = None, kwargs.pop("num_channels", 3)
    if input_shape is not None:
        if not isinstance(input_shape, (tuple, list)) or len(input_shape) != 3 or input_shape[2] is None:
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
        weights: None (random), a registry name (see keras_vit.weights.REGISTRY), a path
            to an official .npz (vit_jax or big_vision layout), a .weights.h5 or a .keras file,
            or a timm / transformers checkpoint: a Hub name ("hf-hub:timm/NAME",
            "hf://google/vit-..."), its folder or its .safetensors file.
        input_shape: (height, width, channels); default: the weights' own resolution, else
            224 x 224 x 3. Another size resizes the position embeddings when they load.
            (None, None, 3) (or None for one of the two) makes one model for any image size:
            the embeddings keep the weights' own grid and are resized to each input's grid
            when called, as loading would resize them for a model of that fixed size.
        pooling: see include_top.
        classes: head size; default: the weights' own, else 1000. Another count than the
            checkpoint's gets a new zero-initialised head. 0: no head (as timm), the output
            is the pooled representation.
        classifier_activation: activation of the head; None returns logits.
        include_preprocessing: True: the model takes pixels in [0, 255]; False: in [-1, 1].
        **kwargs: other ViT arguments (dropout_rate, stochastic_depth_rate, name, ...), and
            dtype: any Keras dtype policy ("mixed_bfloat16", a keras.DTypePolicy, ...) for
            this model. An unknown one is a TypeError naming the closest valid one;
            input_tensor (keras.applications) and channels_first data are refused.

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
            function_name,
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


def _constructor_arguments():
    """Every keyword argument a public constructor (ViT_B16, ...) takes."""
    own = inspect.signature(_make_constructor("ViT_B16", "ViT-B_16")).parameters
    vit = [n for n in _VIT_ARGUMENTS if n not in _RENAMED and n not in own]
    return (*[n for n in own if n != "kwargs"], "input_tensor", "cache_dir", *vit)


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
_CONSTRUCTOR_ARGUMENTS = _constructor_arguments()

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
