"""The same ViT built by each contestant: keras_vit, keras-hub (same Keras) and timm (PyTorch).

Every builder takes one shape (benchmarks.flops.shape: a variant with overrides) and returns a
classifier with that many classes, fed images in [-1, 1]; the frameworks are imported inside,
so a child process measuring timm's memory never loads TensorFlow and the reverse.
"""

import importlib.util
import os
import sys

# PyTorch first: triton's native library (which timm and torch.compile load) crashes the
# process when it is loaded after TensorFlow's, so where timm is installed it is imported
# before anything imports TensorFlow (the benchmarks import this module first). Where TensorFlow
# is already loaded (a test process), or a child measures a Keras contestant alone
# (CHILD_FRAMEWORK), PyTorch stays out and timm runs in its own process.
CHILD_FRAMEWORK = "VIT_BENCHMARK_FRAMEWORK"
TORCH_FIRST = (
    importlib.util.find_spec("timm") is not None
    and "tensorflow" not in sys.modules
    and os.environ.get(CHILD_FRAMEWORK) != "tf"
)
if TORCH_FIRST:
    import timm  # noqa: F401
    import torch._dynamo  # noqa: F401  (loads triton)


def keras_vit_model(shape, image_size, num_classes, **kwargs):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras_vit

    dims = {k: shape[k] for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")}
    return keras_vit.create_model(
        "ViT-B_16",
        image_size=image_size,
        num_classes=num_classes,
        include_preprocessing=False,
        classifier_activation=None,
        **dims,
        **kwargs,
    )


def keras_hub_model(shape, image_size, num_classes):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(image_size, image_size, 3),
        patch_size=shape["patch_size"],
        num_layers=shape["num_layers"],
        num_heads=shape["num_heads"],
        hidden_dim=shape["hidden_size"],
        mlp_dim=shape["mlp_dim"],
        layer_norm_epsilon=1e-6,
    )
    return keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=num_classes)


def keras_model(kind, shape, image_size, num_classes, dtype):
    """keras_vit's (`kind` "keras_vit") or keras-hub's classifier, built under Keras' mixed_bfloat16
    policy where `dtype` is "bfloat16" (float32 variables, bfloat16 compute)."""
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if dtype == "bfloat16" else "float32")
    try:
        build = keras_vit_model if kind == "keras_vit" else keras_hub_model
        return build(shape, image_size, num_classes)
    finally:
        keras.mixed_precision.set_global_policy(previous)


def timm_model(shape, image_size, num_classes):
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        img_size=image_size,
        patch_size=shape["patch_size"],
        embed_dim=shape["hidden_size"],
        depth=shape["num_layers"],
        num_heads=shape["num_heads"],
        mlp_ratio=shape["mlp_dim"] / shape["hidden_size"],
        num_classes=num_classes,
    )


def set_torch_threads():
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
