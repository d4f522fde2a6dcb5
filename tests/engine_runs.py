"""Runs several trainer command lines in one process, on the engine KERAS_BACKEND names.

    KERAS_BACKEND=jax python tests/engine_runs.py '[["finetune", "--engine=jax", ...], ...]'

Each run is its trainer's name (finetune or pretrain) and its flags, or ["rewind", SOURCE,
TARGET, STEP]: a copy of the workdir SOURCE as a run stopped after its checkpoint of STEP left it,
for the next run to resume. tests/test_engines.py runs the same runs on every engine, one process
each (Keras' backend is chosen once per process), and compares what they wrote. Exit status: the
first non-zero one.
"""

import gc
import json
import os
import re
import shutil
import sys

from trainers import finetune, pretrain

# As a command's start does (keras_vit/startup.py): what the imports made, out of every later
# collection.
gc.freeze()
TRAINERS = {"finetune": finetune, "pretrain": pretrain}


def rewind(source, target, step):
    """Copies the workdir `source` to `target` without its checkpoints after `step` (nor the state
    file that names them) and without what the end of the run wrote."""
    shutil.copytree(source, target)
    checkpoints = os.path.join(target, "checkpoints")
    for name in os.listdir(checkpoints):
        newer = re.match(r"ckpt-(\d+)\.", name)
        if name == "checkpoint" or (newer and int(newer.group(1)) > int(step)):
            os.remove(os.path.join(checkpoints, name))
    for name in ("results.json", "model.npz", "class_names.json"):
        os.remove(os.path.join(target, name))


def main(runs):
    for command, *argv in runs:
        if command == "rewind":
            rewind(*argv)
            continue
        status = TRAINERS[command].main([command, *argv])
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
