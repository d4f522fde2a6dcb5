"""Reading official `.npz` checkpoints and bringing every known layout to the vit_jax one.

The canonical layout here is the original vit_jax file: Flax parameter paths joined by "/",
`Transformer/posembed_input/pos_embedding` with a class-token row, blocks
`Transformer/encoderblock_{i}/` whose sub-modules carry pre-linen numbers (`LayerNorm_0`,
`MultiHeadDotProductAttention_1`, `LayerNorm_2`, `MlpBlock_3`). big_vision files differ as
its `vit.fix_old_checkpoints` and flax's `convert_pre_linen` describe, in reverse.
"""

import json
import re
import zipfile

import numpy as np

from keras_vit import fileio, posembs
from keras_vit.errors import CheckpointError, first_line

# The official table's key and keras_vit's record of its grid are the learned 1-D type's
# (keras_vit/posembs/learned_1d.py); named here too, as keys of the layout.
from keras_vit.posembs.learned_1d import POSEMB, POSEMB_GRID, split_posemb  # noqa: F401

# Linen numbers sub-modules per type, pre-linen Flax numbered them in creation order.
_LINEN_TO_VIT_JAX = {
    "LayerNorm_0": "LayerNorm_0",
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
# Not weights: the LayerNorm epsilon and GELU form of a model that differs from the official
# ones (one loaded from timm or transformers), as scalars (keras_vit.keras_layout.export_params).
NUMERICS_EPSILON = "numerics/layer_norm_epsilon"
NUMERICS_GELU_APPROXIMATE = "numerics/gelu_approximate"
# Not weights either: the arguments of the model a keras_vit file was saved from (ViT.get_config(),
# its class names included) as one JSON string, so that the file rebuilds that model
# (keras_vit.models.load_model) and names its classes. A 0-d string array: np.load reads it without
# unpickling. Official files, and files of older versions, have none.
CONFIG = "keras_vit/config"
_STRIP_PREFIXES = ("opt/target/", "params/")
_GROUP_NORM = re.compile(r"(^|/)gn(\d+|_root|_proj)/(scale|bias)$")


def read_npz(path, source=None):
    """All arrays of an .npz (local or remote) as a dict; never unpickles.

    CheckpointError if it is not one; `source` names the file in messages (default: path).
    """
    source = source or path
    try:
        with fileio.open(path, "rb") as f:
            data = np.load(f, allow_pickle=False)
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise ValueError("a single .npy array, not an .npz archive")
            with data:
                arrays = {key: data[key] for key in data.files}
    except FileNotFoundError:
        raise CheckpointError(f"{source}: no such file; check the path") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as err:
        # NumPy's own texts for these files suggest unpickling them: never pass that advice on.
        reason = first_line(err)
        if "pickle" in reason:
            reason = (
                "it holds object arrays, which are never unpickled"
                if "Object arrays" in reason
                else ("not a zip archive of .npy arrays")
            )
        raise CheckpointError(
            f"{source}: not a readable .npz checkpoint ({reason}); "
            "download it again or convert it with keras_vit.convert"
        ) from None
    if not arrays:
        raise CheckpointError(f"{source}: the .npz archive is empty; it is not a checkpoint")
    for key, value in arrays.items():
        # NpzFile hands back raw bytes for members that are not .npy arrays.
        if key == CONFIG and isinstance(value, np.ndarray) and value.dtype.kind == "U":
            continue
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "fiu":
            kind = value.dtype if isinstance(value, np.ndarray) else "a non-array member"
            raise CheckpointError(
                f"{source}: not a readable .npz checkpoint ({key!r} is {kind}, "
                "not numbers); download it again or convert it with "
                "keras_vit.convert"
            )
    return arrays


def config_entry(config):
    """The `CONFIG` entry of a model's config (a dict): a 0-d string array of its JSON."""
    return np.asarray(json.dumps(config))


def saved_config(params, source="the checkpoint"):
    """The config (a dict) of the model a file was saved from, or None where it has none."""
    if CONFIG not in params:
        return None
    try:
        config = json.loads(str(params[CONFIG]))
    except ValueError:
        config = None
    if not isinstance(config, dict):
        raise CheckpointError(
            f"{source}: its {CONFIG!r} entry is not a model config; save the model again with keras_vit"
        )
    return config


def to_vit_jax_layout(params):
    """A flat dict in any supported official layout, rewritten to the vit_jax layout."""
    out = {}
    for key, value in params.items():
        for prefix in _STRIP_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix) :]
        if key in ("pos_embedding", "Transformer/pos_embedding"):
            key = POSEMB
        if key.startswith("Transformer/encoderblock/"):
            # Blocks stacked on a leading layer axis (big_vision's scanned encoder).
            rest = key[len("Transformer/encoderblock/") :]
            for i, layer_value in enumerate(value):
                out[_rename_block_key(f"Transformer/encoderblock_{i}/{rest}")] = layer_value
            continue
        if key.startswith("Transformer/encoderblock_"):
            key = _rename_block_key(key)
        if _GROUP_NORM.search(key):
            value = value.reshape(-1)  # old files keep GroupNorm params as (1, 1, 1, C)
        out[key] = value
    return out


