"""A trainer's workdir as a ready model: its weights, resolution and class names.

`python -m trainers.finetune --workdir=W` ends by writing W/config.json (the resolved flags),
W/model.npz (official layout) and W/class_names.json. This reads them back without
TensorFlow or the trainers, so `keras_vit.predict`, `keras_vit.export` and
`keras_vit.visualize` take `--workdir=W` in place of `--model`, `--weights` and `--labels`.
"""

import dataclasses
import json

from keras_vit import deferred_init, fileio, npz_layout
from keras_vit import weights as weights_lib
from keras_vit.errors import CheckpointError
from keras_vit.models import VARIANTS, create_model

CONFIG_FILE = "config.json"
MODEL_FILE = "model.npz"
CLASS_NAMES_FILE = "class_names.json"

# The shape fields a weights file decides; everything else comes from the run's variant.
_SHAPE_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


@dataclasses.dataclass
class Run:
    """model: a keras_vit.ViT taking [0, 255] pixels (or [-1, 1] with include_preprocessing=False)
    at the run's image_size, ending in softmax (sigmoid for --loss=sigmoid runs).
    class_names: one name per output, or None where the run did not record them."""

    model: object
    class_names: list
    image_size: tuple
    config: dict
    weights_path: str


def read_config(workdir):
    """The run's resolved config (a dict), or CheckpointError saying what is missing."""
    path = fileio.join(workdir, CONFIG_FILE)
    if not fileio.exists(path):
        raise CheckpointError(
            f"{workdir} is not a trainer's workdir (no {CONFIG_FILE}); pass the --workdir of a "
            "trainers.finetune or trainers.pretrain run"
        )
    return json.loads(_read_text(path))


def read_class_names(workdir):
    """The run's class names by label index, or None if the run wrote none."""
    path = fileio.join(workdir, CLASS_NAMES_FILE)
    if not fileio.exists(path):
        return None
    names = json.loads(_read_text(path))
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise CheckpointError(f"{path}: expected a JSON list of class names")
    return names


def load_run(workdir, include_preprocessing=True):
    """Run(model, class_names, image_size, config, weights_path) of a finished trainer run."""
    config = read_config(workdir)
    weights_path = fileio.join(workdir, MODEL_FILE)
    if not fileio.exists(weights_path):
        raise CheckpointError(
            f"{workdir} has no {MODEL_FILE}: the run has not finished; rerun its command to "
            "complete it (it resumes from its last checkpoint)"
        )
    params = weights_lib.read_params(weights_path)
    found = npz_layout.architecture(params)
    overrides = {name: found[name] for name in _SHAPE_FIELDS if found[name]}
    # A run started from a timm or transformers checkpoint keeps its numerics and pooling.
    overrides.update(
        {
            name: found[name]
            for name in ("fc_norm", "layer_norm_epsilon", "gelu_approximate")
            if found[name] is not None
        }
    )
    variant = config.get("model") or "ViT-B_16"
    if variant not in VARIANTS:
        raise CheckpointError(f"{workdir}/{CONFIG_FILE}: unknown model {variant!r}")
    image_size = config.get("image_size") or found["image_size"]
    with deferred_init.without_initializers():  # every weight is assigned from model.npz next
        model = create_model(
            variant,
            image_size=image_size,
            num_classes=found["num_classes"],
            representation_size=found["representation_size"],
            classifier=found["classifier"],
            include_preprocessing=include_preprocessing,
            classifier_activation="sigmoid" if config.get("loss") == "sigmoid" else "softmax",
            **overrides,
        )
    weights_lib.assign_params(model, params, weights_path)
    class_names = read_class_names(workdir)
    if class_names is not None and len(class_names) != found["num_classes"]:
        raise CheckpointError(
            f"{workdir}: {CLASS_NAMES_FILE} has {len(class_names)} names for a "
            f"{found['num_classes']}-class head"
        )
    size = image_size if isinstance(image_size, (tuple, list)) else (image_size, image_size)
    return Run(model, class_names, tuple(size), config, weights_path)


def _read_text(path):
    with fileio.open(path) as f:
        return f.read()
