"""The map between keras_vit's Keras weights and the official vit_jax parameter keys.

Layer names are the weight format: a Keras variable path such as
`encoderblock_0/MultiHeadDotProductAttention_1/query/kernel` is the official key minus the
`Transformer/` scope, with Keras' `gamma`/`beta` for Flax's `scale`/`bias` and the class token
stored as `cls/token`. Keras weight files (`.weights.h5`, and the one inside a `.keras` zip)
are read with h5py directly, by those layer names, without rebuilding or deserialising a model.
"""

import io
import json
import zipfile

import h5py  # installed with Keras, which saves its weight files with it
import ml_dtypes  # installed with Keras: its bfloat16
import numpy as np

from keras_vit import grids, posembs
from keras_vit.errors import CheckpointError, first_line
from keras_vit.layers import GELU_APPROXIMATE, LAYER_NORM_EPSILON
from keras_vit.npz_layout import (
    CONFIG,
    NUMERICS_EPSILON,
    NUMERICS_GELU_APPROXIMATE,
    POSEMB,
    POSEMB_GRID,
    config_entry,
)
from keras_vit.posembs import learned_1d

_KERAS_TO_FLAX = {"gamma": "scale", "beta": "bias"}
# The attribute of a .weights.h5 file's root that records a non-square grid (npz_layout.POSEMB_GRID).
_GRID_ATTRIBUTE = "keras_vit_posemb_grid"
# The attribute of a .weights.h5 file's root that holds its model's config (npz_layout.CONFIG).
_CONFIG_ATTRIBUTE = "keras_vit_config"


def official_key(path):
    """Official key of a Keras variable path ("encoder_norm/gamma" -> "Transformer/...")."""
    parts = path.split("/")
    parts[-1] = _KERAS_TO_FLAX.get(parts[-1], parts[-1])
    if parts == ["cls", "token"]:
        return "cls"
    # The position types' own layers are official `Transformer/` ones, as posembed_input is;
    # read from the registry on each call, so that a type registered later is in it too.
    if parts[0] in ("encoder_norm", *posembs.top_level_layers()) or parts[0].startswith("encoderblock_"):
        parts.insert(0, "Transformer")
    return "/".join(parts)


def model_variables(model):
    """[(official key, variable)] of a keras_vit model, in model order."""
    top_level = {layer.name for layer in model.layers}
    pairs = []
    for variable in model.weights:
        parts = variable.path.split("/")
        # Drop any outer scope (e.g. an enclosing model's name) before the top-level layer.
        start = next((i for i, part in enumerate(parts) if part in top_level), 0)
        pairs.append((official_key("/".join(parts[start:])), variable))
    return pairs


def export_params(model):
    """The weights of a keras_vit model as {official key: float32 array} (vit_jax layout).

    A model whose LayerNorm epsilon or GELU is not the official one (one loaded from timm or
    transformers) adds them as scalars under `numerics/`, so that the file computes the same
    function when it is loaded again (keras_vit.npz_layout.architecture reads them back).
    Plus the grid of a learned 1-D position table that is not square (`POSEMB_GRID`).
    """
    params = {key: np.asarray(variable.numpy(), np.float32) for key, variable in model_variables(model)}
    epsilon = getattr(model, "layer_norm_epsilon", LAYER_NORM_EPSILON)
    if epsilon != LAYER_NORM_EPSILON:
        params[NUMERICS_EPSILON] = np.asarray(epsilon, np.float64)
    if getattr(model, "gelu_approximate", GELU_APPROXIMATE) != GELU_APPROXIMATE:
        params[NUMERICS_GELU_APPROXIMATE] = np.asarray(int(model.gelu_approximate), np.int8)
    grid = non_square_grid(model)
    if grid is not None:
        params[POSEMB_GRID] = np.asarray(grid, np.int32)
    return params


def saved_params(model):
    """`export_params(model)` and the model's config (npz_layout.CONFIG): what a `.npz` holds."""
    params = export_params(model)
    config = model_config(model)
    if config is not None:
        params[CONFIG] = config_entry(config)
    return params


def model_config(model):
    """A keras_vit ViT's config (its arguments, class names included), None for another model.

    Told by an attribute only ViT sets: this module cannot import the models (they import it).
    """
    config = model.get_config() if hasattr(model, "policy_argument") else None
    return config if isinstance(config, dict) and "patch_size" in config else None


def non_square_grid(model):
    """The (h, w) grid of a model's learned 1-D position table when h != w, else None."""
    if learned_1d.LAYER not in {layer.name for layer in model.layers}:
        return None
    grid = tuple(int(size) for size in model.get_layer(learned_1d.LAYER).grid_size)
    return grid if grid[0] != grid[1] else None


