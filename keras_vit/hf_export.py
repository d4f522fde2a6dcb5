"""A keras_vit model as a timm or transformers checkpoint: model.safetensors plus config.json.

    save_pretrained(model, "out/", to="timm")   # timm.create_model("local-dir:out/", pretrained=True)
    save_pretrained(model, "out/", to="transformers")  # ViTForImageClassification.from_pretrained("out/")

The inverse of keras_vit.hf_layout's reading: the same tensor names and layouts, and a config
from which timm or transformers builds the same function (GELU form, LayerNorm epsilon, pooling,
resolution, class names). keras_vit feeds the patch embedding (pixels / 255 - 0.5) / 0.5, which
the configs state as the input normalisation. Files are written atomically.
"""

import json
import os

import numpy as np

from keras_vit import fileio, keras_layout, labels, posembs
from keras_vit.errors import CheckpointError
from keras_vit.hf_layout import (
    CONFIG_FILE,
    KERAS_VIT_MEAN,
    KERAS_VIT_STD,
    PREPROCESSOR_FILE,
    SAFETENSORS_FILE,
    TIMM_LAYER_NORM_EPSILON,
)
from keras_vit.npz_layout import POSEMB

FORMATS = ("timm", "transformers")
# The files save_pretrained writes into its folder, per format (the names timm and transformers read).
FILES = {
    "timm": (SAFETENSORS_FILE, CONFIG_FILE),
    "transformers": (SAFETENSORS_FILE, CONFIG_FILE, PREPROCESSOR_FILE),
}
# timm's registered architecture per (hidden, layers, heads, mlp) family; model_args set the rest.
_TIMM_FAMILIES = {
    (192, 12, 3, 768): "tiny",
    (384, 12, 6, 1536): "small",
    (768, 12, 12, 3072): "base",
    (1024, 24, 16, 4096): "large",
    (1280, 32, 16, 5120): "huge",
}
_TIMM_PATCHES = {"tiny": (16,), "small": (16, 32), "base": (8, 16, 32), "large": (16, 32), "huge": (14,)}


def save_pretrained(model, directory, to="timm", class_names=None):
    """Writes `model` (a keras_vit ViT) to `directory` in timm's or transformers' format.

    class_names: one per output, for the config's labels (default: the model's own, e.g. from
    a Hub checkpoint, else the ImageNet names of a 1000- or 21,843-class head). Returns the paths
    written.
    """
    if to not in FORMATS:
        raise ValueError(f"--to must be one of {', '.join(FORMATS)}, got {to!r}")
    _check_exportable(model, to)
    params = keras_layout.export_params(model)
    names = _class_names(model, class_names)
    if to == "timm":
        tensors, configs = _timm(model, params, names)
    else:
        tensors, configs = _transformers(model, params, names)
    fileio.makedirs(os.fspath(directory))
    written = [fileio.join(os.fspath(directory), SAFETENSORS_FILE)]
    fileio.write_atomic(written[0], lambda tmp: _write_safetensors(tmp, tensors))
    for name, config in configs.items():
        path = fileio.join(os.fspath(directory), name)
        text = json.dumps(config, indent=2) + "\n"
        fileio.write_atomic(path, lambda tmp, text=text: _write_text(tmp, text))
        written.append(path)
    return written


def _write_text(tmp, text):
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def _write_safetensors(tmp, tensors):
    try:
        import safetensors.numpy
    except ImportError:
        raise CheckpointError(
            "writing safetensors files needs safetensors: pip install 'keras-vision-transformer[hub]'"
        ) from None
    contiguous = {name: np.ascontiguousarray(value, np.float32) for name, value in tensors.items()}
    # transformers reads only files that say which framework wrote their layout.
    safetensors.numpy.save_file(contiguous, tmp, metadata={"format": "pt"})


