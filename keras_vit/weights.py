"""Official ViT weights for keras_vit models: registry, download, loading and export.

`load_weights(model, weights)` accepts a registry name (downloaded once into the Keras
cache), an official `.npz` in the vit_jax or big_vision layout, a keras_vit `.weights.h5`
or `.keras` file, or a trainer's workdir (its model.npz), on the local disk or on any
TensorFlow file system (gs://...). Every source becomes a dict in the vit_jax layout, which
is checked key by key and shape by shape against the model before anything is assigned,
then adapted the way the official fine-tuning code adapts it: position embeddings resized
with `scipy.ndimage.zoom(order=1)` on the patch grid, a new zero head when the class count
differs, pre-logits kept when the model has them.
"""

import hashlib
import http.client
import logging
import os
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

from keras_vit import (
    checkpoints,
    fileio,
    hf_layout,
    hub,
    keras_layout,
    npz_layout,
    posembs,
    run_files,
    variants,
)
from keras_vit.checkpoints import REGISTRY, Checkpoint
from keras_vit.errors import CheckpointError, first_line
from keras_vit.keras_layout import export_params, saved_params
from keras_vit.npz_layout import POSEMB_GRID

__all__ = [
    "REGISTRY",
    "Checkpoint",
    "CheckpointError",
    "describe",
    "export_params",
    "fetch",
    "load_weights",
    "read_checkpoint",
    "read_params",
    "save_npz",
    "save_weights",
    "saved_params",
]

logger = logging.getLogger("keras_vit")
CACHE_SUBDIR = "models"
_DOWNLOAD_CHUNK = 1 << 20
_DOWNLOAD_TIMEOUT_S = 60
# A temporary download file untouched this long belongs to a process that was killed.
_ABANDONED_AFTER_S = 3600
_DESCRIBE_KEYS = ("image_size", "num_classes", "representation_size", "classifier")
# Keys a checkpoint may carry that a model legitimately does without.
_OPTIONAL_KEYS = ("head/kernel", "head/bias", "pre_logits/kernel", "pre_logits/bias", "cls", POSEMB_GRID)
# What a checkpoint says about the function its weights compute, beyond their shapes.
_NUMERICS = {
    "layer_norm_epsilon": npz_layout.NUMERICS_EPSILON,
    "gelu_approximate": npz_layout.NUMERICS_GELU_APPROXIMATE,
}
MODEL_FIELDS = ("posemb", "fc_norm", *_NUMERICS)


def describe(weights, variant=None, cache_dir=None):
    """What a checkpoint decides about the model built for it, without building one.

    Returns dict(image_size=(h, w), num_classes=int|None, representation_size=int|None,
    classifier="token"|"gap"). A registry name needs `variant` and no download; a local file
    is read for its shapes.
    """
    info = read_checkpoint(weights, variant, cache_dir)[0]
    return {key: info[key] for key in _DESCRIBE_KEYS}


def read_checkpoint(weights, variant=None, cache_dir=None, params=None):
    """(describe(...)'s dict, with "posemb" for a file, the file's params or None for a registry name).

    For building a model and then loading it without reading a large local file twice:
    pass the params on to `load_weights(..., params=...)`. `params`: the file's contents, if
    already read (`read_params`); the file is then not read again.
    """
    if _is_registry_name(weights):
        return checkpoints.lookup(weights, variant).describe(), None
    class_names = None
    if params is None and is_hugging_face(weights):
        params, class_names = read_hugging_face(weights, cache_dir)
    elif params is None:
        params = read_params(_checkpoint_path(weights))
    found = npz_layout.architecture(params)
    # image_size is None for a table of a non-square grid that the file does not record (a
    # file of an older version): the model's own size then decides, checked when loading.
    # posemb too where the file tells (its position weights); sincos_2d and none store none.
    # fc_norm, the LayerNorm epsilon and the GELU form where they are not the official ones.
    info = {key: found[key] for key in (*_DESCRIBE_KEYS, *MODEL_FIELDS)}
    # A Hub checkpoint's labels, or the class names a keras_vit file was saved with.
    info["class_names"] = class_names if class_names is not None else found["class_names"]
    return info, params


def is_hugging_face(weights):
    """Whether `weights` names a timm or transformers checkpoint: a Hub name, a local folder
    (not a trainer's run), a .safetensors file (or a pickle file, which is refused when read)."""
    if hub.is_hub_name(weights):
        return True
    if not isinstance(weights, (str, os.PathLike)) or fileio.is_remote(os.fspath(weights)):
        return False
    path = os.fspath(weights)
    if os.path.isdir(path):
        return run_weights_file(path) is None
    return path.endswith((".safetensors", *hf_layout.PICKLE_SUFFIXES))


