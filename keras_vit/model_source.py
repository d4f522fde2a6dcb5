"""Where the command-line tools get their model, and its class names.

Shared by `python -m keras_vit.predict`, `keras_vit.export` and `keras_vit.visualize`, so each
takes a model the same four ways, and says the same words when the flags name none:

    --model=FILE.keras            a model saved with model.save: its architecture comes with it
                                  (loaded with Keras' safe_mode); --weights=FILE.keras alone too
    --weights=FILE                a weights file alone (.npz, .weights.h5, .safetensors, a timm /
                                  transformers folder, a Hub name): its shapes say the
                                  architecture, a custom one (patch_size=4, ...) too
    --model=ViT-B_16 --weights=W  an official variant with a registry name, a file of its
                                  shape, or none (random weights)
    --workdir=WORKDIR             a trainer's run: model.npz, config.json, class_names.json
                                  (--weights=WORKDIR alone too)

Class names: --labels=FILE, else the model's own (a run's, a Hub checkpoint's, a .keras file's),
else the shipped ImageNet names for 1000 and 21,843 classes, else "class i".
"""

import dataclasses

from keras_vit import labels as labels_lib
from keras_vit import model_files, models, run_dir, variants
from keras_vit import weights as weights_lib

# The four ways, as every "which model?" error names them.
WAYS = (
    "--model=FILE.keras (a saved model), --weights=FILE (a weights file, whose shapes say the "
    "architecture), --model=ViT-B_16 --weights=imagenet21k+imagenet2012 (an official variant), or "
    "--workdir=WORKDIR (a trainer's run)"
)
NO_WEIGHTS = "none"


@dataclasses.dataclass
class Source:
    model: object
    class_names: list
    description: str


def add_arguments(parser):
    parser.add_argument(
        "--model",
        default=None,
        help="a .keras file (model.save), or an official variant name (e.g. ViT-B_16) with --weights",
    )
    parser.add_argument(
        "--weights",
        default=None,
        help="alone: a weights file (.npz, .weights.h5, .keras, .safetensors, a timm / transformers "
        "folder, or a Hub name such as hf-hub:timm/...), whose shapes say the architecture, or a "
        "trainer's workdir (as --workdir); with "
        "--model=VARIANT: also a registry name (e.g. imagenet21k+imagenet2012), or none (random)",
    )
    parser.add_argument(
        "--workdir",
        default=None,
        help="the workdir of a finished trainers.finetune or trainers.pretrain run (in place of "
        "--model and --weights)",
    )
    parser.add_argument(
        "--labels",
        default=None,
        help="class names, one per line (or a .json list), in the order of the model's outputs",
    )


def _keras_file(args):
    """The .keras file the flags name as the whole model, or None."""
    if model_files.is_keras_file(args.model):
        return args.model
    if not args.model and model_files.is_keras_file(args.weights):
        return args.weights
    return None


def check_arguments(args, image_size=None):
    """ValueError for flags that name no model, or two (before anything is loaded).

    `image_size`: a tool's own --image_size, which only a model built here can take.
    """
    model, weights = args.model, args.weights
    if args.workdir and (model or weights):
        raise ValueError("pass either --workdir or --model/--weights, not both: a workdir names its model")
    if not (args.workdir or model or weights):
        raise ValueError(f"name the model: {WAYS}")
    keras_file = _keras_file(args)
    if keras_file and model and weights:
        raise ValueError(f"--model={model} is a whole model, weights included: leave out --weights")
    if image_size and (args.workdir or keras_file):
        raise ValueError("--image_size is for --weights; a .keras file or a workdir has its own size")
    if model and not keras_file:
        if model not in models.VARIANTS:
            raise ValueError(
                f"unknown --model {model!r}; pass a .keras file or an official variant: "
                f"{', '.join(models.VARIANTS)}"
            )
        if not weights:
            raise ValueError(
                f"--model={model} needs --weights: a registry name (e.g. imagenet21k+imagenet2012), a "
                f"weights file, or {NO_WEIGHTS} (random weights)"
            )
    if weights and not model and not keras_file:
        if weights in weights_lib.REGISTRY or weights == NO_WEIGHTS:
            raise ValueError(
                f"--weights={weights} names no architecture: name the variant too, e.g. "
                f"--model=ViT-B_16 --weights={weights}"
            )


def load(args, image_size=None):
    """Source(model, class_names, description) from parsed arguments (see add_arguments).

    The model takes pixels in [0, 255] (include_preprocessing=True) whichever way it came.
    """
    check_arguments(args, image_size)
    keras_file = _keras_file(args)
    # --weights=WORKDIR alone is --workdir=WORKDIR: the run's resolution and class names come too.
    workdir = args.workdir or (
        args.weights if not (args.model or image_size) and run_dir.is_finished_run(args.weights) else None
    )
    if workdir:
        run = run_dir.load_run(workdir)
        model, names, where = run.model, run.class_names, workdir
    elif keras_file:
        model = model_files.load_keras(keras_file)
        names, where = getattr(model, "class_names", None), keras_file
    elif args.model:
        model = _variant(args.model, args.weights, image_size)
        names, where = getattr(model, "class_names", None), f"{args.model} ({args.weights})"
    else:
        model = model_files.from_weights(args.weights, image_size=image_size)
        names, where = getattr(model, "class_names", None), args.weights
    names = labels_lib.class_names(model.num_classes, args.labels or names)
    return Source(model, names, f"{where}: {variants.describe(model)}")


def _variant(variant, weights, image_size):
    """An official variant with weights of its shape (a file of another shape is an error that
    says to leave out --model), or random ones for --weights=none."""
    if weights == NO_WEIGHTS:
        return models.create_model(variant, image_size=image_size)
    differ, params = model_files.differences(models.VARIANTS[variant], weights)
    if differ:
        raise weights_lib.CheckpointError(
            f"{weights}: does not fit --model={variant} (the file has {', '.join(differ)}); leave "
            "out --model and the file's shapes decide the architecture"
        )
    # A Hub checkpoint's own class names come with it (model.class_names).
    return models.create_model(variant, weights=weights, image_size=image_size, params=params)
