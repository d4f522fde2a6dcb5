"""An independent NumPy forward pass of the official ViT, for holding keras_vit against.

Written from the equations (DESIGN.md) and the official Flax modules' semantics, sharing no
code with keras_vit: it reads a flat dict in the original vit_jax checkpoint layout
(`embedding/kernel`, `Transformer/encoderblock_0/...`) and images already scaled to [-1, 1].
Covers the plain ViT and the hybrids with a BiT ResNet stem (weight-standardised convolutions,
GroupNorm with 32 groups, SAME padding, as vit_jax's models_resnet) of any number of stages,
none included (the root alone, as R+ViT-Ti/16): the stages are read off the file's keys.
"""

import math

import numpy as np
import scipy.ndimage

LAYER_NORM_EPS = 1e-6
GROUP_NORM_EPS = 1e-6
GROUP_NORM_GROUPS = 32
# vit_jax models_resnet.StdConv standardises with this epsilon (not the GroupNorm one).
WEIGHT_STANDARDIZATION_EPS = 1e-5


def vit_forward(params, images, *, num_heads, classifier="token", resize_to_grid=None):
    """Logits (or the pooled / pre-logits features when the dict has no head) of `images`.

    params: flat dict, vit_jax layout. images: (B, H, W, C) in [-1, 1].
    classifier: "token" (class token output) or "gap" (mean of the patch tokens).
    resize_to_grid: (h, w) patch grid to resize the position embeddings to, the official way
    (scipy.ndimage.zoom, order 1, class-token row kept); None keeps them as they are.
    """
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = np.asarray(images, np.float64)
    if "conv_root/kernel" in p:
        x = resnet_stem(p, x)
    x = patch_embed(x, p["embedding/kernel"], p["embedding/bias"])
    batch, grid_h, grid_w, width = x.shape
    x = x.reshape(batch, grid_h * grid_w, width)

    has_cls = "cls" in p
    if has_cls:
        x = np.concatenate([np.broadcast_to(p["cls"], (batch, 1, width)), x], axis=1)
    posemb = p["Transformer/posembed_input/pos_embedding"]
    if resize_to_grid is not None:
        posemb = resize_posemb(posemb, resize_to_grid, num_prefix=1 if has_cls else 0)
    if posemb.shape[1] != x.shape[1]:
        raise ValueError(
            f"position embeddings have {posemb.shape[1]} rows, the image gives "
            f"{x.shape[1]} tokens; pass resize_to_grid=({grid_h}, {grid_w})"
        )
    x = x + posemb

    block = 0
    while f"Transformer/encoderblock_{block}/LayerNorm_0/scale" in p:
        x = encoder_block(p, f"Transformer/encoderblock_{block}/", x, num_heads)
        block += 1
    x = layer_norm(x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"])

    if classifier == "token":
        x = x[:, 0]
    elif classifier == "gap":
        x = x[:, 1:].mean(axis=1) if has_cls else x.mean(axis=1)
    else:
        raise ValueError(f"classifier must be 'token' or 'gap', not {classifier!r}")
    if "pre_logits/kernel" in p:
        x = np.tanh(x @ p["pre_logits/kernel"] + p["pre_logits/bias"])
    if "head/kernel" in p:
        x = x @ p["head/kernel"] + p["head/bias"]
    return x


def resize_posemb(posemb, new_grid, num_prefix=1):
    """Official high-resolution fine-tuning: zoom the square patch grid, keep prefix rows."""
    prefix, grid = posemb[:, :num_prefix], posemb[0, num_prefix:]
    old = math.isqrt(grid.shape[0])
    if old * old != grid.shape[0]:
        raise ValueError(f"{grid.shape[0]} grid rows are not a square grid")
    grid = grid.reshape(old, old, -1)
    grid = scipy.ndimage.zoom(grid, (new_grid[0] / old, new_grid[1] / old, 1), order=1)
    return np.concatenate([prefix, grid.reshape(1, new_grid[0] * new_grid[1], -1)], axis=1)


def resize_axis_linear(values, size, axis):
    """Corner-aligned linear resize of one axis to `size` (np.interp), as a stored grid weight is
    resized to another grid (scipy.ndimage.zoom(order=1)'s corner alignment)."""
    old = values.shape[axis]
    coords = np.linspace(0, old - 1, size) if size > 1 else np.zeros(1)
    moved = np.moveaxis(values, axis, -1)
    out = np.apply_along_axis(lambda v: np.interp(coords, np.arange(old), v), -1, moved)
    return np.moveaxis(out, -1, axis)


def patch_embed(x, kernel, bias):
    """A PxP convolution with stride P and VALID padding, written as a patch reshape."""
    ph, pw, channels, width = kernel.shape
    batch, height, wid, _ = x.shape
    gh, gw = height // ph, wid // pw
    x = x[:, : gh * ph, : gw * pw].reshape(batch, gh, ph, gw, pw, channels)
    return np.einsum("bhpwqc,pqcd->bhwd", x, kernel) + bias


def layer_norm(x, scale, bias, eps=LAYER_NORM_EPS):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def encoder_block(p, prefix, x, num_heads):
    """Pre-norm block: z' = MSA(LN(z)) + z; z = MLP(LN(z')) + z'."""
    y = layer_norm(x, p[prefix + "LayerNorm_0/scale"], p[prefix + "LayerNorm_0/bias"])
    x = x + self_attention(p, prefix + "MultiHeadDotProductAttention_1/", y, num_heads)
    y = layer_norm(x, p[prefix + "LayerNorm_2/scale"], p[prefix + "LayerNorm_2/bias"])
    mlp = prefix + "MlpBlock_3/"
    y = gelu_tanh(y @ p[mlp + "Dense_0/kernel"] + p[mlp + "Dense_0/bias"])
    y = y @ p[mlp + "Dense_1/kernel"] + p[mlp + "Dense_1/bias"]
    return x + y


def self_attention(p, prefix, x, num_heads):
    def project(name):
        kernel = p[prefix + name + "/kernel"]  # (D, heads, D/heads)
        if kernel.shape[1] != num_heads:
            raise ValueError(f"{prefix}{name}/kernel has {kernel.shape[1]} heads, not {num_heads}")
        return np.einsum("btd,dhk->bthk", x, kernel) + p[prefix + name + "/bias"]

    q, k, v = project("query"), project("key"), project("value")
    scores = np.einsum("bqhk,bthk->bhqt", q, k) / math.sqrt(q.shape[-1])
    out = np.einsum("bhqt,bthk->bqhk", softmax(scores), v)
    return np.einsum("bqhk,hkd->bqd", out, p[prefix + "out/kernel"]) + p[prefix + "out/bias"]


# ---- the BiT ResNet stem of the hybrid variants (vit_jax models_resnet semantics) ----


def same_pads(size, kernel, stride):
    """TensorFlow/Flax 'SAME': output ceil(size/stride), the extra pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


def conv2d_same(x, kernel, stride=1):
    kh, kw, _, out_ch = kernel.shape
    batch, height, width, _ = x.shape
    oh, top, bottom = same_pads(height, kh, stride)
    ow, left, right = same_pads(width, kw, stride)
    x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    out = np.zeros((batch, oh, ow, out_ch))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride]
            out += patch @ kernel[i, j]
    return out


def standardize(kernel, eps=WEIGHT_STANDARDIZATION_EPS):
    kernel = kernel - kernel.mean(axis=(0, 1, 2))
    return kernel / (kernel.std(axis=(0, 1, 2)) + eps)


def std_conv(x, kernel, stride=1):
    return conv2d_same(x, standardize(kernel), stride)


def group_norm(x, scale, bias, groups=GROUP_NORM_GROUPS, eps=GROUP_NORM_EPS):
    batch, height, width, channels = x.shape
    g = x.reshape(batch, height, width, groups, channels // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    g = (g - mean) / np.sqrt(var + eps)
    return g.reshape(x.shape) * scale.reshape(-1) + bias.reshape(-1)


def max_pool_same(x, size=3, stride=2):
    batch, height, width, channels = x.shape
    oh, top, bottom = same_pads(height, size, stride)
    ow, left, right = same_pads(width, size, stride)
    x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-np.inf)
    out = np.full((batch, oh, ow, channels), -np.inf)
    for i in range(size):
        for j in range(size):
            out = np.maximum(
                out, x[:, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride]
            )
    return out


def gn(p, name, x):
    return group_norm(x, p[name + "/scale"], p[name + "/bias"])


def residual_unit(p, prefix, x, features, stride):
    """Bottleneck unit, stride on the 3x3 conv; projection when shape or stride changes."""
    residual = x
    if x.shape[-1] != features * 4 or stride != 1:
        residual = gn(p, prefix + "gn_proj", std_conv(x, p[prefix + "conv_proj/kernel"], stride))
    y = np.maximum(gn(p, prefix + "gn1", std_conv(x, p[prefix + "conv1/kernel"])), 0)
    y = np.maximum(gn(p, prefix + "gn2", std_conv(y, p[prefix + "conv2/kernel"], stride)), 0)
    y = gn(p, prefix + "gn3", std_conv(y, p[prefix + "conv3/kernel"]))
    return np.maximum(residual + y, 0)


def resnet_stages(p):
    """Units per stage of the stem in `p`: () for the root alone, (3, 4, 9) for R50+B/16."""
    stages = []
    while f"block{len(stages) + 1}/unit1/conv1/kernel" in p:
        units = 0
        while f"block{len(stages) + 1}/unit{units + 1}/conv1/kernel" in p:
            units += 1
        stages.append(units)
    return tuple(stages)


def token_stride(p):
    """Image pixels per token: the patch; for a hybrid times 4 (root conv and pool), times 2
    for each stage after the first (whose first unit strides)."""
    patch = p["embedding/kernel"].shape[0]
    if "conv_root/kernel" not in p:
        return patch
    return patch * 4 * 2 ** max(len(resnet_stages(p)) - 1, 0)


def resnet_stem(p, x):
    width = p["conv_root/kernel"].shape[-1]
    x = std_conv(x, p["conv_root/kernel"], stride=2)
    x = np.maximum(gn(p, "gn_root", x), 0)
    x = max_pool_same(x)
    for stage, units in enumerate(resnet_stages(p), 1):
        features = width * 2 ** (stage - 1)
        for unit in range(1, units + 1):
            stride = 2 if (stage > 1 and unit == 1) else 1
            x = residual_unit(p, f"block{stage}/unit{unit}/", x, features, stride)
    return x