def run_weights_file(folder):
    """FOLDER/model.npz where `folder` (local or remote) is a trainer's workdir, a folder that
    holds that file and no .safetensors file; else None. A folder with both is a Hugging Face
    checkpoint, as before run folders were taken."""
    if hub.is_hub_name(folder):  # hf://... is no file system: asking one would need TensorFlow
        return None
    folder = os.fspath(folder)
    path = fileio.join(folder, run_files.MODEL_FILE)
    if not (fileio.isdir(folder) and fileio.isfile(path)):
        return None
    if any(name.endswith(".safetensors") for name in fileio.listdir(folder)):
        return None
    return path


def read_hugging_face(weights, cache_dir=None):
    """(vit_jax-layout params, class names or None) of a Hub name, folder or .safetensors file.

    `cache_dir`: the Hugging Face cache to use (default: huggingface_hub's, under HF_HOME).
    """
    path = hub.download(weights, cache_dir) if hub.is_hub_name(weights) else weights
    params, class_names = hf_layout.read_checkpoint(path)
    if hub.is_hub_name(weights):
        logger.info("keras_vit: read %s from %s", weights, path)
    return params, class_names


def load_weights(model, weights, variant=None, cache_dir=None, params=None):
    """Loads `weights` (registry name or file path) into a keras_vit `model`, in place.

    `params`: that local file's contents as `read_checkpoint` returned them, if already read.
    """
    if params is not None and not _is_registry_name(weights):
        assign_params(
            model, params, os.fspath(weights) if is_hugging_face(weights) else _checkpoint_path(weights)
        )
        return
    if is_hugging_face(weights):
        assign_params(model, read_hugging_face(weights, cache_dir)[0], os.fspath(weights))
        return
    if _is_registry_name(weights):
        entry = checkpoints.lookup(weights, variant or variants.variant_of(model))
        path, params = _fetch(entry, cache_dir)
        source = f"{weights} ({path})"
    else:
        source = _checkpoint_path(weights)
        params = read_params(source)
    assign_params(model, params, source)


def read_params(path, source=None):
    """{official key: array} in the vit_jax layout, from any supported file, local or remote.

    `source`: how error messages name the file (default: `path`).
    """
    path = os.fspath(path)
    path = run_weights_file(path) or path
    source = source or path
    if is_hugging_face(path):
        return read_hugging_face(path)[0]
    if path.endswith(".npz"):
        return npz_layout.to_vit_jax_layout(npz_layout.read_npz(path, source))
    if path.endswith((".h5", ".keras")):
        # h5py needs a real file: a remote one is copied to a local temporary file first.
        # Only arrays are read (never a model config), so nothing in the file is executed.
        with fileio.local_copy(path) as local:
            try:
                return keras_layout.read_keras_weights(local)
            except CheckpointError as err:
                raise CheckpointError(str(err).replace(local, source)) from None
    raise CheckpointError(
        f"{source}: unknown file type; pass an official .npz checkpoint, a "
        "keras_vit .weights.h5 or a .keras file, a timm / transformers .safetensors file or folder, "
        "or a trainer's workdir"
    )


def fetch(entry, cache_dir=None):
    """Path of a registry entry in the cache, downloading it there first when needed.

    The download goes to a temporary file that is renamed into the cache only once complete
    and verified (sha256 if the entry has one, else its architecture against the entry). A
    cached file that fails the same checks (e.g. cut short by an older version) is replaced.
    """
    return _fetch(entry, cache_dir)[0]


def _fetch(entry, cache_dir):
    """(cached path, its params), downloading when the cache has no good copy."""
    directory = fileio.join(_cache_dir(cache_dir), CACHE_SUBDIR)
    target = fileio.join(directory, entry.file_name)
    if fileio.exists(target):
        try:
            return target, _read_verified(entry, target, target)
        except CheckpointError as err:
            logger.warning(
                "keras_vit: downloading %s again: the cached copy failed its check (%s)", entry.url, err
            )
    _remove_abandoned_downloads(directory, entry.file_name)
    params = fileio.write_atomic(target, lambda tmp: _download(entry, tmp, target))
    return target, params


def _download(entry, tmp, target):
    """Fills the local file `tmp` from the entry's URL; its params once it passes the checks."""
    print(f"Downloading {entry.url} to {target}", flush=True)  # as keras.utils.get_file does
    try:
        with (
            urllib.request.urlopen(entry.url, timeout=_DOWNLOAD_TIMEOUT_S) as response,
            open(tmp, "wb") as out,
        ):
            expected = response.headers.get("Content-Length")
            received = 0
            while chunk := response.read(_DOWNLOAD_CHUNK):
                out.write(chunk)
                received += len(chunk)
        if expected is not None and received != int(expected):
            raise OSError(f"the connection closed after {received} of {expected} bytes")
    except (OSError, ValueError, http.client.HTTPException) as err:
        raise CheckpointError(
            f"could not download {entry.url} ({first_line(err)}); download it by hand "
            f"and put it at {target}, or pass its local path as weights"
        ) from None
    return _read_verified(entry, tmp, entry.url, target)


