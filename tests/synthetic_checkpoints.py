"""Synthetic official checkpoints: the real keys and shapes, random values.

`vit_jax_params` writes the original vit_jax layout; `to_big_vision` rewrites such a dict
the way big_vision stores the same weights (`params/` prefix, top-level `pos_embedding`,
linen sub-module numbers, blocks stacked on a leading axis), independently of keras_vit.
Hybrids carry the BiT ResNet stem of vit_jax's models_vit.py: `conv_root`, `gn_root`, then
`block{s}/unit{u}/{conv,gn}{1,2,3,_proj}` for any number of stages, none included.
"""

import numpy as np

# Real variant shapes (vit_jax/configs/models.py).
TI16 = dict(patch_size=16, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768)
S32 = dict(patch_size=32, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536)
R50_B16 = dict(
    patch_size=1, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072, resnet_layers=(3, 4, 9)
)
# The AugReg hybrids (vit_jax/configs/models.py): the stem's root alone with 8x8 patches,
# and R26's and R50's four stages with 1x1 patches.
R_TI16 = dict(patch_size=8, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768, resnet_layers=())
R26_S32 = dict(
    patch_size=1, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536, resnet_layers=(2, 2, 2, 2)
)
R50_L32 = dict(
    patch_size=1, hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096, resnet_layers=(3, 4, 6, 3)
)
# A reduced hybrid: the same stem structure with one unit per stage and a small encoder.
SMALL_HYBRID = dict(
    patch_size=1, hidden_size=64, num_layers=2, num_heads=2, mlp_dim=128, resnet_layers=(1, 1, 1)
)


def token_stride(config):
    """Image pixels per token of a config: the patch, times the stem's 4 * 2^(stages - 1)."""
    layers = config.get("resnet_layers")
    stem = 1 if layers is None else 4 * 2 ** max(len(layers) - 1, 0)
    return config["patch_size"] * stem


def vit_jax_params(
    seed,
    *,
    image_size,
    patch_size,
    hidden_size,
    num_layers,
    num_heads,
    mlp_dim,
    num_classes=10,
    representation_size=None,
    classifier="token",
    resnet_layers=None,
    resnet_width=1,
    num_channels=3,
    shapes_only=False,
):
    """A random checkpoint in the vit_jax layout, scaled so activations stay O(1).

    shapes_only: every array a read-only view of one zero (no memory), for checking what a
    file of that shape says about its model (e.g. of a 300M-parameter variant) quickly.
    """
    rng = np.random.default_rng(seed)
    p = {}

    def dense(key, fan_in, shape):
        if shapes_only:
            p[key] = np.broadcast_to(np.float32(0), shape)
            return
        p[key] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    def small(key, shape, center=0.0):
        if shapes_only:
            p[key] = np.broadcast_to(np.float32(center), shape)
            return
        p[key] = (center + 0.1 * rng.standard_normal(shape)).astype(np.float32)

    channels = num_channels
    stride = 1
    if resnet_layers is not None:  # () is the stem's root alone
        width = int(64 * resnet_width)
        dense("conv_root/kernel", 49 * channels, (7, 7, channels, width))
        small("gn_root/scale", (width,), 1.0)
        small("gn_root/bias", (width,))
        channels, stride = width, 4
        for stage, units in enumerate(resnet_layers, 1):
            features = width * 2 ** (stage - 1)
            stride *= 2 if stage > 1 else 1
            for unit in range(1, units + 1):
                prefix = f"block{stage}/unit{unit}/"
                if unit == 1:
                    dense(prefix + "conv_proj/kernel", channels, (1, 1, channels, features * 4))
                    small(prefix + "gn_proj/scale", (features * 4,), 1.0)
                    small(prefix + "gn_proj/bias", (features * 4,))
                for name, shape in (
                    ("1", (1, 1, channels, features)),
                    ("2", (3, 3, features, features)),
                    ("3", (1, 1, features, features * 4)),
                ):
                    dense(prefix + f"conv{name}/kernel", np.prod(shape[:3]), shape)
                    out = shape[-1]
                    small(prefix + f"gn{name}/scale", (out,), 1.0)
                    small(prefix + f"gn{name}/bias", (out,))
                channels = features * 4
    d = hidden_size
    dense("embedding/kernel", patch_size * patch_size * channels, (patch_size, patch_size, channels, d))
    small("embedding/bias", (d,))
    grid = image_size // (patch_size * stride)
    tokens = grid * grid
    if classifier == "token":
        small("cls", (1, 1, d))
        tokens += 1
    small("Transformer/posembed_input/pos_embedding", (1, tokens, d))
    head_dim = d // num_heads
    for i in range(num_layers):
        b = f"Transformer/encoderblock_{i}/"
        small(b + "LayerNorm_0/scale", (d,), 1.0)
        small(b + "LayerNorm_0/bias", (d,))
        small(b + "LayerNorm_2/scale", (d,), 1.0)
        small(b + "LayerNorm_2/bias", (d,))
        a = b + "MultiHeadDotProductAttention_1/"
        for name in ("query", "key", "value"):
            dense(a + f"{name}/kernel", d, (d, num_heads, head_dim))
            small(a + f"{name}/bias", (num_heads, head_dim))
        dense(a + "out/kernel", d, (num_heads, head_dim, d))
        small(a + "out/bias", (d,))
        m = b + "MlpBlock_3/"
        dense(m + "Dense_0/kernel", d, (d, mlp_dim))
        small(m + "Dense_0/bias", (mlp_dim,))
        dense(m + "Dense_1/kernel", mlp_dim, (mlp_dim, d))
        small(m + "Dense_1/bias", (d,))
    small("Transformer/encoder_norm/scale", (d,), 1.0)
    small("Transformer/encoder_norm/bias", (d,))
    features = d
    if representation_size:
        dense("pre_logits/kernel", d, (d, representation_size))
        small("pre_logits/bias", (representation_size,))
        features = representation_size
    if num_classes:
        dense("head/kernel", features, (features, num_classes))
        small("head/bias", (num_classes,))
    return p


_VIT_JAX_TO_LINEN = {
    "LayerNorm_0": "LayerNorm_0",
    "MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
    "LayerNorm_2": "LayerNorm_1",
    "MlpBlock_3": "MlpBlock_0",
}


def to_big_vision(params, *, stacked=True, cls_row=True):
    """The same weights in the big_vision layout.

    cls_row=False drops the class-token row of the position embeddings, as big_vision does
    (it adds them before prepending the class token); that only means the same model when the
    dropped row is zero.
    """
    out = {}
    blocks = {}
    for key, value in params.items():
        if key == "Transformer/posembed_input/pos_embedding":
            out["params/pos_embedding"] = value if cls_row or "cls" not in params else value[:, 1:]
        elif key.startswith("Transformer/encoderblock_"):
            _, block, module, rest = key.split("/", 3)
            linen_key = f"{_VIT_JAX_TO_LINEN[module]}/{rest}"
            if stacked:
                blocks.setdefault(linen_key, {})[int(block.split("_")[1])] = value
            else:
                out[f"params/Transformer/{block}/{linen_key}"] = value
        else:
            out[f"params/{key}"] = value
    for key, by_layer in blocks.items():
        out[f"params/Transformer/encoderblock/{key}"] = np.stack([by_layer[i] for i in range(len(by_layer))])
    return out


def save(path, params):
    with open(path, "wb") as f:
        np.savez(f, **params)
    return str(path)
