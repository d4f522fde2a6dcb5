"""Converts ViT checkpoints between the official .npz layouts and Keras weight files.

    python -m keras_vit.convert SRC.npz DST.weights.h5 --model=ViT-B_16
        an official checkpoint (vit_jax or big_vision layout) to a Keras weights file that
        loads fast with keras_vit.ViT_B16(weights="DST.weights.h5");
    python -m keras_vit.convert SRC.weights.h5|SRC.keras DST.npz [--model=ViT-B_16]
        keras_vit weights (e.g. fine-tuned here) to the original vit_jax .npz layout, which the
        official JAX code loads;
    python -m keras_vit.convert SRC.npz DST.npz
        any official layout to the vit_jax one;
    python -m keras_vit.convert SRC OUT_DIR --to=timm|transformers [--push_to_hub=OWNER/REPO]
        a keras_vit model (any of the files above, a registry name with --model, a trainer's
        workdir, or a timm / transformers checkpoint) to a folder with model.safetensors and the
        config.json that timm.create_model("local-dir:OUT_DIR", pretrained=True) or
        transformers' ViTForImageClassification.from_pretrained(OUT_DIR) loads; optionally
        uploaded to the Hugging Face Hub (huggingface_hub, the `hub` extra).

Either path may be on any TensorFlow file system (gs://...). The output is written
atomically; it must not be the input, and an existing one (with --to: the folder's checkpoint
files) is replaced only with --overwrite. Bad input exits with status 2 and a one-line message.
It runs on the Keras backend KERAS_BACKEND selects (the weights are arrays either way), with
TensorFlow's start-up lines hidden (keras_vit/startup.py).
"""

import argparse
import os
import posixpath
import sys

from keras_vit import (
    _clash,  # noqa: F401  (first: refuses a package mixed with another's files)
    commands,
    fileio,
    hf_export,
    hub,
    labels,
    models,
    npz_layout,
    run_dir,
    run_files,
    variants,
    weights,
)
from keras_vit.errors import blocked_output, error_line

USAGE_ERROR = commands.USAGE_ERROR
# The arguments that make a plain ViT's shape (a variant of keras_vit.VARIANTS).
_SHAPE = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


def convert(src, dst, model_name=None, overwrite=False):
    """Converts `src` to `dst` (by their extensions); returns a one-line summary. An existing
    `dst` is replaced only with `overwrite`."""
    # Argument checks first: they must not wait for (or print the logs of) TensorFlow.
    src = weights.run_weights_file(src) or src  # a finished run's workdir: its model.npz, as weights=
    if fileio.isdir(src):
        if run_files.folder_written_by(src) == "probes":
            raise ValueError(run_files.probes_hold_no_model(src))
        raise ValueError(
            f"{src} is a folder, not a checkpoint: pass a checkpoint file or a finished run's workdir "
            "(one with model.npz); --to=timm or --to=transformers takes a Hub folder"
        )
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
    _check_output(dst, overwrite)
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
    # The official layout alone, for the official code: not the config a keras_vit file may hold.
    params.pop(npz_layout.CONFIG, None)
    weights.save_npz(params, dst)
    found = npz_layout.architecture(params)
    return (
        f"wrote {dst}: {len(params)} arrays in the vit_jax layout "
        f"(hidden {found['hidden_size']}, {found['num_layers']} layers, "
        f"image {found['image_size']})"
    )


def _check_output(path, overwrite, names=None):
    """Refuses an output path that cannot be written, or (without `overwrite`) one that exists:
    the file `path`, or with `names` the files of those names in the folder `path`."""
    blocking = fileio.file_in_the_way(path)
    if blocking:
        raise ValueError(blocked_output(path, blocking))
    existing = [path] if names is None else [fileio.join(path, name) for name in names]
    found = next((p for p in existing if fileio.exists(p)), None)
    if found and not overwrite:
        raise ValueError(f"{found} exists; pass --overwrite to replace it, or another output path")


