"""The numbers behind the paper's analysis figures, from attention maps and weights (in NumPy).

- `attention_rollout`: where the class token looks, through all layers (Abnar & Zuidema, 2020;
  the paper's Figure 6); for models without a class token, the mean over all tokens.
- `mean_attention_distance`: how far, in pixels, each head attends on average (Figure 7, right).
- `position_embedding_similarity`: cosine similarity of each patch's position embedding to
  every other's (Figure 7, centre), on the stored grid or resized to any other.
- `patch_embedding_components`: the principal components of the patch-embedding filters
  (Figure 7, left).

Patches are in row-major order everywhere: token `prefix + r * w + c` is grid cell (r, c).
"""

import keras
import numpy as np

from keras_vit import posembs, resnet

RESIDUAL_WEIGHT = 0.5  # rollout's 0.5 * A + 0.5 * I: the residual branch weighs as much as attention


def _pair(value):
    return (value, value) if np.isscalar(value) else tuple(value)


def to_numpy(value, dtype=np.float64):
    """`value` (a NumPy array, or a tensor or variable of any Keras backend) as a NumPy array.

    Not np.asarray alone: a PyTorch tensor that requires grad (a model's output on Keras'
    PyTorch backend) refuses it, and so does a bfloat16 one.
    """
    return np.asarray(keras.ops.convert_to_numpy(value), dtype)


def attention_rollout(attention_maps, grid_size, num_prefix_tokens=1, residual_weight=RESIDUAL_WEIGHT):
    """Rolls attention out through the layers; returns (B, h, w) maps on the patch grid.

    Args:
        attention_maps: the list `model.attention_maps(images)` returns, each (B, heads, T, T).
        grid_size: (h, w) patch grid of the images (`model.token_grid(images.shape[1:3])`).
        num_prefix_tokens: 1 for classifier 'token' models (the class token's row is followed),
            0 for 'gap' models (the mean over all tokens' rows, what the pooled output sees).
        residual_weight: the weight of the identity (the residual connection) in each layer.

    Heads are averaged, each layer becomes (1 - r) * A + r * I with rows renormalised, and the
    layers are multiplied first to last. A row then sums to 1 over all tokens; the returned
    patch part sums to at most 1 (the rest is on the class token).
    """
    height, width = _pair(grid_size)
    joint = None
    for probs in attention_maps:
        probs = to_numpy(probs).mean(axis=1)
        tokens = probs.shape[-1]
        if tokens != num_prefix_tokens + height * width:
            raise ValueError(
                f"attention over {tokens} tokens does not fit a {height} x {width} grid with "
                f"{num_prefix_tokens} prefix tokens; pass the grid of these images (model.token_grid)"
            )
        mixed = (1.0 - residual_weight) * probs + residual_weight * np.eye(tokens)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        joint = mixed if joint is None else mixed @ joint
    if joint is None:
        raise ValueError("no attention maps: the model has no encoder blocks")
    rows = joint[:, 0] if num_prefix_tokens else joint.mean(axis=1)
    return rows[:, num_prefix_tokens:].reshape(-1, height, width)


def patch_centres(grid_size, patch_size):
    """(h * w, 2) pixel (y, x) centres of the patches, row-major."""
    height, width = _pair(grid_size)
    patch_h, patch_w = _pair(patch_size)
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([(rows.ravel() + 0.5) * patch_h, (cols.ravel() + 0.5) * patch_w], axis=-1)


def mean_attention_distance(attention_maps, grid_size, patch_size, num_prefix_tokens=1):
    """(L, heads) mean distance in pixels between query patches and the patches they attend to.

    For each head, the distance between two patches' centres weighted by the attention between
    them, averaged over query patches and the batch; prefix tokens are left out and the
    remaining attention renormalised. `patch_size` is the pixel stride of one token (for a
    hybrid, the patch size times the ResNet stem's stride of 16).
    """
    centres = patch_centres(grid_size, patch_size)
    distance = np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)
    result = []
    for probs in attention_maps:
        patches = to_numpy(probs)[:, :, num_prefix_tokens:, num_prefix_tokens:]
        if patches.shape[-1] != len(centres):
            raise ValueError(
                f"attention over {patches.shape[-1]} patches does not fit a grid of {len(centres)}"
            )
        patches = patches / patches.sum(axis=-1, keepdims=True)
        result.append((patches * distance).sum(axis=-1).mean(axis=(0, 2)))
    return np.stack(result)


