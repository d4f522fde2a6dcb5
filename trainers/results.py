"""WORKDIR/results.json: what a finished run (fine-tuning, pre-training, few-shot, the sweep, the
demo) leaves for people and scripts to read. One writer, so every command's file has the same
form (sorted keys, indented, ending in a newline) and is replaced atomically: a reader sees the
old file or the new one, never half of one."""

import json

from keras_vit import fileio

FILE_NAME = "results.json"


def path(workdir):
    return fileio.join(workdir, FILE_NAME)


def write(workdir, results):
    """Writes `results` (a JSON-serialisable dict) to WORKDIR/results.json atomically."""
    fileio.write_atomic(path(workdir), json.dumps(results, indent=2, sort_keys=True) + "\n")


def read(workdir):
    """The dict a finished run left in `workdir`, or None if it has none yet."""
    if not fileio.exists(path(workdir)):
        return None
    with fileio.open(path(workdir)) as f:
        return json.load(f)
