"""The paper's analysis figures: the numbers (NumPy) and their pictures (matplotlib, optional).

    from keras_vit import visualize

    numbers = visualize.analyse(model, images)   # rollout, distance, similarity, components
    visualize.plot_attention_rollout(images, numbers["rollout"], visualize.token_stride(model))

`python -m keras_vit.visualize` writes all four figures as PNG and the numbers as JSON.
"""

import numpy as np

# Before analysis.py imports Keras: `python -m keras_vit.visualize` runs this file first.
from keras_vit import (
    _clash,  # noqa: F401  (refuses a package mixed with another's files)
    posembs,
)
from keras_vit.visualize.analysis import (
    RESIDUAL_WEIGHT,
    attention_rollout,
    embedding_similarity,
    mean_attention_distance,
    patch_centres,
    patch_embedding_components,
    position_embedding_similarity,
    prefix_tokens,
    principal_components,
    to_numpy,
    token_stride,
)
from keras_vit.visualize.figures import (
    plot_accuracy_by_shots,
    plot_attention_rollout,
    plot_mean_attention_distance,
    plot_patch_embedding_components,
    plot_position_embedding_similarity,
    png_bytes,
)


def analyse(model, images, num_components=28):
    """All four analyses of a ViT for a batch of images (in the model's input range).

    Returns {"rollout": (B, h, w), "attention_distance": (L, heads) pixels,
    "position_similarity": (h, w, h, w) on the images' grid, "components": (k, P, P, C),
    "explained_variance": (k,)}.
    """
    images = np.asarray(images)
    grid = model.token_grid(images.shape[1:3])
    prefix = prefix_tokens(model)
    maps = [to_numpy(m) for m in model.attention_maps(images)]
    numbers = {
        "rollout": attention_rollout(maps, grid, prefix),
        "attention_distance": mean_attention_distance(maps, grid, token_stride(model), prefix),
    }
    if posembs.get(getattr(model, "posemb", posembs.OFFICIAL)).adds_to_tokens:  # else none to compare
        numbers["position_similarity"] = position_embedding_similarity(model, grid)
    if model.resnet_layers is None:  # a hybrid's patch filters see ResNet features, not pixels
        numbers["components"], numbers["explained_variance"] = patch_embedding_components(
            model, num_components
        )
    return numbers


__all__ = [
    "RESIDUAL_WEIGHT",
    "analyse",
    "attention_rollout",
    "embedding_similarity",
    "mean_attention_distance",
    "patch_centres",
    "patch_embedding_components",
    "plot_accuracy_by_shots",
    "plot_attention_rollout",
    "plot_mean_attention_distance",
    "plot_patch_embedding_components",
    "plot_position_embedding_similarity",
    "png_bytes",
    "position_embedding_similarity",
    "prefix_tokens",
    "principal_components",
    "token_stride",
]