def embedding_similarity(embeddings, grid_size):
    """(h, w, h, w) cosine similarity of (h * w, D) row-major patch embeddings."""
    height, width = _pair(grid_size)
    embeddings = to_numpy(embeddings)
    if embeddings.shape[0] != height * width:
        raise ValueError(f"{embeddings.shape[0]} embeddings do not fill a {height} x {width} grid")
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=-1, keepdims=True), 1e-12)
    return (unit @ unit.T).reshape(height, width, height, width)


def position_embedding_similarity(model, grid_size=None):
    """(h, w, h, w) cosine similarity between the patch position embeddings of a ViT.

    `grid_size` (h, w): the embeddings resized to that grid first, exactly as loading or a
    call at another image size resizes them; default the grid they are stored for.
    For any type that adds position embeddings to the tokens, the per-patch ones its layer adds.
    """
    kind = posembs.get(getattr(model, "posemb", posembs.OFFICIAL))
    if not kind.adds_to_tokens:
        adding = [other.name for other in posembs.types() if other.adds_to_tokens]
        raise ValueError(
            f"a posemb={kind.name!r} model adds no position embeddings to its tokens, so there are none "
            f"to compare; use a {', '.join(adding[:-1])} or {adding[-1]} model"
        )
    layer = model.get_layer(kind.layer_name)
    grid = tuple(int(v) for v in (layer.grid_size if grid_size is None else _pair(grid_size)))
    return embedding_similarity(layer.patch_embeddings(grid), grid)


def principal_components(filters, num_components):
    """(components, explained variance ratios) of the rows of `filters` (N, F), centred.

    Each component's sign is chosen so its largest-magnitude entry is positive (SVD leaves it
    arbitrary, and a figure should not flip between runs).
    """
    filters = to_numpy(filters)
    centred = filters - filters.mean(axis=0)
    _, singular, vectors = np.linalg.svd(centred, full_matrices=False)
    variance = singular**2
    ratio = variance / max(variance.sum(), 1e-300)
    vectors = vectors[:num_components]
    signs = np.sign(vectors[np.arange(len(vectors)), np.abs(vectors).argmax(axis=1)])
    return vectors * signs[:, None], ratio[:num_components]


def patch_embedding_components(model, num_components=28):
    """The first principal components of the patch-embedding filters, as (k, P, P, C) patches.

    Returns (components, explained variance ratios). The filters are the D columns of the
    patch projection, each a P x P x C patch; the paper's Figure 7 (left) shows the first 28.
    """
    if getattr(model, "resnet_layers", None) is not None:
        raise ValueError(
            "the hybrid's patch embedding filters ResNet features, not pixels: its filters have "
            "no RGB picture; use a plain ViT"
        )
    kernel = to_numpy(model.get_layer("embedding").kernel)
    patch_h, patch_w, channels, hidden = kernel.shape
    filters = kernel.reshape(patch_h * patch_w * channels, hidden).T
    components, ratio = principal_components(filters, min(num_components, *filters.shape))
    return components.reshape(-1, patch_h, patch_w, channels), ratio


def token_stride(model):
    """Pixels per token along (height, width): the patch size, times a hybrid stem's output stride."""
    patch = _pair(model.patch_size)
    if getattr(model, "resnet_layers", None) is None:
        return patch
    stem = resnet.output_stride(model.resnet_layers)
    return (patch[0] * stem, patch[1] * stem)


def prefix_tokens(model):
    """1 for a class-token ViT, 0 for a 'gap' one."""
    return 1 if model.classifier == "token" else 0