def _check_exportable(model, to):
    what = None
    if getattr(model, "resnet_layers", None) is not None:
        what = "a hybrid (ResNet stem); timm's and transformers' ViTs have none in this format"
    elif not posembs.get(getattr(model, "posemb", posembs.OFFICIAL)).hf_exportable:
        what = f"posemb={model.posemb!r}; timm and transformers have learned 1-D position embeddings"
    elif model.representation_size and model.include_top:
        what = "a tanh pre-logits layer before the head, which their ViT classifiers do not have"
    elif model.representation_size and to == "timm":
        what = "a tanh pre-logits layer, which timm's ViT does not have"
    elif to == "timm" and model.layer_norm_epsilon != TIMM_LAYER_NORM_EPSILON:
        what = f"LayerNorm epsilon {model.layer_norm_epsilon}; timm's ViT has {TIMM_LAYER_NORM_EPSILON}"
    elif to == "transformers" and model.classifier != "token":
        what = "classifier='gap'; transformers' ViT classifies from the class token"
    elif not isinstance(model.patch_size, int):
        what = f"non-square patches {model.patch_size}"
    if what:
        raise CheckpointError(f"cannot export {model.name} to {to}: it has {what}; export it as .npz instead")


def _class_names(model, class_names):
    if not model.include_top:
        return None
    if class_names is not None:
        return labels.class_names(model.num_classes, class_names)
    own = getattr(model, "class_names", None)
    return list(own) if own else labels.imagenet_names(model.num_classes)


def _image_size(model):
    size = tuple(model.image_size)
    if None in size:
        base = model.base_image_size or (224, 224)
        size = tuple(b if s is None else s for s, b in zip(size, base))
    return size


def _attention(params, block, hidden):
    """(q, k, v, out) of a block as (out, in) matrices, and the biases."""
    prefix = f"Transformer/encoderblock_{block}/MultiHeadDotProductAttention_1/"
    qkv = [params[f"{prefix}{name}/kernel"].reshape(hidden, hidden).T for name in ("query", "key", "value")]
    biases = [params[f"{prefix}{name}/bias"].reshape(-1) for name in ("query", "key", "value")]
    out = params[f"{prefix}out/kernel"].reshape(hidden, hidden).T
    return qkv, biases, out, params[f"{prefix}out/bias"]


def _block_params(params, block):
    prefix = f"Transformer/encoderblock_{block}/"
    return {
        "norm1": (params[prefix + "LayerNorm_0/scale"], params[prefix + "LayerNorm_0/bias"]),
        "norm2": (params[prefix + "LayerNorm_2/scale"], params[prefix + "LayerNorm_2/bias"]),
        "fc1": (params[prefix + "MlpBlock_3/Dense_0/kernel"].T, params[prefix + "MlpBlock_3/Dense_0/bias"]),
        "fc2": (params[prefix + "MlpBlock_3/Dense_1/kernel"].T, params[prefix + "MlpBlock_3/Dense_1/bias"]),
    }


def _patch_weight(params):
    return params["embedding/kernel"].transpose(3, 2, 0, 1), params["embedding/bias"]


def _pair(tensors, name, value):
    tensors[f"{name}.weight"], tensors[f"{name}.bias"] = value


