"""The files a trainer's run leaves in its workdir, by name.

`python -m trainers.finetune --workdir=W` (and trainers.pretrain) ends by writing W/config.json
(the resolved flags), W/model.npz (the weights, official layout) and W/class_names.json.
keras_vit reads them back (keras_vit.run_dir), and takes W itself where a weights file goes
(keras_vit.weights). Its one import of the package is keras_vit.fileio, which imports none, so
every module may use these names. The few-shot command writes W/config.json and W/results.json
too, and `written_by` tells the two apart.
"""

import json

from keras_vit import fileio

CONFIG_FILE = "config.json"
MODEL_FILE = "model.npz"
CLASS_NAMES_FILE = "class_names.json"


def written_by(config):
    """Which command wrote a workdir's config.json, from its contents (a dict): "training" for
    trainers.finetune and trainers.pretrain (only theirs has total_steps), "probes" for
    trainers.fewshot (shots, no total_steps), else None."""
    if not isinstance(config, dict):
        return None
    if "total_steps" in config:
        return "training"
    return "probes" if "shots" in config else None


def folder_written_by(folder):
    """`written_by` of FOLDER/config.json (local or remote); None where there is none, or it
    cannot be read or is not JSON."""
    path = fileio.join(folder, CONFIG_FILE)
    try:
        if not fileio.exists(path):
            return None
        with fileio.open(path) as f:
            return written_by(json.load(f))
    except (OSError, ValueError):
        return None


def probes_hold_no_model(folder):
    """The one-line error for a few-shot command's workdir given where a model is read."""
    return (
        f"{folder} holds few-shot probes (trainers.fewshot), which leave no model: pass the "
        "--workdir of a trainers.finetune or trainers.pretrain run"
    )
