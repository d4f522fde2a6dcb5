"""timm and transformers ViT checkpoints (safetensors) to and from the vit_jax layout.

A Hugging Face checkpoint is a folder with a `config.json` and `model.safetensors` (or shards
listed in `model.safetensors.index.json`). timm names tensors like `blocks.0.attn.qkv.weight`,
transformers like `vit.encoder.layer.0.attention.attention.query.weight`; both store linear
weights as (out, in) and convolutions as (out, in, h, w). Reading turns either into the
vit_jax-layout dict keras_vit.weights loads (so the shape checks, the position-embedding
resize and the head rules are the ones of every other checkpoint), plus what the weights do not
say: LayerNorm epsilon and GELU form (under npz_layout's `numerics/` keys), the class names.
Files are read with safetensors only: pickle files (`.bin`, `.pth`, `.pt`) can run code when
loaded and are refused.
"""

import json
import os
import re

import numpy as np

from keras_vit import run_files
from keras_vit.errors import CheckpointError
from keras_vit.npz_layout import NUMERICS_EPSILON, NUMERICS_GELU_APPROXIMATE, POSEMB

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
PREPROCESSOR_FILE = "preprocessor_config.json"
PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl")
# timm's ViTs use LayerNorm(eps=1e-6) and nn.GELU (exact); transformers reads both from config.json.
TIMM_LAYER_NORM_EPSILON = 1e-6
# transformers' hidden_act names -> keras_vit's gelu_approximate.
_TRANSFORMERS_GELU = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True}
# The inputs keras_vit's preprocessing gives the patch embedding: (pixels / 255 - 0.5) / 0.5.
KERAS_VIT_MEAN = (0.5, 0.5, 0.5)
KERAS_VIT_STD = (0.5, 0.5, 0.5)
# timm keys of features keras_vit's ViT does not have, and what they are.
_TIMM_UNSUPPORTED = {
    "patch_embed.backbone": "a ResNet stem: timm's hybrid format (vit_*_r*), which is not supported",
    "reg_token": "register tokens",
    "norm_pre": "a LayerNorm before the encoder (CLIP-style)",
    "attn_pool": "attention pooling (a MAP head)",
    ".ls1.": "LayerScale",
    ".q_norm.": "query/key normalisation",
    ".norm.weight": "a LayerNorm inside the attention or MLP",
}
# keras_vit key (regular expression) -> the timm / transformers tensor it comes from, for messages.
_BLOCK = r"Transformer/encoderblock_(\d+)/"
_ORIGINS = {
    "timm": [
        (r"embedding/", "patch_embed.proj"),
        (r"cls$", "cls_token"),
        (r"Transformer/posembed_input/", "pos_embed"),
        (_BLOCK + "LayerNorm_0/", r"blocks.\1.norm1"),
        (_BLOCK + "LayerNorm_2/", r"blocks.\1.norm2"),
        (_BLOCK + "MultiHeadDotProductAttention_1/(query|key|value)/", r"blocks.\1.attn.qkv"),
        (_BLOCK + "MultiHeadDotProductAttention_1/out/", r"blocks.\1.attn.proj"),
        (_BLOCK + "MlpBlock_3/Dense_0/", r"blocks.\1.mlp.fc1"),
        (_BLOCK + "MlpBlock_3/Dense_1/", r"blocks.\1.mlp.fc2"),
        (r"Transformer/encoder_norm/", "norm"),
        (r"fc_norm/", "fc_norm"),
        (r"pre_logits/", "pre_logits.fc"),
        (r"head/", "head"),
    ],
    "transformers": [
        (r"embedding/", "{p}embeddings.patch_embeddings.projection"),
        (r"cls$", "{p}embeddings.cls_token"),
        (r"Transformer/posembed_input/", "{p}embeddings.position_embeddings"),
        (_BLOCK + "LayerNorm_0/", r"{p}encoder.layer.\1.layernorm_before"),
        (_BLOCK + "LayerNorm_2/", r"{p}encoder.layer.\1.layernorm_after"),
        (
            _BLOCK + "MultiHeadDotProductAttention_1/(query|key|value)/",
            r"{p}encoder.layer.\1.attention.attention.\2",
        ),
        (_BLOCK + "MultiHeadDotProductAttention_1/out/", r"{p}encoder.layer.\1.attention.output.dense"),
        (_BLOCK + "MlpBlock_3/Dense_0/", r"{p}encoder.layer.\1.intermediate.dense"),
        (_BLOCK + "MlpBlock_3/Dense_1/", r"{p}encoder.layer.\1.output.dense"),
        (r"Transformer/encoder_norm/", "{p}layernorm"),
        (r"pre_logits/", "pooler.dense"),
        (r"head/", "classifier"),
    ],
}


