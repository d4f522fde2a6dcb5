"""Draws the paper's four analysis figures of a ViT for some images.

    python -m keras_vit.visualize --model=ViT-B_16 --weights=imagenet21k+imagenet2012 \
        --images=a.jpg,b.png --out=DIR
    python -m keras_vit.visualize --workdir=RUN --images=a.jpg --out=DIR   # a trainer's run
    python -m keras_vit.visualize --model=digits.keras --images=a.jpg --out=DIR

The model comes any of the ways keras_vit.model_source lists (--weights=none with --model=VARIANT:
random weights, the figures of an untrained model).

writes DIR/attention_rollout.png, mean_attention_distance.png,
position_embedding_similarity.png, patch_embedding_components.png and DIR/numbers.json.
Images of any size are resized to the model's resolution as its evaluation resizes them.
Bad input exits with status 2 and a one-line message.
"""

import argparse
import json
import os
import sys

import numpy as np

from keras_vit import commands, errors, fileio, model_source, predict
from keras_vit import images as image_files
from keras_vit import labels as labels_lib
from keras_vit import visualize as vis

USAGE_ERROR = commands.USAGE_ERROR
FIGURES = (
    "attention_rollout",
    "mean_attention_distance",
    "position_embedding_similarity",
    "patch_embedding_components",
)


def _labels(model, probabilities, class_names):
    """The top class of each image as text, when the model has a head."""
    if not model.include_top:
        return None
    top = probabilities.argmax(axis=-1)
    all_names = labels_lib.class_names(model.num_classes, class_names)
    names = [all_names[i] for i in top]
    return [f"{name} ({probabilities[i, k]:.2f})" for i, (name, k) in enumerate(zip(names, top))]


def visualize(model, paths, out, class_names=None, num_components=28):
    """Writes the four figures and numbers.json for the image files `paths`; returns the paths written."""
    size = image_files.target_size(model)
    pixels = image_files.load_images(paths, size)  # the models built here take [0, 255]
    numbers = vis.analyse(model, pixels, num_components=num_components)
    probabilities = predict.probabilities(model, pixels) if model.include_top else None
    labels = _labels(model, probabilities, class_names) if probabilities is not None else None
    titles = [os.path.basename(p) + (f"\n{labels[i]}" if labels else "") for i, p in enumerate(paths)]
    figures = {
        "attention_rollout": vis.plot_attention_rollout(
            pixels, numbers["rollout"], vis.token_stride(model), titles=titles
        ),
        "mean_attention_distance": vis.plot_mean_attention_distance(
            numbers["attention_distance"], image_size=size
        ),
    }
    if "position_similarity" in numbers:
        figures["position_embedding_similarity"] = vis.plot_position_embedding_similarity(
            numbers["position_similarity"]
        )
    if "components" in numbers:
        figures["patch_embedding_components"] = vis.plot_patch_embedding_components(
            numbers["components"], numbers["explained_variance"]
        )
    written = []
    for name, figure in figures.items():
        written.append(fileio.join(out, f"{name}.png"))
        fileio.write_atomic(written[-1], vis.png_bytes(figure))
    summary = {
        "images": list(paths),
        "image_size": list(size),
        "predictions": labels,
        **{key: np.round(value, 6).tolist() for key, value in numbers.items()},
    }
    written.append(fileio.join(out, "numbers.json"))
    fileio.write_atomic(written[-1], json.dumps(summary) + "\n")
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_vit.visualize", description="Draw the ViT paper's analysis figures."
    )
    model_source.add_arguments(parser)
    parser.add_argument("--images", required=True, help="comma-separated image files")
    parser.add_argument("--out", required=True, help="directory for the PNG figures and numbers.json")
    parser.add_argument(
        "--image_size", type=int, default=0, help="with --weights: resolution (default: the weights' own)"
    )
    parser.add_argument("--num_components", type=int, default=28, help="principal components to draw")
    args = parser.parse_args(argv)
    paths = [p.strip() for p in args.images.split(",") if p.strip()]
    try:
        if not paths:
            raise ValueError("--images is empty: pass image files, e.g. --images=a.jpg,b.png")
        if args.num_components < 1:
            raise ValueError("--num_components must be at least 1")
        model_source.check_arguments(args, args.image_size)
        for path in paths:
            image_files.read_image(path)  # every file checked before a model is built
        # The figures go inside --out: a file at it or above it stops them.
        blocking = fileio.file_in_the_way(fileio.join(args.out, "numbers.json"))
        if blocking:
            raise ValueError(errors.blocked_output(args.out, blocking))
        source = model_source.load(args, image_size=args.image_size or None)
        written = visualize(source.model, paths, args.out, source.class_names, args.num_components)
    except (ValueError, ImportError, OSError) as err:  # CheckpointError is a ValueError
        print(f"error: {errors.error_line(err, limit=2000)}", file=sys.stderr)
        return USAGE_ERROR
    print("wrote " + ", ".join(written))
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
