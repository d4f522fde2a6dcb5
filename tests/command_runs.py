"""Runs several commands in one process, each as tests/trainer_cli.py's `run_main` runs it.

    KERAS_BACKEND=jax python tests/command_runs.py RUNS.json RESULTS.json

RUNS.json: [[module, [args...]], ...] (e.g. ["trainers.finetune", ["--engine=jax", ...]]), run in
order; RESULTS.json: [{"returncode", "stdout", "stderr"}, ...]. trainer_cli.run_in_one_child
starts it: the runs that need a process of their own (another Keras backend) share one start-up.
"""

import gc
import json
import sys

from trainer_cli import run_main

# As a command's start does (keras_vit/startup.py): what the imports made, out of every later
# collection.
gc.freeze()


def main(runs_path, results_path):
    with open(runs_path) as f:
        runs = json.load(f)
    results = []
    for module, args in runs:
        proc = run_main(module, args)
        results.append({"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr})
    with open(results_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