class ConvertedParams(dict):
    """vit_jax-layout params converted from a timm or transformers checkpoint, which can name the
    checkpoint tensor each one comes from (so that a shape mismatch names the file's tensor)."""

    def __init__(self, params, layout, prefix=""):
        super().__init__(params)
        self.layout = layout
        self.prefix = prefix

    def tensor_name(self, key):
        """The checkpoint's name for a keras_vit key: 'blocks.0.attn.qkv.weight', ..."""
        for pattern, template in _ORIGINS[self.layout]:
            match = re.match(pattern, key)
            if match:
                base = match.expand(template.replace("{p}", self.prefix))
                if key == "cls" or "posembed_input" in key:
                    return base
                return f"{base}.{'bias' if key.endswith('/bias') else 'weight'}"
        return key


def pickle_refusal(path):
    """The one-line error for a pickle checkpoint: why it is not read, and what to use."""
    return CheckpointError(
        f"{path}: a PyTorch pickle file, which is never loaded (unpickling can execute code "
        "from the file); use the checkpoint's model.safetensors instead, or convert it with "
        "safetensors in an environment you trust"
    )


def _safetensors_numpy():
    try:
        import safetensors.numpy
    except ImportError:
        raise CheckpointError(
            "reading Hugging Face checkpoints needs safetensors: pip install 'keras-vision-transformer[hub]'"
        ) from None
    return safetensors.numpy


def weight_files(path):
    """(safetensors files, config.json or None) of a checkpoint folder or .safetensors file."""
    path = os.fspath(path)
    if path.endswith(PICKLE_SUFFIXES):
        raise pickle_refusal(path)
    if os.path.isfile(path):
        if not path.endswith(".safetensors"):
            raise CheckpointError(f"{path}: not a .safetensors file; pass a Hugging Face checkpoint")
        config = os.path.join(os.path.dirname(path), CONFIG_FILE)
        return [path], config if os.path.isfile(config) else None
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: no such file or folder; check the path")
    config = os.path.join(path, CONFIG_FILE)
    config = config if os.path.isfile(config) else None
    index = os.path.join(path, SAFETENSORS_INDEX)
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(path, shard) for shard in shards], config
    single = os.path.join(path, SAFETENSORS_FILE)
    if os.path.isfile(single):
        return [single], config
    found = sorted(name for name in os.listdir(path) if name.endswith(".safetensors"))
    if len(found) == 1:
        return [os.path.join(path, found[0])], config
    pickles = sorted(name for name in os.listdir(path) if name.endswith(PICKLE_SUFFIXES))
    if pickles:
        raise pickle_refusal(os.path.join(path, pickles[0]))
    if run_files.folder_written_by(path) == "probes":
        raise CheckpointError(run_files.probes_hold_no_model(path))
    raise CheckpointError(
        f"{path}: holds no {SAFETENSORS_FILE} and no {run_files.MODEL_FILE}; pass a folder of a timm or "
        "transformers checkpoint, or the workdir of a finished trainer run"
    )


def read_tensors(files):
    """{name: array} of safetensors files (float16/bfloat16 widened to float32)."""
    reader = _safetensors_numpy()
    tensors = {}
    for file in files:
        try:
            loaded = reader.load_file(file)
        except (OSError, ValueError, RuntimeError) as err:
            raise CheckpointError(
                f"{file}: not a readable safetensors file ({err}); download it again"
            ) from None
        for name, value in loaded.items():
            tensors[name] = value.astype(np.float32) if value.dtype.kind == "f" else value
    return tensors


def read_config(config_path):
    if config_path is None:
        return {}
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{config_path}: not a readable JSON config ({err})") from None
    return config if isinstance(config, dict) else {}


