"""Converts ViT checkpoints between the official .npz layouts and Keras weight files.

    python -m keras_vit.convert SRC.npz DST.weights.h5 --model=ViT-B_16
        an official checkpoint (vit_jax or big_vision layout) to a Keras weights file that
        loads fast with keras_vit.ViT_B16(weights="DST.weights.h5");
    python -m keras_vit.convert SRC.weights.h5|SRC.keras DST.npz [--model=ViT-B_16]
        keras_vit weights (e.g. fine-tuned here) to the original vit_jax .npz layout, which the
        official JAX code loads;
    python -m keras_vit.convert SRC.npz DST.npz
        any official layout to the vit_jax one.

Either path may be on any TensorFlow file system (gs://...). The output is written
atomically; it must not be the input. Bad input exits with status 2 and a one-line message.
"""

import argparse
import os
import posixpath
import sys

from keras_vit import _clash, fileio, models, npz_layout, weights  # noqa: F401  (_clash first)

USAGE_ERROR = 2


def convert(src, dst, model_name=None):
    """Converts `src` to `dst` (by their extensions); returns a one-line summary."""
    # Argument checks first: they must not wait for (or print the logs of) TensorFlow.
    if not fileio.isfile(src):
        raise ValueError(f"{src}: no such file; pass an existing checkpoint")
    if _same_file(src, dst):
        raise ValueError(
            f"{dst} is the input file; write the output to another path (the input was left as it is)"
        )
    if not dst.endswith((".weights.h5", ".npz")):
        raise ValueError(f"{dst}: the output must end in .weights.h5 or .npz")
    if dst.endswith(".weights.h5") and not model_name:
        raise ValueError("--model is required to write a .weights.h5 (e.g. --model=ViT-B_16)")
    if dst.endswith(".weights.h5"):
        model = _build(model_name, src)
        weights.save_weights(model, dst)
        return (
            f"wrote {dst}: {model_name} at {model.image_size[0]}x{model.image_size[1]}, "
            f"{model.num_classes if model.include_top else 'no'} classes"
        )
    if model_name:
        params = weights.export_params(_build(model_name, src))
    else:
        params = weights.read_params(src)
    weights.save_npz(params, dst)
    found = npz_layout.architecture(params)
    return (
        f"wrote {dst}: {len(params)} arrays in the vit_jax layout "
        f"(hidden {found['hidden_size']}, {found['num_layers']} layers, "
        f"image {found['image_size']})"
    )


def _same_file(src, dst):
    if fileio.is_remote(src) or fileio.is_remote(dst):
        return _normalized(src) == _normalized(dst)
    if os.path.realpath(src) == os.path.realpath(dst):
        return True
    return os.path.exists(dst) and os.path.samefile(src, dst)  # hard links


def _normalized(path):
    scheme, _, rest = path.partition("://")
    return f"{scheme.lower()}://{posixpath.normpath(rest)}" if rest else path


def _build(model_name, src):
    if model_name not in models.VARIANTS:
        raise ValueError(f"unknown --model {model_name!r}; known: {', '.join(models.VARIANTS)}")
    return models.create_model(
        model_name, weights=src, classifier_activation=None, include_preprocessing=True
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_vit.convert",
        description="Convert ViT checkpoints between official .npz and Keras weight files.",
    )
    parser.add_argument("src", help="official .npz, keras_vit .weights.h5 or .keras file")
    parser.add_argument("dst", help="output .weights.h5 or .npz")
    parser.add_argument(
        "--model", default=None, help="official variant name, e.g. ViT-B_16 (needed for .weights.h5)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        print(convert(args.src, args.dst, args.model))
    except (ValueError, ImportError) as err:  # ImportError: a gs:// path without TensorFlow
        print(f"error: {err}", file=sys.stderr)
        return USAGE_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
