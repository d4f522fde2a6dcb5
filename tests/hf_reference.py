"""The PyTorch side of tests/test_hf_checkpoints.py, run as a subprocess (torch only, no TensorFlow).

    python tests/hf_reference.py make OUT
        random timm and transformers ViTs (small widths), each saved by its own library as
        safetensors under OUT/NAME/, plus OUT/reference.npz: the inputs per resolution and
        every model's logits on them;
    python tests/hf_reference.py logits SPEC.json OUT.npz
        loads each folder of SPEC ([{"name", "format", "dir", "input"}]) with timm's or
        transformers' own API and writes its logits on the input (an .npy of [0, 255] pixels).

A separate process because torch must be imported before TensorFlow, which the tests' conftest
imports first.
"""

import json
import os
import sys

import numpy as np
import timm
import torch
import transformers
from timm.models import save_for_hf

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# name -> (timm architecture, create_model arguments, image size)
TIMM_MODELS = {
    "timm_ti224": ("vit_tiny_patch16_224", dict(embed_dim=48, depth=2, num_heads=3, num_classes=5), 224),
    "timm_ti160": ("vit_tiny_patch16_224", dict(embed_dim=48, depth=2, num_heads=3, num_classes=5), 160),
    "timm_s224": ("vit_small_patch32_224", dict(embed_dim=64, depth=2, num_heads=4, num_classes=6), 224),
    "timm_s160": ("vit_small_patch32_224", dict(embed_dim=64, depth=2, num_heads=4, num_classes=6), 160),
    # global_pool="avg" without a class token; timm adds fc_norm (LayerNorm after pooling) itself.
    "timm_gap": (
        "vit_tiny_patch16_224",
        dict(embed_dim=48, depth=2, num_heads=3, num_classes=5, class_token=False, global_pool="avg"),
        224,
    ),
    "timm_gap_nofc": (
        "vit_tiny_patch16_224",
        dict(
            embed_dim=48,
            depth=2,
            num_heads=3,
            num_classes=5,
            class_token=False,
            global_pool="avg",
            fc_norm=False,
        ),
        224,
    ),
    # Trained on ImageNet mean/std inputs (as timm's DINO and MAE ViTs are).
    "timm_imagenet_norm": (
        "vit_tiny_patch16_224",
        dict(embed_dim=48, depth=2, num_heads=3, num_classes=5),
        224,
    ),
    # A hybrid: a ResNet stem in patch_embed.backbone.
    "timm_hybrid": ("vit_tiny_r_s16_p8_224", dict(depth=1, num_classes=5), 224),
    # The trainer tests' tiny shape (tests/trainer_cli.py TINY_MODEL) at their 32 px.
    "timm_trainer": (
        "vit_tiny_patch16_224",
        dict(patch_size=8, embed_dim=32, depth=1, num_heads=2, mlp_ratio=2.0, num_classes=5),
        32,
    ),
    # Full ViT-Ti/16 width and depth, for the command line tests that name the variant.
    "timm_vit_ti16": ("vit_tiny_patch16_224", dict(num_classes=3), 224),
}
TIMM_LABELS = {
    "timm_ti224": ["zebra", "tabby", "robin", "tractor", "pizza"],
    "timm_vit_ti16": ["tabby", "robin", "tractor"],
}
# name -> (ViTConfig arguments, model class)
TRANSFORMERS_MODELS = {
    "hf_a224": (
        dict(hidden_size=48, num_attention_heads=3, intermediate_size=96, image_size=224, patch_size=16),
        "cls",
    ),
    "hf_a160": (
        dict(hidden_size=48, num_attention_heads=3, intermediate_size=96, image_size=160, patch_size=16),
        "cls",
    ),
    "hf_b224": (
        dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, image_size=224, patch_size=32),
        "cls",
    ),
    "hf_b160": (
        dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, image_size=160, patch_size=32),
        "cls",
    ),
    # ViTModel with its pooler (tanh dense on the class token: the official pre-logits).
    "hf_pooler": (
        dict(hidden_size=48, num_attention_heads=3, intermediate_size=96, image_size=224, patch_size=16),
        "base",
    ),
}
HF_LABELS = ["cat", "dog", "bird", "fish"]
RESOLUTIONS = (32, 160, 224)


