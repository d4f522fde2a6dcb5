"""The official ViT variants: the architecture each official name stands for.

Its own module because both the models (which build them) and the weights (which find the
variant of a model to pick its registry file) need the table, and the weights module must
not import the models: the models load weights.
"""

_TI = dict(hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768)
_S = dict(hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536)
_B = dict(hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072)
_L = dict(hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096)
_H = dict(hidden_size=1280, num_layers=32, num_heads=16, mlp_dim=5120)
# BiT ResNet stems of the hybrids (units per stage). The root alone downsamples 4x, each
# stage after the first 2x more: R50 with (3, 4, 9) gives /16 on 1x1 patches, (3, 4, 6, 3)
# and R26's (2, 2, 2, 2) give /32; the root with 8x8 patches gives /32 too (R+Ti/16 keeps
# its official name).
_ROOT_ONLY = ()
_R26 = (2, 2, 2, 2)
_R50_16 = (3, 4, 9)
_R50_32 = (3, 4, 6, 3)

# The official variants (vit_jax/configs/models.py), plus R50+ViT-B_32 and R50+ViT-L_16,
# the paper's hybrids (Dosovitskiy et al., Table 6; the /32 ones take ResNet-50's stage 4,
# the /16 ones move its units into stage 3). Parameter counts at 224 px with a 1000-class
# head are in tests/test_models.py.
VARIANTS = {
    "ViT-Ti_16": dict(patch_size=16, **_TI),
    "ViT-S_16": dict(patch_size=16, **_S),
    "ViT-S_32": dict(patch_size=32, **_S),
    "ViT-B_8": dict(patch_size=8, **_B),
    "ViT-B_16": dict(patch_size=16, **_B),
    "ViT-B_32": dict(patch_size=32, **_B),
    "ViT-L_16": dict(patch_size=16, **_L),
    "ViT-L_32": dict(patch_size=32, **_L),
    "ViT-H_14": dict(patch_size=14, **_H),
    "R+ViT-Ti_16": dict(patch_size=8, **_TI, resnet_layers=_ROOT_ONLY),
    "R26+ViT-S_32": dict(patch_size=1, **_S, resnet_layers=_R26),
    "R26+ViT-B_32": dict(patch_size=1, **_B, resnet_layers=_R26),
    "R50+ViT-B_16": dict(patch_size=1, **_B, resnet_layers=_R50_16),
    "R50+ViT-B_32": dict(patch_size=1, **_B, resnet_layers=_R50_32),
    "R50+ViT-L_16": dict(patch_size=1, **_L, resnet_layers=_R50_16),
    "R50+ViT-L_32": dict(patch_size=1, **_L, resnet_layers=_R50_32),
}


def variant_of(model):
    """Official name of the variant `model` was built as, or None for any other shape."""
    for name, spec in VARIANTS.items():
        # A plain ViT has resnet_layers None; the root-only stem has resnet_layers ().
        stem = getattr(model, "resnet_layers", None)
        expected_stem = spec.get("resnet_layers")
        if (stem is None) != (expected_stem is None) or (stem is not None and tuple(stem) != expected_stem):
            continue
        if all(getattr(model, key, None) == value for key, value in spec.items() if key != "resnet_layers"):
            return name
    return None


def describe(model):
    """What `model` is, in words: its official name, or its shape when it is no official variant.

    "ViT-B_16", "custom ViT: patch 4, width 64, 4 layers, 4 heads", or for a hybrid
    "custom hybrid: ResNet stages (2, 2) + patch 1, width 64, 2 layers, 2 heads".
    """
    name = variant_of(model)
    if name:
        return name
    patch = model.patch_size
    if not isinstance(patch, int):
        patch = patch[0] if patch[0] == patch[1] else f"{patch[0]}x{patch[1]}"
    layers, heads = model.num_layers, model.num_heads
    shape = (
        f"patch {patch}, width {model.hidden_size}, {layers} layer{'s' * (layers != 1)}, "
        f"{heads} head{'s' * (heads != 1)}"
    )
    stem = getattr(model, "resnet_layers", None)
    if stem is None:
        return f"custom ViT: {shape}"
    stages = f"ResNet stages {tuple(stem)}" if stem else "ResNet root"
    return f"custom hybrid: {stages} + {shape}"
