"""The model a trainer's config asks for: variant, shape overrides, weights, head.

Bad model or weights arguments become one-line `UsageError`s before anything is written.
"""

import keras

import keras_vit
from configs.fields import FIELDS
from keras_vit import checkpoints, fileio, hub, models, npz_layout
from keras_vit import weights as weights_lib
from keras_vit.variants import VARIANTS
from trainers.errors import UsageError, first_line

# big_vision's init_head_bias for sigmoid runs: a new head predicts sigmoid(-10) ~ 4.5e-5 for
# every class, so the first steps do not spend their gradient pushing thousands of negatives down.
SIGMOID_HEAD_BIAS = -10.0
# {path: params} of the one --weights file architecture_from_weights read, until build_model loads it.
_PARAMS_READ = {}


def model_kwargs(config, num_classes):
    """keras_vit.create_model keyword arguments for this config (trainers feed [-1, 1] images)."""
    kwargs = dict(
        image_size=config.image_size,
        num_classes=num_classes,
        include_preprocessing=False,
        dropout_rate=config.dropout_rate,
        stochastic_depth_rate=config.get("stochastic_depth", FIELDS["stochastic_depth"].default),
        classifier=config.classifier,
        posemb=config.get("posemb", FIELDS["posemb"].default),
        classifier_activation=None,  # the loss takes logits
    )
    for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
        if config[name]:
            kwargs[name] = config[name]
    hidden = kwargs.get("hidden_size", keras_vit.VARIANTS[config.model]["hidden_size"])
    # Masked patch prediction trains no pre-logits layer (it predicts from the patch tokens), so
    # its runs have none: the exported representation is the encoder's own.
    masked_patch = config.get("objective", FIELDS["objective"].default) == "masked_patch"
    kwargs["representation_size"] = hidden if config.pre_logits and not masked_patch else None
    return kwargs


def encoder_size(config):
    """(hidden size, number of patches) of the encoder this config builds, without building it."""
    kwargs = model_kwargs(config, num_classes=1)
    variant = VARIANTS[config.model]
    grid = models.patch_grid(
        (config.image_size, config.image_size),
        kwargs.get("patch_size", variant["patch_size"]),
        variant.get("resnet_layers"),
    )
    return kwargs.get("hidden_size", variant["hidden_size"]), grid[0] * grid[1]


def architecture_from_weights(path):
    """The shape fields a local weights file decides: {"model": ..., "patch_size": ..., ...}.

    A file of our own pre-training (or an official one) says what it is; building the model from
    it needs no shape flags. Hybrids take the official variant with the file's ResNet stem;
    everything else is an override of the config's variant.
    """
    try:
        # read_checkpoint: a Hub name, folder or .safetensors file is converted to vit_jax keys.
        params = weights_lib.read_checkpoint(path)[1]
    except (ValueError, OSError) as e:
        raise UsageError(f"--weights {path!r}: {first_line(e)}") from None
    # Kept for build_model, which loads them: a large (or remote) file is read once.
    _PARAMS_READ.clear()
    _PARAMS_READ[path] = params
    found = npz_layout.architecture(params)
    fields = {
        name: found[name] for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")
    }
    fields["classifier"] = found["classifier"]
    # None (sincos_2d and none store no weights) leaves --posemb to the flag.
    fields["posemb"] = found["posemb"]
    if found["resnet_layers"] is not None:
        fields["model"] = _hybrid_with_stem(path, tuple(found["resnet_layers"]))
    return {name: value for name, value in fields.items() if value is not None}


def _hybrid_with_stem(path, resnet_layers):
    """The official hybrid whose ResNet stem has `resnet_layers` (the encoder fields override the rest)."""
    for name, spec in VARIANTS.items():
        if spec.get("resnet_layers") is not None and tuple(spec["resnet_layers"]) == resnet_layers:
            return name
    raise UsageError(
        f"--weights {path!r}: a hybrid with ResNet stages {list(resnet_layers)} is not an official "
        "variant; build it with keras_vit.ViT(resnet_layers=...) in Python."
    )


def is_weights_file(weights):
    return (
        bool(weights)
        and weights.lower() != "none"
        and weights not in checkpoints.REGISTRY
        and not hub.is_hub_name(weights)
    )


def describes_itself(weights):
    """Whether --weights names a checkpoint that says its own shape: a file or a Hub model."""
    return hub.is_hub_name(weights) or (is_weights_file(weights) and fileio.exists(weights))


def weights_arg(config):
    return None if config.weights.lower() in ("", "none") else config.weights


def params_read(config):
    """The --weights file's parameters if they were read already (the command line reads a file to
    learn the model's shape from it), else None: create_model then reads the file itself."""
    weights = weights_arg(config)
    return _PARAMS_READ.pop(weights, None) if weights else None


def build_model(config, num_classes, pre_logits_from_weights=False, include_top=True, params=None):
    """The model for this config.

    pre_logits_from_weights: the weights file decides whether the model has a pre-logits
    layer (few-shot probes keep a pre-training run's representation); otherwise
    --pre_logits does (fine-tuning drops the checkpoint's, as vit_jax does).
    include_top: False builds no head (a frozen feature model): its output is the pooled
    representation, and loading says nothing about a head.
    params: the weights file's parameters, read once already (trainers/plan.py).
    """
    weights = weights_arg(config)
    if is_weights_file(weights) and not fileio.exists(weights):
        if "/" not in weights and "." not in weights:  # meant as a registry name
            known = ", ".join(checkpoints.names())
            raise UsageError(
                f"--weights {weights!r} is not a registry name; known names: {known} "
                "(or give a file path, or none)."
            )
        raise UsageError(
            f"--weights {weights!r}: no such file (give a registry name, a Hub name, a path, or none)."
        )
    kwargs = model_kwargs(config, num_classes)
    if pre_logits_from_weights and weights:
        del kwargs["representation_size"]
    if not include_top:
        kwargs.update(include_top=False, pooling=kwargs["classifier"])
    try:
        params = params_read(config) if params is None else params
        model = keras_vit.create_model(config.model, weights=weights, params=params, **kwargs)
    except (ValueError, OSError) as e:
        raise UsageError(
            f"cannot build {config.model} with --weights={config.weights}: {first_line(e)}"
        ) from None
    if not include_top:
        return model
    # Only fine-tuning has --new_head: a pre-training run's --weights keep the head they have.
    if weights and "new_head" in config and config.new_head:
        # The paper's fine-tuning always starts from a zero head, also when the checkpoint's
        # head happens to have the right number of classes.
        for variable in model.get_layer("head").weights:
            variable.assign(keras.ops.zeros(variable.shape, variable.dtype))
    if config.get("loss", FIELDS["loss"].default) == "sigmoid":
        _start_new_head_for_sigmoid(model.get_layer("head"))
    return model


def _start_new_head_for_sigmoid(head):
    """Sets the bias of a new head to SIGMOID_HEAD_BIAS; a head loaded from weights is kept.

    A new head is all zeros (from scratch, a checkpoint of another class count, --new_head);
    a trained one never is.
    """
    if any(bool(keras.ops.any(keras.ops.not_equal(variable, 0))) for variable in head.weights):
        return
    head.bias.assign(keras.ops.full(head.bias.shape, SIGMOID_HEAD_BIAS, head.bias.dtype))
