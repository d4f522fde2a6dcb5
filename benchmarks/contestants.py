"""The same ViT built by each contestant: keras_vit, keras-hub (same Keras) and timm (PyTorch),
and keras_vit exported to ONNX by its own export for ONNX Runtime.

Every builder takes one shape (benchmarks.flops.shape: a variant with overrides) and returns a
classifier with that many classes, fed images in [-1, 1] (the ONNX export: pixels); the
frameworks are imported inside, so a child process measuring timm's memory never loads
TensorFlow and the reverse. keras_vit_model builds on whatever backend Keras runs on here
(benchmarks.inference runs it on the PyTorch backend in a child process).
"""

import importlib.util
import os
import sys

# PyTorch first: triton's native library (which timm and torch.compile load) crashes the
# process when it is loaded after TensorFlow's, so where timm is installed it is imported
# before anything imports TensorFlow (the benchmarks import this module first). Where TensorFlow
# is already loaded (a test process), or a child measures a Keras contestant alone
# (CHILD_FRAMEWORK "tf", "jax" or "openvino"), PyTorch stays out and timm runs in its own process.
CHILD_FRAMEWORK = "VIT_BENCHMARK_FRAMEWORK"
TORCH_FIRST = (
    importlib.util.find_spec("torch") is not None
    and "tensorflow" not in sys.modules
    and os.environ.get(CHILD_FRAMEWORK) not in ("tf", "jax", "openvino")
)
if TORCH_FIRST:
    import torch._dynamo  # noqa: F401  (loads triton)

    if importlib.util.find_spec("timm") is not None:
        import timm  # noqa: F401


def keras_vit_model(shape, image_size, num_classes, **kwargs):
    """keras_vit's classifier of `shape`: images in [-1, 1], logits out (unless `kwargs` say)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras_vit

    dims = {k: shape[k] for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")}
    config = dict(include_preprocessing=False, classifier_activation=None, **dims)
    config.update(kwargs)
    return keras_vit.create_model("ViT-B_16", image_size=image_size, num_classes=num_classes, **config)


def keras_vit_onnx(shape, image_size, num_classes, path):
    """Writes keras_vit's classifier of `shape` to `path` with keras_vit's own ONNX export (what
    `python -m keras_vit.export --format=onnx` writes, checked there against the Keras model).
    An export takes pixels in [0, 255] and returns probabilities: the model scales its input
    and ends in a softmax, two element-wise steps more than the other contestants."""
    from keras_vit import export

    model = keras_vit_model(
        shape, image_size, num_classes, include_preprocessing=True, classifier_activation="softmax"
    )
    export.export(model, path, "onnx", overwrite=True)


def onnx_session(path):
    """An ONNX Runtime session on the CPU with every core, as torch.set_num_threads gives PyTorch."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def openvino_model(path, dtype, batch, image_size):
    """The ONNX export compiled by OpenVINO for the CPU with every core, for batches of `batch`
    images: a static shape, as a server with a fixed batch compiles it and as torch.compile
    specialises timm's (on the 2-core Xeon 1.15x over the file's dynamic batch for ViT-Ti/16 at
    batch 8, the same outputs). bfloat16 is OpenVINO's bf16 inference precision: the file stays
    float32, OpenVINO converts the weights as it compiles (on CPUs with AVX-512 BF16 or AMX).
    `import openvino` sends OpenVINO's usage telemetry unless opted out (docs/guides/deploy.md).
    Compiled by the process's one Core and at the precision keras_vit's own `predict` on Keras'
    OpenVINO backend uses for `dtype` (keras_vit/openvino_predict.py, which says why one Core)."""
    from keras_vit import openvino_predict

    core = openvino_predict.core()
    model = core.read_model(path)
    model.reshape([batch, image_size, image_size, 3])
    precision = openvino_predict.PRECISION_HINTS[dtype]
    settings = {
        "INFERENCE_NUM_THREADS": os.cpu_count() or 1,
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": precision,
    }
    return core.compile_model(model, "CPU", settings)


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


def keras_model(kind, shape, image_size, num_classes, dtype, policy=None):
    """keras_vit's (`kind` "keras_vit") or keras-hub's classifier, built under the Keras dtype
    policy `policy`, by default the one training uses for `dtype`: Keras' mixed_bfloat16 for
    "bfloat16" (float32 variables, bfloat16 compute)."""
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(
        policy or ("mixed_bfloat16" if dtype == "bfloat16" else "float32")
    )
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