def _timm(model, params, names):
    hidden = model.hidden_size
    tensors = {}
    _pair(tensors, "patch_embed.proj", _patch_weight(params))
    if "cls" in params:
        tensors["cls_token"] = params["cls"]
    tensors["pos_embed"] = params[POSEMB]
    for block in range(model.num_layers):
        parts = _block_params(params, block)
        qkv, biases, out, out_bias = _attention(params, block, hidden)
        name = f"blocks.{block}."
        _pair(tensors, name + "norm1", parts["norm1"])
        _pair(tensors, name + "attn.qkv", (np.concatenate(qkv), np.concatenate(biases)))
        _pair(tensors, name + "attn.proj", (out, out_bias))
        _pair(tensors, name + "norm2", parts["norm2"])
        _pair(tensors, name + "mlp.fc1", parts["fc1"])
        _pair(tensors, name + "mlp.fc2", parts["fc2"])
    if model.fc_norm:
        _pair(tensors, "fc_norm", (params["fc_norm/scale"], params["fc_norm/bias"]))
    else:
        _pair(
            tensors,
            "norm",
            (params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"]),
        )
    num_classes = model.num_classes if model.include_top else 0
    if num_classes:
        _pair(tensors, "head", (params["head/kernel"].T, params["head/bias"]))
    height, width = _image_size(model)
    family = _TIMM_FAMILIES.get((hidden, model.num_layers, model.num_heads, model.mlp_dim), "base")
    patch = model.patch_size if model.patch_size in _TIMM_PATCHES[family] else _TIMM_PATCHES[family][0]
    pool = "token" if model.classifier == "token" else "avg"
    model_args = dict(
        img_size=[height, width] if height != width else height,
        patch_size=model.patch_size,
        in_chans=model.num_channels,
        embed_dim=hidden,
        depth=model.num_layers,
        num_heads=model.num_heads,
        mlp_ratio=model.mlp_dim / hidden,
        class_token=model.classifier == "token",
        global_pool=pool,
        fc_norm=bool(model.fc_norm),
        num_classes=num_classes,
    )
    if model.gelu_approximate:
        model_args["act_layer"] = "gelu_tanh"  # official weights: Flax's tanh GELU
    config = dict(
        architecture=f"vit_{family}_patch{patch}_224",
        num_classes=num_classes,
        num_features=hidden,
        global_pool=pool,
        model_args=model_args,
        pretrained_cfg=dict(
            input_size=[model.num_channels, height, width],
            fixed_input_size=True,
            interpolation="bicubic",
            crop_pct=1.0,
            crop_mode="center",
            mean=list(KERAS_VIT_MEAN),
            std=list(KERAS_VIT_STD),
            num_classes=num_classes,
            first_conv="patch_embed.proj",
            classifier="head",
        ),
    )
    if names:
        config["label_names"] = names
    return tensors, {CONFIG_FILE: config}


def _transformers(model, params, names):
    hidden = model.hidden_size
    with_head = model.include_top
    prefix = "vit." if with_head else ""
    tensors = {
        f"{prefix}embeddings.cls_token": params["cls"],
        f"{prefix}embeddings.position_embeddings": params[POSEMB],
    }
    _pair(tensors, f"{prefix}embeddings.patch_embeddings.projection", _patch_weight(params))
    for block in range(model.num_layers):
        parts = _block_params(params, block)
        qkv, biases, out, out_bias = _attention(params, block, hidden)
        name = f"{prefix}encoder.layer.{block}."
        _pair(tensors, name + "layernorm_before", parts["norm1"])
        for part, matrix, bias in zip(("query", "key", "value"), qkv, biases):
            _pair(tensors, f"{name}attention.attention.{part}", (matrix, bias))
        _pair(tensors, name + "attention.output.dense", (out, out_bias))
        _pair(tensors, name + "layernorm_after", parts["norm2"])
        _pair(tensors, name + "intermediate.dense", parts["fc1"])
        _pair(tensors, name + "output.dense", parts["fc2"])
    encoder_norm = (params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"])
    _pair(tensors, f"{prefix}layernorm", encoder_norm)
    if model.representation_size:
        _pair(tensors, "pooler.dense", (params["pre_logits/kernel"].T, params["pre_logits/bias"]))
    if with_head:
        _pair(tensors, "classifier", (params["head/kernel"].T, params["head/bias"]))
    height, width = _image_size(model)
    config = dict(
        architectures=["ViTForImageClassification" if with_head else "ViTModel"],
        model_type="vit",
        hidden_size=hidden,
        num_hidden_layers=model.num_layers,
        num_attention_heads=model.num_heads,
        intermediate_size=model.mlp_dim,
        # transformers' names for the exact GELU and for the tanh form (official weights).
        hidden_act="gelu_pytorch_tanh" if model.gelu_approximate else "gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.02,
        layer_norm_eps=model.layer_norm_epsilon,
        image_size=[height, width] if height != width else height,
        patch_size=model.patch_size,
        num_channels=model.num_channels,
        qkv_bias=True,
        encoder_stride=model.patch_size,
    )
    if model.representation_size:
        config["pooler_output_size"] = model.representation_size
        config["pooler_act"] = "tanh"
    if with_head:
        names = names or [f"LABEL_{i}" for i in range(model.num_classes)]
        config["id2label"] = {str(i): name for i, name in enumerate(names)}
        config["label2id"] = {name: i for i, name in enumerate(names)}
    preprocessor = dict(
        image_processor_type="ViTImageProcessor",
        do_resize=True,
        size=dict(height=height, width=width),
        resample=2,
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=list(KERAS_VIT_MEAN),
        image_std=list(KERAS_VIT_STD),
    )
    return tensors, {CONFIG_FILE: config, PREPROCESSOR_FILE: preprocessor}
