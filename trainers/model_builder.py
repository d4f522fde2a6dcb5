"""The model a run's ModelSettings describe: variant, shape overrides, weights, head.

Bad model or weights arguments become one-line `UsageError`s before anything is written.
"""

import dataclasses
import types

import keras

import keras_vit
from keras_vit import checkpoints, fileio, hub, models, npz_layout
from keras_vit import weights as weights_lib
from keras_vit.variants import VARIANTS
from trainers.errors import UsageError, first_line

# big_vision's init_head_bias for sigmoid runs: a new head predicts sigmoid(-10) ~ 4.5e-5 for
# every class, so the first steps do not spend their gradient pushing thousands of negatives down.
SIGMOID_HEAD_BIAS = -10.0


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """The model a run asks for, resolved from its config once (trainers/plan_pieces.py)."""

    variant: str  # --model: the official variant the shape fields override
    kwargs: types.MappingProxyType  # keras_vit.create_model keyword arguments, all but num_classes
    weights: object  # --weights: a registry name, Hub name or path; None: random initialisation
    new_head: bool  # zero the loaded head (fine-tuning's --new_head; a pre-training run keeps its head)
    sigmoid_head: bool  # start a new head at SIGMOID_HEAD_BIAS (--loss=sigmoid)

    @property
    def patch_size(self):
        return self.kwargs.get("patch_size", VARIANTS[self.variant]["patch_size"])

    def create_kwargs(self, num_classes):
        """keras_vit.create_model keyword arguments for a head of `num_classes`."""
        return {**self.kwargs, "num_classes": num_classes}


def encoder_size(settings):
    """(hidden size, number of patches) of the encoder `settings` builds, without building it."""
    variant = VARIANTS[settings.variant]
    image_size = settings.kwargs["image_size"]
    grid = models.patch_grid(
        (image_size, image_size),
        settings.patch_size,
        variant.get("resnet_layers"),
    )
    return settings.kwargs.get("hidden_size", variant["hidden_size"]), grid[0] * grid[1]


def architecture_from_weights(path):
    """(the shape fields a local weights file decides: {"model": ..., "patch_size": ..., ...},
    the file's parameters).

    A file of our own pre-training (or an official one) says what it is; building the model from
    it needs no shape flags. Hybrids take the official variant with the file's ResNet stem;
    everything else is an override of the config's variant. The parameters travel on to the
    run's plan, so that build_model loads them without reading a large (or remote) file again.
    """
    try:
        # read_checkpoint: a Hub name, folder or .safetensors file is converted to vit_jax keys.
        params = weights_lib.read_checkpoint(path)[1]
    except (ValueError, OSError) as e:
        raise UsageError(f"--weights {path!r}: {first_line(e)}") from None
    found = npz_layout.architecture(params)
    fields = {
        name: found[name] for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")
    }
    fields["classifier"] = found["classifier"]
    # None (sincos_2d and none store no weights) leaves --posemb to the flag.
    fields["posemb"] = found["posemb"]
    if found["resnet_layers"] is not None:
        fields["model"] = _hybrid_with_stem(path, tuple(found["resnet_layers"]))
    return {name: value for name, value in fields.items() if value is not None}, params


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


def weights_arg(weights):
    """The --weights text as create_model takes it: None for "" or "none"."""
    return None if weights.lower() in ("", "none") else weights


def build_model(settings, num_classes, pre_logits_from_weights=False, include_top=True, params=None):
    """The model of `settings` (ModelSettings) with a head of `num_classes`.

    pre_logits_from_weights: the weights file decides whether the model has a pre-logits
    layer (few-shot probes keep a pre-training run's representation); otherwise
    --pre_logits does (fine-tuning drops the checkpoint's, as vit_jax does).
    include_top: False builds no head (a frozen feature model): its output is the pooled
    representation, and loading says nothing about a head.
    params: the weights file's parameters, read once already (the plan's); None: create_model
    reads the file itself.
    """
    weights = settings.weights
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
    kwargs = settings.create_kwargs(num_classes)
    if pre_logits_from_weights and weights:
        del kwargs["representation_size"]
    if not include_top:
        kwargs.update(include_top=False, pooling=kwargs["classifier"])
    try:
        model = keras_vit.create_model(settings.variant, weights=weights, params=params, **kwargs)
    except (ValueError, OSError) as e:
        raise UsageError(
            f"cannot build {settings.variant} with --weights={weights or 'none'}: {first_line(e)}"
        ) from None
    if not include_top:
        return model
    if weights and settings.new_head:
        # The paper's fine-tuning always starts from a zero head, also when the checkpoint's
        # head happens to have the right number of classes.
        for variable in model.get_layer("head").weights:
            variable.assign(keras.ops.zeros(variable.shape, variable.dtype))
    if settings.sigmoid_head:
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