def _read_verified(entry, path, source, target=None):
    """The params of `path` if it is the entry's file: its sha256, else its architecture."""
    target = target or path
    if entry.sha256 and _sha256(path) != entry.sha256:
        raise CheckpointError(
            f"{source}: the file does not have the published sha256 "
            f"{entry.sha256} and was not kept; retry, or download it by hand "
            f"and check it before putting it at {target}"
        )
    params = read_params(path, source)
    found = npz_layout.architecture(params)
    expected = entry.describe()
    for key in _DESCRIBE_KEYS:
        if found[key] != expected[key]:
            raise CheckpointError(
                f"{source}: {key} is {found[key]} but {entry.name} {entry.variant} "
                f"has {expected[key]}; the file is not the published one and "
                "was not kept; check the registry entry's URL"
            )
    return params


def _sha256(path):
    digest = hashlib.sha256()
    with fileio.open(path, "rb") as f:
        while chunk := f.read(_DOWNLOAD_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _remove_abandoned_downloads(directory, file_name):
    """Deletes temporary files of downloads killed with their process: never read, only space."""
    if fileio.is_remote(directory) or not os.path.isdir(directory):
        return
    cutoff = time.time() - _ABANDONED_AFTER_S
    for name in os.listdir(directory):
        if name.startswith(fileio.TEMP_PREFIX) and name.endswith(f"-{file_name}"):
            path = os.path.join(directory, name)
            try:
                if os.path.getmtime(path) < cutoff:
                    os.remove(path)
            except OSError:
                pass  # another process removed or renamed it meanwhile


def _cache_dir(cache_dir):
    """The cache root: cache_dir, else $KERAS_HOME, else ~/.keras (/tmp if not writable)."""
    # Keras reads KERAS_HOME once at import; read it here so a later setting counts too.
    base = cache_dir or os.environ.get("KERAS_HOME") or os.path.join("~", ".keras")
    base = os.fspath(base)
    if fileio.is_remote(base):
        return base
    base = os.path.expanduser(base)
    try:
        os.makedirs(base, exist_ok=True)
    except OSError:
        pass
    if not os.access(base, os.W_OK):
        base = os.path.join(tempfile.gettempdir(), ".keras")
    return base


def assign_params(model, params, source):
    """Checks every key and shape of `params` against `model`, adapts, then assigns."""
    targets = keras_layout.model_variables(model)
    model_keys = {key for key, _ in targets}
    _check_posemb(params, model, source)
    position = posembs.get(getattr(model, "posemb", posembs.OFFICIAL))
    _check_numerics(params, model, source)
    # A timm / transformers checkpoint's own tensor names, for the messages.
    tensor_name = getattr(params, "tensor_name", None)
    params = {
        key: value
        for key, value in params.items()
        if not key.startswith("numerics/") and key != npz_layout.CONFIG  # not weights
    }
    values = {}
    head_kernel = next((tuple(v.shape) for k, v in targets if k == "head/kernel"), None)
    keep_head = (
        "head/kernel" in params
        and tuple(params["head/kernel"].shape) == head_kernel
        and "head/bias" in params
    )
    if "cls" in params and "cls" not in model_keys and keep_head:
        # The kept head was trained on the class token, which the model does not have.
        raise CheckpointError(
            f"{source}: the checkpoint classifies from its class token (classifier='token') but the "
            "model has classifier='gap'; build the model with classifier='token', or with another "
            "number of classes to fine-tune a new head on the mean of the patch tokens"
        )
    for key, variable in targets:
        shape = tuple(variable.shape)
        if key.startswith("head/") and not keep_head:
            values[key] = np.zeros(shape, np.float32)
            continue
        if key not in params:
            raise CheckpointError(f"{source}: {_missing_hint(key)}")
        value = params[key]
        if position.owns(key):  # resized to the model's grid as the type says
            value = position.adapt(key, value, shape, model, params, source)
        if tuple(value.shape) != shape:
            found = f"{key!r} has shape {tuple(value.shape)} in the checkpoint"
            if tensor_name:
                found = f"tensor {tensor_name(key)!r} is {tuple(value.shape)} as keras_vit's {key!r}"
            raise CheckpointError(
                f"{source}: does not fit this model: {found} but {shape} in the model; build the "
                f"variant the checkpoint was trained as ({_summary(params)})"
            )
        values[key] = value
    extra = sorted(set(params) - model_keys - set(_OPTIONAL_KEYS))
    if extra:
        raise CheckpointError(
            f"{source}: {extra[0]!r} (and {len(extra) - 1} more keys) has no "
            "place in this model; it is a checkpoint of another architecture "
            f"({_summary(params)})"
        )
    _log_head(params, head_kernel, keep_head, model_keys)
    for key, variable in targets:
        variable.assign(np.asarray(values[key], dtype=variable.dtype))


def _check_posemb(params, model, source):
    """A one-line error when the checkpoint's position variant is not the model's."""
    stored = npz_layout.posemb_of(params)
    wanted = getattr(model, "posemb", posembs.OFFICIAL)
    if "embedding/kernel" not in params or stored == wanted:
        return
    weightless = posembs.weightless()
    if stored is None and wanted in weightless:
        return  # none of them stores weights: they cannot be told apart from the file
    trained = (
        f"posemb={stored!r}"
        if stored
        else f"posemb={' or '.join(map(repr, weightless))} (no position weights)"
    )
    raise CheckpointError(
        f"{source}: the checkpoint was trained with {trained} but the model has "
        f"posemb={wanted!r}; build the model with the checkpoint's posemb"
    )


def _check_numerics(params, model, source):
    """A one-line error when the model would compute another function than the checkpoint's."""
    found = npz_layout.architecture(params)
    for field in _NUMERICS:
        wanted = found[field]
        # None: a file that does not say (official files, Keras weight files); not checked.
        if wanted is not None and getattr(model, field, wanted) != wanted:
            raise CheckpointError(
                f"{source}: the checkpoint was trained with {field}={wanted!r} but the model has "
                f"{field}={getattr(model, field)!r}; build the model with {field}={wanted!r}"
            )


def _missing_hint(key):
    if key == "cls":
        return "has no class token (a classifier='gap' checkpoint); build the model with classifier='gap'"
    if key.startswith("pre_logits/"):
        return "has no pre-logits layer; build the model with representation_size=None"
    return f"key {key!r} that the model needs is missing; is it a checkpoint of another variant?"


def _summary(params):
    found = npz_layout.architecture(params)
    parts = [
        f"{k}={found[k]}"
        for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "resnet_layers")
        if found[k]
    ]
    return "checkpoint has " + ", ".join(parts)


