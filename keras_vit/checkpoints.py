"""The registry of official ViT checkpoints published in gs://vit_models.

Sources: the vision_transformer repository (README "Available ViT models", vit_jax/configs/
models.py). The original release (Dosovitskiy et al.) lives in `imagenet21k/` and
`imagenet21k+imagenet2012/`; the AugReg release (Steiner et al., "How to train your ViT?")
in `augreg/`, where we register the checkpoint the README recommends per variant (its table
of the `i21k_300` column of the paper's Table 3, hybrids included) and its ImageNet
fine-tune; every AugReg file name is one that `gs://vit_models/augreg/index.csv` lists.
No sha256 is published for any of them, so `sha256` is None throughout: downloads are
verified structurally instead (every key and shape against the model).
"""

import dataclasses

from keras_vit.variants import VARIANTS

BUCKET = "https://storage.googleapis.com/vit_models"
IMAGENET21K_CLASSES = 21843
IMAGENET_CLASSES = 1000

# AugReg: the recommended ImageNet-21k pre-training per variant (README table) and the
# fine-tune the README lists next to it; the two file stems share the pre-training part.
_AUGREG = {
    "ViT-Ti_16": ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "lr_0.03"),
    "ViT-S_16": ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "lr_0.03"),
    "ViT-S_32": ("S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", "lr_0.01"),
    "ViT-B_16": ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "lr_0.03"),
    "ViT-B_32": ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "lr_0.01"),
    "ViT-L_16": ("L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", "lr_0.01"),
    "R+ViT-Ti_16": ("R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "lr_0.03"),
    "R26+ViT-S_32": ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "lr_0.01"),
    "R50+ViT-L_32": ("R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "lr_0.01"),
}


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One published file: where it is and what model it fits."""

    name: str  # registry name, e.g. "imagenet21k+imagenet2012"
    variant: str  # official model name, e.g. "ViT-B_16"
    url: str
    file_name: str  # name in the Keras cache (unique across the registry)
    image_size: int  # native resolution (square)
    num_classes: int
    representation_size: int | None  # width of the pre-logits layer, None if absent
    sha256: str | None = None  # None: not published; verified structurally instead
    classifier: str = "token"

    def describe(self):
        return dict(
            image_size=(self.image_size, self.image_size),
            num_classes=self.num_classes,
            representation_size=self.representation_size,
            classifier=self.classifier,
        )


def _original(name, variant, image_size, num_classes, pre_logits, stem=None):
    stem = stem or variant
    folder = name.replace("-224", "")
    url = f"{BUCKET}/{folder.replace('+', '%2B')}/{stem.replace('+', '%2B')}.npz"
    return Checkpoint(
        name=name,
        variant=variant,
        url=url,
        file_name=f"{folder}_{stem}.npz",
        image_size=image_size,
        num_classes=num_classes,
        # The original imagenet21k checkpoints have a pre-logits layer as wide as the model.
        representation_size=VARIANTS[variant]["hidden_size"] if pre_logits else None,
    )


def _augreg(name, variant, stem, image_size, num_classes):
    return Checkpoint(
        name=name,
        variant=variant,
        url=f"{BUCKET}/augreg/{stem}.npz",
        file_name=f"augreg_{stem}.npz",
        image_size=image_size,
        num_classes=num_classes,
        representation_size=None,
    )


def _build():
    registry = {}

    def add(entry):
        registry.setdefault(entry.name, {})[entry.variant] = entry

    for variant in ("ViT-B_16", "ViT-B_32", "ViT-L_16", "ViT-L_32", "ViT-H_14", "R50+ViT-B_16"):
        add(_original("imagenet21k", variant, 224, IMAGENET21K_CLASSES, pre_logits=True))
    for variant in ("ViT-B_16", "ViT-B_32", "ViT-L_16", "ViT-L_32", "R50+ViT-B_16"):
        add(_original("imagenet21k+imagenet2012", variant, 384, IMAGENET_CLASSES, pre_logits=False))
    for variant in ("ViT-B_16", "ViT-L_16"):
        add(
            _original(
                "imagenet21k+imagenet2012-224",
                variant,
                224,
                IMAGENET_CLASSES,
                pre_logits=False,
                stem=f"{variant}-224",
            )
        )
    for variant, (stem, finetune_lr) in _AUGREG.items():
        add(_augreg("augreg-imagenet21k", variant, stem, 224, IMAGENET21K_CLASSES))
        finetuned = f"{stem}--imagenet2012-steps_20k-{finetune_lr}-res_384"
        add(_augreg("augreg-imagenet21k+imagenet2012", variant, finetuned, 384, IMAGENET_CLASSES))
    return registry


# registry name -> {official variant name -> Checkpoint}
REGISTRY = _build()


# The recommended Hugging Face Hub checkpoints per variant, for `weights=` beside the .npz names
# above (keras_vit.hub downloads them; keras_vit.hf_layout reads them). timm's `augreg2` B/16 and
# B/8 ImageNet fine-tunes exist only there; google/vit-* are transformers' own conversions.
HUB_NAMES = {
    "ViT-Ti_16": (
        "hf-hub:timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k",
        "hf-hub:timm/vit_tiny_patch16_384.augreg_in21k_ft_in1k",
    ),
    "ViT-S_16": ("hf-hub:timm/vit_small_patch16_224.augreg_in21k_ft_in1k",),
    "ViT-S_32": ("hf-hub:timm/vit_small_patch32_224.augreg_in21k_ft_in1k",),
    "ViT-B_8": ("hf-hub:timm/vit_base_patch8_224.augreg2_in21k_ft_in1k",),
    "ViT-B_16": (
        "hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k",
        "hf-hub:timm/vit_base_patch16_384.augreg_in21k_ft_in1k",
        "hf-hub:timm/vit_base_patch16_224.augreg_in21k",
        "hf-hub:timm/vit_base_patch16_224.orig_in21k",
        "hf://google/vit-base-patch16-224",
        "hf://google/vit-base-patch16-224-in21k",
    ),
    "ViT-B_32": ("hf-hub:timm/vit_base_patch32_224.augreg_in21k_ft_in1k", "hf://google/vit-base-patch32-384"),
    "ViT-L_16": (
        "hf-hub:timm/vit_large_patch16_224.augreg_in21k_ft_in1k",
        "hf-hub:timm/vit_large_patch16_384.augreg_in21k_ft_in1k",
        "hf://google/vit-large-patch16-224",
    ),
    "ViT-L_32": ("hf-hub:timm/vit_large_patch32_384.orig_in21k_ft_in1k", "hf://google/vit-large-patch32-384"),
    "ViT-H_14": ("hf-hub:timm/vit_huge_patch14_224.orig_in21k", "hf://google/vit-huge-patch14-224-in21k"),
}


def names():
    return sorted(REGISTRY)


def lookup(name, variant):
    """The Checkpoint for `name` and `variant`; ValueError (one line) when there is none."""
    if name not in REGISTRY:
        raise ValueError(
            f"unknown weights {name!r}: not a registry name; known names: "
            f"{', '.join(names())} (or pass the path of a .npz, .weights.h5 or "
            ".keras file, or a Hub name such as hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k)"
        )
    if variant is None:
        raise ValueError(
            f"weights {name!r} is a registry name and needs a model variant "
            f"(one of {', '.join(sorted(REGISTRY[name]))})"
        )
    entries = REGISTRY[name]
    if variant not in entries:
        others = [n for n in names() if variant in REGISTRY[n]]
        raise ValueError(
            f"no {name!r} checkpoint is published for {variant}; "
            f"{variant} has: {', '.join(others) or 'none'}; "
            f"{name!r} exists for: {', '.join(sorted(entries))}"
        )
    return entries[variant]