def _rename_block_key(key):
    parts = key.split("/")
    if len(parts) > 2 and parts[2] in _LINEN_TO_VIT_JAX:
        parts[2] = _LINEN_TO_VIT_JAX[parts[2]]
    return "/".join(parts)


def posemb_of(params):
    """The position type whose weights a vit_jax-layout dict holds, None for none stored.

    None: a type that stores no weights ("sincos_2d", "none"), or a file without blocks.
    """
    return posembs.of_params(params)


def stored_grid(params):
    """(h, w) of the patch grid the position weights are stored for, or None."""
    posemb = posemb_of(params)
    return None if posemb is None else posembs.get(posemb).stored_grid(params)


def architecture(params):
    """What a vit_jax-layout dict says about its model (None where it cannot tell)."""
    kernel = params.get("embedding/kernel")
    grid = stored_grid(params)
    num_layers = 0
    while f"Transformer/encoderblock_{num_layers}/LayerNorm_0/scale" in params:
        num_layers += 1
    query = params.get("Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel")
    mlp = params.get("Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel")
    resnet_layers = []
    while f"block{len(resnet_layers) + 1}/unit1/conv1/kernel" in params:
        stage = len(resnet_layers) + 1
        units = 0
        while f"block{stage}/unit{units + 1}/conv1/kernel" in params:
            units += 1
        resnet_layers.append(units)
    hybrid = "conv_root/kernel" in params
    patch = kernel.shape[0] if kernel is not None else None
    image_size = None
    if grid is not None and patch is not None:
        # The BiT stem downsamples 4x (root conv + pool), then 2x per stage after the first.
        stride = 4 * 2 ** max(len(resnet_layers) - 1, 0) if hybrid else 1
        image_size = tuple(side * patch * stride for side in grid)
    return dict(
        image_size=image_size,
        patch_size=patch,
        hidden_size=kernel.shape[-1] if kernel is not None else None,
        num_layers=num_layers,
        num_heads=query.shape[1] if query is not None else None,
        mlp_dim=mlp.shape[-1] if mlp is not None else None,
        num_classes=params["head/kernel"].shape[-1] if "head/kernel" in params else None,
        representation_size=(
            params["pre_logits/kernel"].shape[-1] if "pre_logits/kernel" in params else None
        ),
        classifier="token" if "cls" in params else "gap",
        resnet_layers=tuple(resnet_layers) if hybrid else None,
        resnet_width=params["conv_root/kernel"].shape[-1] // 64 if hybrid else None,
        posemb=posemb_of(params),
        # timm's global_pool="avg" models normalise the pooled token instead of the tokens.
        fc_norm=True if "fc_norm/scale" in params else None,
        layer_norm_epsilon=float(params[NUMERICS_EPSILON]) if NUMERICS_EPSILON in params else None,
        gelu_approximate=(
            bool(params[NUMERICS_GELU_APPROXIMATE]) if NUMERICS_GELU_APPROXIMATE in params else None
        ),
        class_names=(saved_config(params) or {}).get("class_names"),
    )
