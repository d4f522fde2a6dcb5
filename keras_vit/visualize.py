"""What the paper's analysis figures show, computed from a model's attention and embeddings.

- `attention_rollout`: where the class token looks, through all layers (Abnar & Zuidema,
  2020; the paper's Figure 6).
- `position_embedding_similarity`: cosine similarity of each patch's position embedding to
  every other's (Figure 7, centre).
- `mean_attention_distance`: how far, in pixels, each head attends on average (Figure 7, right).

All take and return NumPy arrays; plotting is left to the caller (matplotlib, `plots` extra).
"""

import numpy as np


def attention_rollout(attention_maps, grid_size, num_prefix_tokens=1):
    """Rolls attention out through the layers and returns the class token's map on the grid.

    Args:
        attention_maps: the list `model.attention_maps(images)` returns, each (B, heads, T, T).
        grid_size: (h, w) patch grid of the images (`model.token_grid(images.shape[1:3])`).
        num_prefix_tokens: 1 for classifier 'token' models.

    Returns:
        (B, h, w) non-negative maps, each summing to at most 1.

    Heads are averaged and the residual connection is accounted for as 0.5 * A + 0.5 * I,
    rows renormalised, then the layers multiplied in order.
    """
    if num_prefix_tokens < 1:
        raise ValueError("attention rollout follows the class token; this model has none.")
    joint = None
    for probs in attention_maps:
        probs = np.asarray(probs, np.float64).mean(axis=1)
        tokens = probs.shape[-1]
        mixed = 0.5 * probs + 0.5 * np.eye(tokens)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        joint = mixed if joint is None else mixed @ joint
    cls_row = joint[:, 0, num_prefix_tokens:]
    return cls_row.reshape(-1, *grid_size)


def position_embedding_similarity(model):
    """(h, w, h, w) cosine similarity between the position embeddings of the patch grid."""
    layer = model.get_layer("posembed_input")
    posemb = np.asarray(layer.pos_embedding)[0, layer.num_prefix_tokens :].astype(np.float64)
    unit = posemb / np.linalg.norm(posemb, axis=-1, keepdims=True)
    height, width = layer.grid_size
    return (unit @ unit.T).reshape(height, width, height, width)


def mean_attention_distance(attention_maps, grid_size, patch_size, num_prefix_tokens=1):
    """(L, heads) mean distance in pixels between query and attended patches.

    For each head, the distance between two patches' centres weighted by the attention
    between them, averaged over query patches and the batch; prefix tokens are left out and
    the remaining attention renormalised.
    """
    height, width = grid_size
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    centres = np.stack([rows.ravel(), cols.ravel()], axis=-1) * float(patch_size)
    distance = np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)
    result = []
    for probs in attention_maps:
        patches = np.asarray(probs, np.float64)[:, :, num_prefix_tokens:, num_prefix_tokens:]
        patches = patches / patches.sum(axis=-1, keepdims=True)
        result.append((patches * distance).sum(axis=-1).mean(axis=(0, 2)))
    return np.stack(result)
