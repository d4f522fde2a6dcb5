"""keras_vit: the Vision Transformer (Dosovitskiy et al., ICLR 2021) for Keras 3.

Distributed as keras-vision-transformer (the package index's keras-vit is another project).
"""

# First, before Keras: refuses a package mixed with the files of the index's unrelated keras-vit.
from keras_vit import _clash  # noqa: F401, I001

from keras_vit import startup  # the standard library only

# Keras imports its backend here, first, with the backend's native start-up lines hidden (unless
# TF_CPP_MIN_LOG_LEVEL asks for them, or a command has --verbose); without the backend installed,
# one line names the extra that installs it.
startup.import_keras()

# The submodules users call as keras_vit.weights.describe(...) and the like are attributes
# after a plain `import keras_vit`; none of them imports TensorFlow. Not `convert`: it is run
# as `python -m keras_vit.convert`, which warns when the package has already imported it.
from keras_vit import (  # noqa: E402
    checkpoints,
    fileio,
    hf_export,
    hub,
    initializers,
    layers,
    masked_patches,
    posembs,
    position_embeddings,
    variants,
    visualize,
    weights,
)
from keras_vit._version import __version__  # noqa: E402, F401  (the one place it is written)
from keras_vit.images import load_image, load_images  # noqa: E402
from keras_vit.models import (  # noqa: E402
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
from keras_vit.preprocessing import decode_predictions, preprocess_input  # noqa: E402

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
    "hf_export",
    "hub",
    "initializers",
    "layers",
    "masked_patches",
    "position_embeddings",
    "posembs",
    "startup",
    "load_image",
    "load_images",
    "preprocess_input",
    "variants",
    "visualize",
    "weights",
]