def read_checkpoint(path):
    """(vit_jax-layout params, class names or None) of a local timm or transformers checkpoint."""
    files, config_path = weight_files(path)
    tensors = read_tensors(files)
    config = read_config(config_path)
    if config_path is not None:
        # transformers keeps the input normalisation beside the model's config.
        preprocessor = os.path.join(os.path.dirname(config_path), PREPROCESSOR_FILE)
        if os.path.isfile(preprocessor):
            found = read_config(preprocessor)
            config = {**config, **{k: found[k] for k in ("image_mean", "image_std") if k in found}}
    source = os.fspath(path)
    if "patch_embed.proj.weight" in tensors or "patch_embed.backbone.stem.conv.weight" in tensors:
        return timm_to_vit_jax(tensors, config, source)
    prefix = _transformers_prefix(tensors)
    if prefix is not None:
        return transformers_to_vit_jax(tensors, config, source, prefix)
    first = sorted(tensors)[0] if tensors else "nothing"
    raise CheckpointError(
        f"{source}: neither a timm nor a transformers ViT checkpoint (first tensor: {first!r}); "
        "pass a vit_* timm model or a transformers ViTModel / ViTForImageClassification"
    )


def _transformers_prefix(tensors):
    for prefix in ("vit.", ""):
        if f"{prefix}embeddings.patch_embeddings.projection.weight" in tensors:
            return prefix
    return None


class _Mapper:
    """Takes tensors out of a checkpoint by name, so that what is left over can be reported."""

    def __init__(self, tensors, source):
        self.left = dict(tensors)
        self.source = source

    def take(self, name):
        if name not in self.left:
            raise CheckpointError(f"{self.source}: tensor {name!r} is missing; the checkpoint is incomplete")
        return np.asarray(self.left.pop(name), np.float32)

    def take_optional(self, name):
        return self.take(name) if name in self.left else None


def _heads(hidden, num_heads, source, name):
    if not num_heads or hidden % num_heads:
        raise CheckpointError(
            f"{source}: cannot tell the number of attention heads of {name!r} (hidden size {hidden}); "
            "its config.json should say it"
        )
    return num_heads, hidden // num_heads


def _dense(weight):
    return weight.T


def _split_heads(weight, bias, heads, head_dim):
    """A (out=D, in=D) projection to keras_vit's (D, heads, D/heads) kernel and bias."""
    hidden_in = weight.shape[1]
    kernel = weight.T.reshape(hidden_in, heads, head_dim)
    bias = np.zeros((heads, head_dim), np.float32) if bias is None else bias.reshape(heads, head_dim)
    return kernel, bias


def _patch_kernel(weight, bias, mean, std):
    """(out, in, h, w) to (h, w, in, out), folding the checkpoint's input normalisation in.

    keras_vit feeds the patch embedding (pixels / 255 - 0.5) / 0.5; a checkpoint trained on
    (pixels / 255 - mean) / std sees y / (2 std) + (0.5 - mean) / std of keras_vit's input y, and
    a convolution without padding is linear in it: the same outputs, with no change to the model.
    """
    kernel = weight.transpose(2, 3, 1, 0)
    mean = np.asarray(mean, np.float64)
    std = np.asarray(std, np.float64)
    if np.allclose(mean, KERAS_VIT_MEAN) and np.allclose(std, KERAS_VIT_STD):
        return kernel, bias
    scale = (0.5 / std).reshape(1, 1, -1, 1)
    shift = ((0.5 - mean) / std).reshape(1, 1, -1, 1)
    new_bias = bias.astype(np.float64) + (kernel.astype(np.float64) * shift).sum(axis=(0, 1, 2))
    return (kernel * scale).astype(np.float32), new_bias.astype(np.float32)


def _mean_std(config, mean_key, std_key, source):
    mean, std = config.get(mean_key) or KERAS_VIT_MEAN, config.get(std_key) or KERAS_VIT_STD
    if len(mean) != 3 or len(std) != 3:
        raise CheckpointError(f"{source}: expected 3-channel {mean_key}/{std_key}, got {mean} / {std}")
    return mean, std


