"""The model and class names the command-line tools work on: --workdir, or --model and --weights.

Shared by `python -m keras_vit.predict` and `python -m keras_vit.export`: a trainer's workdir
knows its variant, resolution and class names (keras_vit.run_dir); otherwise the variant and
weights are named, and the class names come from --labels or, for ImageNet heads, the
package.
"""

import dataclasses

from keras_vit import labels as labels_lib
from keras_vit import models, run_dir


@dataclasses.dataclass
class Source:
    model: object
    class_names: list
    description: str


def add_arguments(parser):
    parser.add_argument("--model", default=None, help="official variant name, e.g. ViT-B_16")
    parser.add_argument(
        "--weights",
        default=None,
        help="a registry name (e.g. imagenet21k+imagenet2012), a Hub name (hf-hub:timm/..., "
        "hf://google/vit-...), a .npz, .weights.h5, .keras or .safetensors file, or a timm / "
        "transformers checkpoint folder",
    )
    parser.add_argument(
        "--workdir",
        default=None,
        help="the workdir of a finished trainers.finetune run (in place of --model and --weights)",
    )
    parser.add_argument(
        "--labels",
        default=None,
        help="class names, one per line (or a .json list), in the order of the model's outputs",
    )


def check_arguments(args):
    """ValueError for a combination of flags that names no model (before anything is loaded)."""
    if args.workdir and (args.model or args.weights):
        raise ValueError("pass either --workdir or --model and --weights, not both")
    if not args.workdir and not (args.model and args.weights):
        raise ValueError(
            "name the model: --model=ViT-B_16 --weights=imagenet21k+imagenet2012 (or a weights "
            "file), or --workdir=WORKDIR of a trainers.finetune run"
        )
    if args.model and args.model not in models.VARIANTS:
        raise ValueError(f"unknown --model {args.model!r}; known: {', '.join(models.VARIANTS)}")


def load(args):
    """Source(model, class_names, description) from parsed arguments (see add_arguments)."""
    check_arguments(args)
    if args.workdir:
        run = run_dir.load_run(args.workdir)
        names = labels_lib.class_names(run.model.num_classes, args.labels or run.class_names)
        return Source(run.model, names, f"{args.workdir} ({run.config.get('model')})")
    model = models.create_model(args.model, weights=args.weights)
    # A Hub checkpoint's own class names (id2label, timm's label_names) unless --labels is given.
    names = labels_lib.class_names(model.num_classes, args.labels or getattr(model, "class_names", None))
    return Source(model, names, f"{args.model} ({args.weights})")