def record_model(path, model):
    """Records in a .weights.h5 file that `model` just wrote its config and a non-square grid."""
    grid = non_square_grid(model)
    config = model_config(model)
    with h5py.File(path, "r+") as f:
        if grid is not None:
            f.attrs[_GRID_ATTRIBUTE] = np.asarray(grid, np.int32)
        if config is not None:
            f.attrs[_CONFIG_ATTRIBUTE] = str(config_entry(config))


def _is_norm(layer_name):
    return layer_name.startswith(("LayerNorm_", "gn")) or layer_name in ("encoder_norm", "fc_norm")


def _variable_names(layer_name, count):
    if _is_norm(layer_name):
        return ["gamma", "beta"][:count]
    if layer_name == "cls":
        return ["token"]
    position_layers = posembs.layer_variables()  # the position types' own weights, by layer
    if layer_name in position_layers:
        return list(position_layers[layer_name])
    return ["kernel", "bias"][:count]


def _walk(group, names, out):
    """Collect {layer path: [arrays]} from Keras' H5 layout (groups with a `vars` child)."""
    if "vars" in group:
        name = group["vars"].attrs.get("name")
        names = names + [name.decode() if isinstance(name, bytes) else str(name)]
        arrays = [_array(group["vars"][k]) for k in sorted(group["vars"], key=int)]
        if arrays:
            out["/".join(names)] = arrays
    for key, item in group.items():
        if key != "vars" and hasattr(item, "items"):
            _walk(item, names, out)


def _array(dataset):
    """A weight's values; Keras writes bfloat16 ones, which HDF5 has no type for, as 2-byte opaque
    data with the attribute dtype="bfloat16": read as float32 (exactly their values)."""
    value = dataset[()]
    if dataset.attrs.get("dtype") in ("bfloat16", b"bfloat16"):
        value = np.asarray(value).view(ml_dtypes.bfloat16).astype(np.float32)
    return value


def _h5_params(handle, source):
    grid = config = None
    try:
        with h5py.File(handle, "r") as f:
            grid = f.attrs.get(_GRID_ATTRIBUTE)
            config = f.attrs.get(_CONFIG_ATTRIBUTE)
            by_layer = {}
            for layer_group in f["layers"].values() if "layers" in f else ():
                _walk(layer_group, [], by_layer)
    except (OSError, ValueError, KeyError) as err:
        raise CheckpointError(
            f"{source}: not a readable Keras weights file ({first_line(err)}); save it again"
        ) from None
    params = {}
    for layer_path, arrays in by_layer.items():
        for var_name, array in zip(_variable_names(layer_path.split("/")[-1], len(arrays)), arrays):
            params[official_key(f"{layer_path}/{var_name}")] = np.asarray(array)
    if "embedding/kernel" not in params:
        raise CheckpointError(
            f"{source}: holds no keras_vit weights (no 'embedding' layer); "
            "pass a file saved from a keras_vit model"
        )
    if grid is not None:
        params[POSEMB_GRID] = np.asarray(grid, np.int32)
    if config is not None:
        params[CONFIG] = np.asarray(config.decode() if isinstance(config, bytes) else str(config))
    return params


def _grid_of_config(config):
    """The non-square grid a saved ViT's learned 1-D position table has, from its arguments."""
    if config.get("posemb", learned_1d.TYPE.name) != learned_1d.TYPE.name:
        return None
    try:
        grid = grids.stored_grid(
            config.get("image_size", grids.DEFAULT_IMAGE_SIZE),
            config["patch_size"],
            config.get("resnet_layers"),
            config.get("base_image_size"),
        )
    except (KeyError, TypeError, ValueError):
        return None  # not a config this version wrote; the table's own rows decide
    return grid if grid[0] != grid[1] else None


def read_keras_weights(path):
    """{official key: array} from a keras_vit `.weights.h5` or `.keras` file."""
    if str(path).endswith(".keras"):
        try:
            with zipfile.ZipFile(path) as archive:
                config = json.loads(archive.read("config.json"))
                weights = archive.read("model.weights.h5")
        except (zipfile.BadZipFile, KeyError, OSError, ValueError) as err:
            raise CheckpointError(
                f"{path}: not a readable .keras file ({err}); save the model again with model.save()"
            ) from None
        if config.get("class_name") != "ViT":
            raise CheckpointError(
                f"{path}: holds a {config.get('class_name')} model, not a "
                "keras_vit ViT; pass a file saved from a keras_vit model"
            )
        params = _h5_params(io.BytesIO(weights), path)
        grid = _grid_of_config(config.get("config", {}))
        if grid is not None and POSEMB in params:
            params[POSEMB_GRID] = np.asarray(grid, np.int32)
        if isinstance(config.get("config"), dict):
            params[CONFIG] = config_entry(config["config"])
        return params
    return _h5_params(path, path)