def _timm_heads(config, hidden):
    """timm stores no head count in the weights: config.json's model_args, else the family's."""
    heads = (config.get("model_args") or {}).get("num_heads")
    if heads:
        return heads
    family = str(config.get("architecture", "")).split("_")
    sizes = {"tiny": 3, "small": 6, "base": 12, "large": 16, "huge": 16}
    for part in family[1:2]:
        if part in sizes:
            return sizes[part]
    return max(hidden // 64, 1)  # other widths: 64-wide heads, as from tiny to large


def timm_to_vit_jax(tensors, config, source):
    """(params, class names) of a timm VisionTransformer state dict."""
    for marker, feature in _TIMM_UNSUPPORTED.items():
        hit = next((name for name in sorted(tensors) if marker in name), None)
        if hit:
            raise CheckpointError(
                f"{source}: tensor {hit!r} is {feature}, which keras_vit's ViT does not have; "
                "only plain vit_{tiny,small,base,large,huge}_patch* models load (for a hybrid, "
                "use the official R50+ViT checkpoints of keras_vit.weights.REGISTRY)"
            )
    take = _Mapper(tensors, source)
    pretrained = config.get("pretrained_cfg") or config
    mean, std = _mean_std(pretrained, "mean", "std", source)
    weight = take.take("patch_embed.proj.weight")
    hidden = weight.shape[0]
    heads, head_dim = _heads(hidden, _timm_heads(config, hidden), source, "patch_embed.proj.weight")
    params = {}
    bias = take.take_optional("patch_embed.proj.bias")
    if bias is None:
        bias = np.zeros((hidden,), np.float32)
    params["embedding/kernel"], params["embedding/bias"] = _patch_kernel(weight, bias, mean, std)
    has_cls = "cls_token" in take.left
    if has_cls:
        params["cls"] = take.take("cls_token")
    params[POSEMB] = take.take("pos_embed")
    pool = config.get("global_pool") or (config.get("model_args") or {}).get("global_pool")
    pool = pool or ("token" if has_cls else "avg")
    if pool not in ("token", "avg"):
        raise CheckpointError(f"{source}: global_pool={pool!r}; keras_vit pools with 'token' or 'avg'")
    if pool == "avg" and has_cls:
        raise CheckpointError(
            f"{source}: averages the patch tokens of a model with a class token; keras_vit's "
            "classifier='gap' models have no class token"
        )
    index = 0
    while f"blocks.{index}.norm1.weight" in take.left:
        block, out = f"blocks.{index}.", f"Transformer/encoderblock_{index}/"
        _norm(params, take, block + "norm1", out + "LayerNorm_0")
        qkv = take.take(block + "attn.qkv.weight")
        qkv_bias = take.take_optional(block + "attn.qkv.bias")
        for part, name in enumerate(("query", "key", "value")):
            rows = slice(part * hidden, (part + 1) * hidden)
            kernel, part_bias = _split_heads(
                qkv[rows], None if qkv_bias is None else qkv_bias[rows], heads, head_dim
            )
            params[f"{out}MultiHeadDotProductAttention_1/{name}/kernel"] = kernel
            params[f"{out}MultiHeadDotProductAttention_1/{name}/bias"] = part_bias
        proj = take.take(block + "attn.proj.weight")
        params[f"{out}MultiHeadDotProductAttention_1/out/kernel"] = proj.T.reshape(heads, head_dim, hidden)
        params[f"{out}MultiHeadDotProductAttention_1/out/bias"] = take.take(block + "attn.proj.bias")
        _norm(params, take, block + "norm2", out + "LayerNorm_2")
        _linear(params, take, block + "mlp.fc1", out + "MlpBlock_3/Dense_0")
        _linear(params, take, block + "mlp.fc2", out + "MlpBlock_3/Dense_1")
        index += 1
    if "norm.weight" in take.left:
        _norm(params, take, "norm", "Transformer/encoder_norm")
    if "fc_norm.weight" in take.left:
        # After pooling the class token, a LayerNorm is the same as one before it.
        _norm(params, take, "fc_norm", "fc_norm" if pool == "avg" else "Transformer/encoder_norm")
    if "pre_logits.fc.weight" in take.left:  # timm before 0.6 kept the tanh pre-logits layer
        _linear(params, take, "pre_logits.fc", "pre_logits")
    if "head.weight" in take.left:
        _linear(params, take, "head", "head")
    _check_all_used(take)
    params[NUMERICS_GELU_APPROXIMATE] = np.asarray(0, np.int8)
    names = config.get("label_names") or pretrained.get("label_names")
    return ConvertedParams(params, "timm"), _label_list(names)


def _label_list(names):
    if isinstance(names, dict):
        names = [str(names[key]) for key in sorted(names, key=int)]
    names = [str(name) for name in names] if names else None
    if names and all(name == f"LABEL_{i}" for i, name in enumerate(names)):
        return None  # transformers' placeholders for a config without labels
    return names


def _norm(params, take, name, out):
    params[f"{out}/scale"] = take.take(f"{name}.weight")
    params[f"{out}/bias"] = take.take(f"{name}.bias")


def _linear(params, take, name, out):
    params[f"{out}/kernel"] = _dense(take.take(f"{name}.weight"))
    params[f"{out}/bias"] = take.take(f"{name}.bias")


def _check_all_used(take):
    left = sorted(take.left)
    if left:
        raise CheckpointError(
            f"{take.source}: tensor {left[0]!r} (and {len(left) - 1} more) has no place in keras_vit's "
            "ViT; it is a checkpoint of another architecture"
        )


def transformers_to_vit_jax(tensors, config, source, prefix):
    """(params, class names) of a transformers ViTModel / ViTForImageClassification state dict."""
    act = config.get("hidden_act", "gelu")
    if act not in _TRANSFORMERS_GELU:
        raise CheckpointError(
            f"{source}: hidden_act={act!r}; keras_vit's MLP computes the GELU "
            f"({', '.join(_TRANSFORMERS_GELU)})"
        )
    tensors = {name: value for name, value in tensors.items() if name != f"{prefix}embeddings.mask_token"}
    take = _Mapper(tensors, source)
    weight = take.take(f"{prefix}embeddings.patch_embeddings.projection.weight")
    hidden = weight.shape[0]
    heads, head_dim = _heads(hidden, config.get("num_attention_heads"), source, "num_attention_heads")
    mean, std = _mean_std(config, "image_mean", "image_std", source)
    params = {}
    params["embedding/kernel"], params["embedding/bias"] = _patch_kernel(
        weight, take.take(f"{prefix}embeddings.patch_embeddings.projection.bias"), mean, std
    )
    params["cls"] = take.take(f"{prefix}embeddings.cls_token")
    params[POSEMB] = take.take(f"{prefix}embeddings.position_embeddings")
    index = 0
    while f"{prefix}encoder.layer.{index}.layernorm_before.weight" in take.left:
        block, out = f"{prefix}encoder.layer.{index}.", f"Transformer/encoderblock_{index}/"
        _norm(params, take, block + "layernorm_before", out + "LayerNorm_0")
        for name in ("query", "key", "value"):
            kernel, bias = _split_heads(
                take.take(f"{block}attention.attention.{name}.weight"),
                take.take_optional(f"{block}attention.attention.{name}.bias"),
                heads,
                head_dim,
            )
            params[f"{out}MultiHeadDotProductAttention_1/{name}/kernel"] = kernel
            params[f"{out}MultiHeadDotProductAttention_1/{name}/bias"] = bias
        proj = take.take(f"{block}attention.output.dense.weight")
        params[f"{out}MultiHeadDotProductAttention_1/out/kernel"] = proj.T.reshape(heads, head_dim, hidden)
        params[f"{out}MultiHeadDotProductAttention_1/out/bias"] = take.take(
            f"{block}attention.output.dense.bias"
        )
        _norm(params, take, block + "layernorm_after", out + "LayerNorm_2")
        _linear(params, take, block + "intermediate.dense", out + "MlpBlock_3/Dense_0")
        _linear(params, take, block + "output.dense", out + "MlpBlock_3/Dense_1")
        index += 1
    _norm(params, take, f"{prefix}layernorm", "Transformer/encoder_norm")
    if f"{prefix}pooler.dense.weight" in take.left:
        # ViTModel's pooler: tanh(dense(first token)), the official pre-logits layer.
        if config.get("pooler_act", "tanh") != "tanh":
            raise CheckpointError(
                f"{source}: pooler_act={config['pooler_act']!r}; keras_vit's pre-logits use tanh"
            )
        _linear(params, take, f"{prefix}pooler.dense", "pre_logits")
    if "classifier.weight" in take.left:
        _linear(params, take, "classifier", "head")
    _check_all_used(take)
    params[NUMERICS_EPSILON] = np.asarray(config.get("layer_norm_eps", 1e-12), np.float64)
    params[NUMERICS_GELU_APPROXIMATE] = np.asarray(int(_TRANSFORMERS_GELU[act]), np.int8)
    names = None
    if "head/kernel" in params and config.get("id2label"):
        names = _label_list(config["id2label"])
        if len(names) != params["head/kernel"].shape[-1]:
            names = None
    return ConvertedParams(params, "transformers", prefix), names