def to_hub_format(src, out_dir, to, model_name=None, class_names=None, push_to_hub=None, overwrite=False):
    """Writes the model `src` names to `out_dir` as a timm or transformers checkpoint.

    src: a checkpoint file, a registry name (with model_name), a Hub name or folder, or a
    trainers.finetune workdir (its class names come along). class_names: a list or a labels
    file. push_to_hub: "OWNER/REPO" to upload the folder to. overwrite: replace the checkpoint
    files an earlier conversion left in `out_dir` (other files there are kept either way).
    Returns a one-line summary.
    """
    if to not in hf_export.FORMATS:
        raise ValueError(f"--to must be one of {', '.join(hf_export.FORMATS)}, got {to!r}")
    _check_output(out_dir, overwrite, hf_export.FILES[to])
    model, names = _load_for_export(src, model_name)
    if class_names is not None:
        names = labels.class_names(model.num_classes, class_names)
    hf_export.save_pretrained(model, out_dir, to=to, class_names=names)
    classes = model.num_classes if model.include_top else "no"
    summary = (
        f"wrote {out_dir}: {to} checkpoint of {_shape_name(model)} at "
        f"{model.image_size[0]}x{model.image_size[1]}, {classes} classes"
    )
    if push_to_hub:
        summary += f"; pushed to {hub.push_to_hub(out_dir, push_to_hub)}"
    return summary


def _variant_with(shape):
    """The name of the variant of `shape` ({argument: value} of _SHAPE), or None."""
    return next(
        (name for name, spec in variants.VARIANTS.items() if all(spec.get(k) == v for k, v in shape.items())),
        None,
    )


def _shape_name(model):
    """The variant whose shape the model has ("ViT-Ti_16"), else its shape: a model built on a
    file of its own shape keeps the name of the variant it was built from ("vit_b_16")."""
    shape = {key: getattr(model, key) for key in _SHAPE}
    return _variant_with(shape) or "a ViT of " + ", ".join(f"{key}={value}" for key, value in shape.items())


def _load_for_export(src, model_name):
    """(model, class names or None) of what `src` names."""
    if run_dir.is_finished_run(src):
        run = run_dir.load_run(src)
        return run.model, run.class_names
    if model_name and model_name not in models.VARIANTS:
        raise ValueError(f"unknown --model {model_name!r}; known: {', '.join(models.VARIANTS)}")
    if src in weights.REGISTRY:
        if not model_name:
            raise ValueError(f"{src} is a registry name: pass --model too (e.g. --model=ViT-B_16)")
        return _build(model_name, src), None
    if not (hub.is_hub_name(src) or fileio.exists(src)):
        raise ValueError(f"{src}: no such file or folder; pass a checkpoint, a Hub name or a workdir")
    info, params = weights.read_checkpoint(src)
    found = npz_layout.architecture(params)
    if found["resnet_layers"] is not None:
        raise ValueError(f"{src}: a hybrid (ResNet stem); timm's and transformers' ViT formats have none")
    shape = {key: found[key] for key in _SHAPE}
    # Any plain variant will do where none has the file's shape: the file's own shape overrides it.
    variant = model_name or _variant_with(shape) or "ViT-B_16"
    model = models.create_model(
        variant, weights=src, classifier_activation=None, include_preprocessing=True, **shape
    )
    return model, info.get("class_names")


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
    parser.add_argument(
        "src",
        help="official .npz, keras_vit .weights.h5 or .keras file, or a finished trainers.finetune "
        "workdir (with --to: also a registry name, a Hub name or a timm/transformers folder)",
    )
    parser.add_argument("dst", help="output .weights.h5 or .npz (with --to: an output folder)")
    parser.add_argument(
        "--model", default=None, help="official variant name, e.g. ViT-B_16 (needed for .weights.h5)"
    )
    parser.add_argument(
        "--to",
        default=None,
        choices=hf_export.FORMATS,
        help="write a timm or transformers checkpoint folder (model.safetensors, config.json)",
    )
    parser.add_argument(
        "--labels", default=None, help="with --to: class names, one per line (or a .json list)"
    )
    parser.add_argument(
        "--push_to_hub",
        default=None,
        metavar="OWNER/REPO",
        help="with --to: upload the folder to this Hub repo",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing output (with --to: the folder's model.safetensors and config files)",
    )
    args = parser.parse_args(argv)
    try:
        if args.to:
            summary = to_hub_format(
                args.src, args.dst, args.to, args.model, args.labels, args.push_to_hub, args.overwrite
            )
        elif args.push_to_hub or args.labels:
            raise ValueError("--push_to_hub and --labels go with --to=timm or --to=transformers")
        else:
            summary = convert(args.src, args.dst, args.model, args.overwrite)
    except (ValueError, ImportError) as err:  # ImportError: a gs:// path without TensorFlow
        print(f"error: {err}", file=sys.stderr)
        return USAGE_ERROR
    except OSError as err:  # e.g. a folder this process may not write in
        print(f"error: {error_line(err)}", file=sys.stderr)
        return USAGE_ERROR
    print(summary)  # outside the try: a reader gone away is not an error of the conversion
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
