"""The official ViT variants: the architecture each official name stands for.

Its own module because both the models (which build them) and the weights (which find the
variant of a model to pick its registry file) need the table, and the weights module must
not import the models: the models load weights.
"""

# The official variants (vit_jax/configs/models.py). Parameter counts at 224 px with a
# 1000-class head are in tests/test_models.py.
VARIANTS = {
    "ViT-Ti_16": dict(patch_size=16, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768),
    "ViT-S_16": dict(patch_size=16, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536),
    "ViT-S_32": dict(patch_size=32, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536),
    "ViT-B_8": dict(patch_size=8, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "ViT-B_16": dict(patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "ViT-B_32": dict(patch_size=32, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "ViT-L_16": dict(patch_size=16, hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096),
    "ViT-L_32": dict(patch_size=32, hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096),
    "ViT-H_14": dict(patch_size=14, hidden_size=1280, num_layers=32, num_heads=16, mlp_dim=5120),
    "R50+ViT-B_16": dict(
        patch_size=1, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072, resnet_layers=(3, 4, 9)
    ),
}


def variant_of(model):
    """Official name of the variant `model` was built as, or None for any other shape."""
    for name, spec in VARIANTS.items():
        if all(getattr(model, key, None) == value for key, value in spec.items()) and (
            bool(spec.get("resnet_layers")) == bool(getattr(model, "resnet_layers", None))
        ):
            return name
    return None
