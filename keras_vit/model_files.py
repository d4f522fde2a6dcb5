"""A model from one file, with no variant named: a `.keras` file, or a weights file whose shapes
say the architecture.

A `.keras` file (`model.save`) carries its whole config: it is loaded with Keras' safe_mode,
so nothing in it runs. A weights file in any layout keras_vit reads (official `.npz`,
`.weights.h5`, timm / transformers safetensors, a Hub name) becomes the vit_jax layout, whose
shapes give the patch size, width, depth, heads (the query kernel is (width, heads,
width / heads)), MLP width, classes, pre-logits, pooling, hybrid stem and position type; the
image size comes from the stored position table. What no shape says (a sigmoid head, the size
of a model without stored position weights) comes from the caller: a trainer's workdir has it
in its config.json (keras_vit.run_dir).
"""

import os

import keras

from keras_vit import deferred_init, fileio, npz_layout
from keras_vit import weights as weights_lib
from keras_vit.errors import CheckpointError
from keras_vit.models import ViT

KERAS_SUFFIX = ".keras"
# The architecture fields a weights file decides (keras_vit.npz_layout.architecture's names).
SHAPE_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "resnet_layers")
_FROM_FILE = (
    *SHAPE_FIELDS,
    "representation_size",
    "classifier",
    "posemb",
    "fc_norm",
    "layer_norm_epsilon",
    "gelu_approximate",
)


def is_keras_file(path):
    return isinstance(path, (str, os.PathLike)) and os.fspath(path).endswith(KERAS_SUFFIX)


def load_keras(path, include_preprocessing=True):
    """The keras_vit model saved in the `.keras` file `path` (local or remote), loaded with
    safe_mode. `include_preprocessing`: what the returned model takes, pixels in [0, 255] (True)
    or [-1, 1] (False), whichever the file's model took (the scaling has no weights)."""
    path = os.fspath(path)
    if not fileio.exists(path):
        raise CheckpointError(f"{path}: no such file; check the path")
    with fileio.local_copy(path) as local:
        try:
            model = keras.saving.load_model(local, safe_mode=True)
        except (ValueError, TypeError, OSError, KeyError) as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise CheckpointError(
                f"{path}: not a .keras file keras_vit can load ({reason[:200]}); save the model "
                "with model.save('NAME.keras')"
            ) from None
    if not isinstance(model, ViT):
        raise CheckpointError(
            f"{path}: holds a {type(model).__name__}, not a keras_vit.ViT; pass the .keras file of "
            "a keras_vit model"
        )
    if model.include_preprocessing != include_preprocessing:
        model = _rebuilt(model, include_preprocessing=include_preprocessing)
    return model


def from_weights(weights, image_size=None, include_preprocessing=True, cache_dir=None, **fixed):
    """A keras_vit.ViT of the architecture the weights' shapes say, with those weights.

    `weights`: a file or Hub name (not a registry name: those need a variant). `image_size`:
    default the stored position table's. `fixed`: ViT arguments no shape holds (e.g.
    classifier_activation, posemb for a file without position weights); the file's own
    position type wins where it stores one. The model's class_names are a Hub checkpoint's
    labels, else None.
    """
    info, params = weights_lib.read_checkpoint(weights, cache_dir=cache_dir)
    found = npz_layout.architecture(params)
    if found["hidden_size"] is None or not found["num_layers"]:
        raise CheckpointError(f"{weights}: holds no ViT patch embedding and blocks; is it a ViT checkpoint?")
    config = {**fixed, **{name: found[name] for name in _FROM_FILE if found[name] is not None}}
    config["num_classes"] = found["num_classes"] or 0
    if found["resnet_layers"] is not None:  # the stem's root has 64 x width channels
        width = params["conv_root/kernel"].shape[-1] / 64
        config["resnet_width"] = int(width) if width.is_integer() else width
    config["image_size"] = image_size or found["image_size"]
    if config["image_size"] is None:
        raise CheckpointError(
            f"{weights}: stores no position embeddings (posemb sincos_2d or none), so its image size "
            "cannot be read from it; pass the run's --workdir, or a .keras file of the model"
        )
    config["class_names"] = info.get("class_names")
    with deferred_init.without_initializers():  # every weight is assigned from the file next
        model = ViT(include_preprocessing=include_preprocessing, **config)
    weights_lib.load_weights(model, weights, cache_dir=cache_dir, params=params)
    return model


def differences(variant_config, weights):
    """(["name=value" for each shape field in which the weights' file differs from a variant's
    config], the file's params): ([], None) for a registry or Hub name, [] for a file of that shape."""
    if weights_lib.is_hugging_face(weights) or weights in weights_lib.REGISTRY:
        return [], None
    info, params = weights_lib.read_checkpoint(weights)
    del info
    found = npz_layout.architecture(params)
    differ = []
    for name in SHAPE_FIELDS:
        wanted = variant_config.get(name)
        value = found[name]
        if name == "resnet_layers":
            wanted = None if wanted is None else tuple(wanted)
        elif not value:
            continue  # a file without that part (no blocks) is reported when it loads
        if value != wanted:
            differ.append(f"{name}={value}")
    return differ, params


def _rebuilt(model, **changes):
    """The same model with config `changes` that add or remove no weight (the input scaling)."""
    with deferred_init.without_initializers():  # every weight is set from `model` next
        other = ViT.from_config({**model.get_config(), **changes})
    other.set_weights(model.get_weights())
    return other
