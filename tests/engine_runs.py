"""Runs several trainer command lines in one process, on the engine KERAS_BACKEND names.

    KERAS_BACKEND=jax python tests/engine_runs.py '[["finetune", "--engine=jax", ...], ...]'

Each run is its trainer's name (finetune or pretrain) and its flags. tests/test_engines.py runs
the same runs on both engines, one process each (Keras' backend is chosen once per process),
and compares what they wrote. Exit status: the first non-zero one.
"""

import json
import sys

from trainers import finetune, pretrain

TRAINERS = {"finetune": finetune, "pretrain": pretrain}


def main(runs):
    for command, *argv in runs:
        status = TRAINERS[command].main([command, *argv])
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
