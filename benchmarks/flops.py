"""Floating-point operations of a ViT, counted exactly from its shape (a multiply-add is 2).

Counted: the patch embedding, per block the Q/K/V and output projections, the two attention
matmuls (Q K^T and the weights times V, T^2 each), the MLP's two layers, and the head. Not
counted: layer norms, softmax, GELU, biases and additions (a few percent at most). A training
step is 3 forwards (the backward pass is two matmuls per forward matmul). The count is the
model's, the same for every contestant: keras_vit's inference and training of a class-token
model compute its last block for that token alone (keras_vit/class_token_only.py), about 7%
fewer multiply-adds, so its GFLOP/s there include work it skips.

Also the paper's compute (Dosovitskiy et al. 2021, Table 2): TPUv3 core-days from the FLOPs of
its pre-training runs and an assumed efficiency, so the estimate's arithmetic is tested here.
"""

import keras_vit

# TPUv3: 123 TFLOP/s (bfloat16) per chip, two cores per chip.
TPUV3_CORE_PEAK = 61.5e12
JFT_IMAGES = 303_000_000
# Paper, Table 2 (TPUv3-core-days) and the epochs on JFT-300M its appendix lists (Table 6).
PAPER_RUNS = (
    {"variant": "ViT-L_16", "epochs": 7, "core_days": 680},
    {"variant": "ViT-H_14", "epochs": 14, "core_days": 2500},
)


def shape(variant, **overrides):
    """The variant's shape (keras_vit.VARIANTS) with `overrides` (e.g. num_layers=1)."""
    found = dict(keras_vit.VARIANTS[variant])
    found.update({k: v for k, v in overrides.items() if v})
    return found


def forward(
    image_size, patch_size, hidden_size, num_layers, mlp_dim, num_classes=1000, channels=3, token=True, **_
):
    """{part: FLOPs} of one image's forward pass, and "total"."""
    patches = (image_size // patch_size) ** 2
    t = patches + (1 if token else 0)
    d = hidden_size
    parts = {
        "patch_embedding": 2 * patches * patch_size * patch_size * channels * d,
        "qkv": num_layers * 2 * t * d * 3 * d,
        "attention": num_layers * 2 * (2 * t * t * d),  # Q K^T, then weights x V, over all heads
        "projection": num_layers * 2 * t * d * d,
        "mlp": num_layers * 2 * (2 * t * d * mlp_dim),
        "head": 2 * d * num_classes,
    }
    parts["total"] = sum(parts.values())
    return parts


def tokens(image_size, patch_size, token=True):
    return (image_size // patch_size) ** 2 + (1 if token else 0)


def train_step(image_size, **shape_kwargs):
    """FLOPs of one image's training step: forward and backward."""
    return 3 * forward(image_size, **shape_kwargs)["total"]


def paper_estimates(efficiency, image_size=224):
    """Per paper run: its training FLOPs, the images/s per TPUv3 core and core-days at
    `efficiency` (a fraction of the core's peak), and the efficiency the paper's own core-days imply."""
    rows = []
    for run in PAPER_RUNS:
        per_image = train_step(image_size, **shape(run["variant"]), num_classes=18_291)
        images = run["epochs"] * JFT_IMAGES
        per_core = efficiency * TPUV3_CORE_PEAK / per_image
        rows.append(
            {
                "variant": run["variant"],
                "epochs": run["epochs"],
                "paper_core_days": run["core_days"],
                "train_flops_per_image": per_image,
                "images_per_s_per_core": per_core,
                "core_days": images / per_core / 86_400,
                "implied_efficiency": per_image * images / (run["core_days"] * 86_400 * TPUV3_CORE_PEAK),
            }
        )
    return rows
