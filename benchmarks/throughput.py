"""Images per second of keras_vit against keras-hub's ViT, measured in the same run.

Both models are built with the same shape (a ViT-B/16 encoder by default, no head), on the
same backend, fed the same batch, each step wrapped in one tf.function, timed after warm-up.
Prints a table and the ratio keras_vit / keras-hub (> 1: keras_vit is faster).

    pip install -e ".[bench]"
    python -m benchmarks.throughput --variant=ViT-B_16 --batch_size=8 --steps=10
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_vit  # noqa: E402


def keras_vit_encoder(variant, image_size):
    return keras_vit.create_model(
        variant, image_size=image_size, include_top=False, include_preprocessing=False
    )


def keras_hub_encoder(variant, image_size):
    import keras_hub

    shape = keras_vit.VARIANTS[variant]
    return keras_hub.models.ViTBackbone(
        image_shape=(image_size, image_size, 3),
        patch_size=shape["patch_size"],
        num_layers=shape["num_layers"],
        num_heads=shape["num_heads"],
        hidden_dim=shape["hidden_size"],
        mlp_dim=shape["mlp_dim"],
        layer_norm_epsilon=1e-6,
    )


def _steps_per_second(step, images, steps, warmup=2):
    for _ in range(warmup):
        step(images)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        result = step(images)
        tf.nest.map_structure(lambda t: t.numpy(), result)
        times.append(time.perf_counter() - start)
    return 1.0 / statistics.median(times)


def measure(model, images, steps, jit_compile):
    infer = tf.function(lambda x: model(x, training=False), jit_compile=jit_compile)
    optimizer = keras.optimizers.SGD(1e-3)
    optimizer.build(model.trainable_variables)

    def train(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    train = tf.function(train, jit_compile=jit_compile)
    batch = images.shape[0]
    return {
        "inference": batch * _steps_per_second(infer, images, steps),
        "train step": batch * _steps_per_second(train, images, steps),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="ViT-B_16", choices=sorted(keras_vit.VARIANTS))
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--jit_compile", action="store_true", help="XLA-compile both models' steps")
    args = parser.parse_args()
    if args.variant.startswith("R50"):
        parser.error("keras-hub has no hybrid ViT; choose a plain variant")
    images = tf.constant(
        np.random.default_rng(0)
        .uniform(-1, 1, (args.batch_size, args.image_size, args.image_size, 3))
        .astype("float32")
    )
    results = {}
    for name, build in (("keras_vit", keras_vit_encoder), ("keras-hub", keras_hub_encoder)):
        model = build(args.variant, args.image_size)
        results[name] = (model.count_params(), measure(model, images, args.steps, args.jit_compile))
        del model
        keras.backend.clear_session()
    print(
        f"{args.variant} encoder, {args.image_size} px, batch {args.batch_size}, backend "
        f"{keras.backend.backend()}, jit_compile={args.jit_compile}, {os.cpu_count()} CPU cores"
    )
    print(f"{'':12}{'parameters':>14}{'inference img/s':>18}{'train step img/s':>18}")
    for name, (params, speed) in results.items():
        print(f"{name:12}{params:>14,}{speed['inference']:>18.2f}{speed['train step']:>18.2f}")
    ours, theirs = results["keras_vit"][1], results["keras-hub"][1]
    print(
        f"{'ratio':12}{'':>14}{ours['inference'] / theirs['inference']:>18.2f}"
        f"{ours['train step'] / theirs['train step']:>18.2f}   (keras_vit / keras-hub)"
    )


if __name__ == "__main__":
    main()