def _log_head(params, head_kernel, keep_head, model_keys):
    if "pre_logits/kernel" in params and "pre_logits/kernel" not in model_keys:
        logger.info("keras_vit: dropped the checkpoint's pre-logits layer (the model has none)")
    if "cls" in params and "cls" not in model_keys:
        logger.info("keras_vit: dropped the checkpoint's class token (the model has classifier='gap')")
    if head_kernel is None:
        return
    if not keep_head:
        found = params["head/kernel"].shape[-1] if "head/kernel" in params else "no"
        logger.info(
            "keras_vit: new zero-initialised head of %d classes (checkpoint head: %s)", head_kernel[-1], found
        )


def save_npz(model, path):
    """Writes a keras_vit model's weights as an official vit_jax-layout .npz, atomically.

    A model (not a dict) adds its config under npz_layout.CONFIG, class names included
    (`keras_vit.load_model` rebuilds it from the file).

    `path` may be local or on any TensorFlow file system (gs://...).
    """
    params = saved_params(model) if not isinstance(model, dict) else model
    fileio.write_atomic(path, lambda tmp: _write_npz(tmp, params))


def save_weights(model, path):
    """model.save_weights, but atomic (readers never see a half-written file), local or remote."""
    if not str(path).endswith(".weights.h5"):
        raise ValueError(f"{path}: a Keras weights file must end in .weights.h5")
    fileio.write_atomic(path, model.save_weights)


def _write_npz(tmp, params):
    with open(tmp, "wb") as f:
        np.savez(f, **params)


def _is_registry_name(weights):
    return isinstance(weights, str) and weights in REGISTRY


def _checkpoint_path(weights):
    """The path `weights` names (local or remote), or a one-line error for a missing file / unknown name."""
    path = os.fspath(weights)
    if fileio.isfile(path):
        return path
    in_run = run_weights_file(path)
    if in_run:
        return in_run
    looks_like_path = os.sep in path or fileio.is_remote(path) or path.endswith((".npz", ".h5", ".keras"))
    if looks_like_path:
        raise CheckpointError(
            f"{path}: no such checkpoint file; check the path, or pass a "
            f"registry name ({', '.join(checkpoints.names())})"
        )
    checkpoints.lookup(path, None)  # raises the unknown-name error listing the known names
    raise AssertionError("unreachable")
