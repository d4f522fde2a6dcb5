"""keras_vit: the Vision Transformer (Dosovitskiy et al., ICLR 2021) for Keras 3.

Distributed as keras-vision-transformer (the package index's keras-vit is another project).
"""

# The submodules users call as keras_vit.weights.describe(...) and the like are attributes
# after a plain `import keras_vit`; none of them imports TensorFlow. Not `convert`: it is run
# as `python -m keras_vit.convert`, which warns when the package has already imported it.
from keras_vit import (  # _clash first: it refuses a package mixed with another's files
    _clash,  # noqa: F401
    checkpoints,
    fileio,
    initializers,
    layers,
    masked_patches,
    position_embeddings,
    variants,
    visualize,
    weights,
)
from keras_vit.images import load_image, load_images
from keras_vit.models import (
    CONSTRUCTORS,
    VARIANTS,
    R26_ViT_B32,
    R26_ViT_S32,
    R50_ViT_B16,
    R50_ViT_B32,
    R50_ViT_L16,
    R50_ViT_L32,
    R_ViT_Ti16,
    ViT,
    ViT_B8,
    ViT_B16,
    ViT_B32,
    ViT_H14,
    ViT_L16,
    ViT_L32,
    ViT_S16,
    ViT_S32,
    ViT_Ti16,
    create_model,
)
from keras_vit.preprocessing import decode_predictions, preprocess_input

__version__ = "0.1.0"

__all__ = [
    "CONSTRUCTORS",
    "R26_ViT_B32",
    "R26_ViT_S32",
    "R50_ViT_B16",
    "R50_ViT_B32",
    "R50_ViT_L16",
    "R50_ViT_L32",
    "R_ViT_Ti16",
    "VARIANTS",
    "ViT",
    "ViT_B8",
    "ViT_B16",
    "ViT_B32",
    "ViT_H14",
    "ViT_L16",
    "ViT_L32",
    "ViT_S16",
    "ViT_S32",
    "ViT_Ti16",
    "create_model",
    "decode_predictions",
    "checkpoints",
    "fileio",
    "initializers",
    "layers",
    "masked_patches",
    "position_embeddings",
    "load_image",
    "load_images",
    "preprocess_input",
    "variants",
    "visualize",
    "weights",
]