def randomize(model, seed):
    """Every parameter random (norm scales around 1), so no part of a model is an identity."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            is_norm_scale = param.dim() == 1 and "norm" in name and name.endswith("weight")
            param.copy_(1.0 + 0.1 * noise if is_norm_scale else 0.05 * noise)
    return model.eval()


def inputs(size):
    return np.random.RandomState(size).uniform(0, 255, (2, size, size, 3)).astype(np.float32)


def normalized(pixels, mean, std):
    x = (pixels / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2), np.float32))


def timm_logits(model, pixels):
    cfg = model.pretrained_cfg
    with torch.no_grad():
        return model(normalized(pixels, cfg.get("mean"), cfg.get("std"))).numpy()


def transformers_output(model, pixels):
    with torch.no_grad():
        out = model(pixel_values=normalized(pixels, (0.5,) * 3, (0.5,) * 3))
    return (out.logits if hasattr(out, "logits") else out.pooler_output).numpy()


def make(out):
    refs = {f"input_{size}": inputs(size) for size in RESOLUTIONS}
    for seed, (name, (arch, kwargs, size)) in enumerate(TIMM_MODELS.items()):
        overlay = dict(mean=IMAGENET_MEAN, std=IMAGENET_STD) if name == "timm_imagenet_norm" else None
        torch.manual_seed(seed)
        model = timm.create_model(arch, img_size=size, pretrained_cfg_overlay=overlay, **kwargs)
        randomize(model, seed)
        model_config = {"label_names": TIMM_LABELS[name]} if name in TIMM_LABELS else None
        save_for_hf(model, os.path.join(out, name), model_config=model_config, safe_serialization=True)
        refs[name] = timm_logits(model, refs[f"input_{size}"])
    for seed, (name, (kwargs, kind)) in enumerate(TRANSFORMERS_MODELS.items(), start=100):
        config = transformers.ViTConfig(num_hidden_layers=2, **kwargs)
        if kind == "cls":
            config.id2label = dict(enumerate(HF_LABELS))
            config.label2id = {label: i for i, label in enumerate(HF_LABELS)}
            model = transformers.ViTForImageClassification(config)
        else:
            model = transformers.ViTModel(config, add_pooling_layer=True)
        randomize(model, seed)
        model.save_pretrained(os.path.join(out, name))
        refs[name] = transformers_output(model, refs[f"input_{kwargs['image_size']}"])
    # A pickle checkpoint, which keras_vit must refuse without opening.
    os.makedirs(os.path.join(out, "pickle"), exist_ok=True)
    torch.save({"pos_embed": torch.zeros(1)}, os.path.join(out, "pickle", "pytorch_model.bin"))
    np.savez(os.path.join(out, "reference.npz"), **refs)


def logits(spec_path, out_path):
    with open(spec_path) as f:
        spec = json.load(f)
    results = {}
    for item in spec:
        pixels = np.load(item["input"])
        if item["format"] == "timm":
            model = timm.create_model(f"local-dir:{item['dir']}", pretrained=True).eval()
            results[item["name"]] = timm_logits(model, pixels)
            results[item["name"] + "_act"] = np.asarray(type(model.blocks[0].mlp.act).__name__)
        else:
            model = transformers.ViTForImageClassification.from_pretrained(item["dir"]).eval()
            results[item["name"]] = transformers_output(model, pixels)
            results[item["name"] + "_labels"] = np.asarray(
                [model.config.id2label[i] for i in range(model.num_labels)]
            )
            results[item["name"] + "_eps"] = np.asarray(model.config.layer_norm_eps)
    np.savez(out_path, **results)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        logits(sys.argv[2], sys.argv[3])
