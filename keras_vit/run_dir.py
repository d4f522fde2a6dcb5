"""A trainer's workdir as a ready model: its weights, resolution and class names.

`python -m trainers.finetune --workdir=W` ends by writing W/config.json (the resolved flags),
W/model.npz (official layout) and W/class_names.json. This reads them back without
TensorFlow or the trainers, so `keras_vit.predict`, `keras_vit.export` and
`keras_vit.visualize` take `--workdir=W` in place of `--model`, `--weights` and `--labels`.
"""

import dataclasses
import json

from keras_vit import fileio, model_files, weights
from keras_vit.errors import CheckpointError
from keras_vit.run_files import CLASS_NAMES_FILE, CONFIG_FILE, MODEL_FILE, probes_hold_no_model, written_by
from keras_vit.variants import VARIANTS


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


def is_finished_run(path):
    """Whether `path` is the workdir of a finished run: a folder with its config.json and the
    model.npz that `weights=path` reads (keras_vit.weights.run_weights_file), so that convert,
    predict and the constructors take the same folders for runs. A Hub name is none."""
    return weights.run_weights_file(path) is not None and fileio.exists(fileio.join(path, CONFIG_FILE))


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
    """Run(model, class_names, image_size, config, weights_path) of a finished trainer run.

    The architecture is the one model.npz's shapes say (keras_vit.model_files); the config adds
    what no shape holds: the resolution, a sigmoid head, a position type without weights.
    """
    config = read_config(workdir)
    weights_path = fileio.join(workdir, MODEL_FILE)
    if not fileio.exists(weights_path):
        if written_by(config) == "probes":  # it was told to rerun a command that trains nothing
            raise CheckpointError(probes_hold_no_model(workdir))
        raise CheckpointError(
            f"{workdir} has no {MODEL_FILE}: the run has not finished; rerun its command to "
            "complete it (it resumes from its last checkpoint)"
        )
    variant = config.get("model") or "ViT-B_16"
    if variant not in VARIANTS:
        raise CheckpointError(f"{workdir}/{CONFIG_FILE}: unknown model {variant!r}")
    fixed = dict(
        classifier_activation="sigmoid" if config.get("loss") == "sigmoid" else "softmax",
        name=variant.lower().replace("+", "_").replace("-", "_"),
    )
    if config.get("posemb"):
        fixed["posemb"] = config["posemb"]
    model = model_files.from_weights(
        weights_path,
        image_size=config.get("image_size"),
        include_preprocessing=include_preprocessing,
        **fixed,
    )
    class_names = read_class_names(workdir)
    if class_names is not None and len(class_names) != model.num_classes:
        raise CheckpointError(
            f"{workdir}: {CLASS_NAMES_FILE} has {len(class_names)} names for a {model.num_classes}-class head"
        )
    size = model.image_size
    return Run(model, class_names, tuple(size), config, weights_path)


def _read_text(path):
    with fileio.open(path) as f:
        return f.read()
