"""The time of a first load of a saved model in a fresh process, per loader and checkout.

    python -m benchmarks.load_time --backend=jax
    python -m benchmarks.load_time --backend=jax --keras_vit=/path/to/an/earlier/checkout,.

A fresh process is the case users meet (a predict or serving command, a notebook's first cell):
every compilation a load triggers is paid there. Each repeat is one child process that imports
Keras and keras_vit and then loads once, `keras.saving.load_model` of a `.keras` file or
`keras_vit.create_model(variant, weights=FILE.npz)`; the table gives the load and the whole
process (start-up and imports included). The files are written once, on TensorFlow, in a form
every keras_vit version reads. `--keras_vit` lists the checkouts whose keras_vit loads (an
earlier version beside this one, for a before/after comparison): their children alternate, so
a change of load on a shared machine hits them alike.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import harness
from keras_vit import commands

# name: (variant for create_model, ViT arguments over the variant's)
MODELS = {
    "tiny": (
        "ViT-Ti_16",
        dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64),
    ),
    "ViT-B_16": ("ViT-B_16", {}),
}
LOADERS = ("keras.saving.load_model", "keras_vit.create_model")


def _save(directory, names):
    """Writes each model as .keras and .npz (in this process: the parent, on TensorFlow)."""
    import keras_vit

    for name in names:
        variant, overrides = MODELS[name]
        model = keras_vit.create_model(variant, **overrides)
        model.save(os.path.join(directory, f"{name}.keras"))
        # The weights alone (no config entry), which every keras_vit version reads.
        weights = keras_vit.weights.export_params(model)
        keras_vit.weights.save_npz(weights, os.path.join(directory, f"{name}.npz"))


def _load_once(directory, name, loader):
    """The child: imports Keras and keras_vit, loads once; prints one JSON line of seconds."""
    import keras

    import keras_vit

    start = time.perf_counter()
    variant, overrides = MODELS[name]
    if loader == "keras.saving.load_model":
        keras.saving.load_model(os.path.join(directory, f"{name}.keras"))
    else:
        shape = {k: v for k, v in overrides.items() if k != "image_size"}
        keras_vit.create_model(variant, weights=os.path.join(directory, f"{name}.npz"), **shape)
    print(json.dumps({"load_s": time.perf_counter() - start}))


def _child(directory, name, loader, backend, keras_vit_root):
    env = harness.child_env({"KERAS_BACKEND": backend})
    # The child, this file run as a script, imports keras_vit from keras_vit_root.
    env["PYTHONPATH"] = os.pathsep.join([keras_vit_root, harness.ROOT, os.environ.get("PYTHONPATH", "")])
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", directory, name, loader],
        capture_output=True,
        text=True,
        env=env,
        cwd=keras_vit_root,
    )
    if proc.returncode:
        raise SystemExit(
            f"error: the {loader} child failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), process_s=time.perf_counter() - start)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _load_once(*argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.load_time", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--backend", default="jax", choices=("jax", "tensorflow", "torch"))
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per model and loader")
    parser.add_argument(
        "--keras_vit", default=harness.ROOT, help="comma-separated checkouts whose keras_vit loads"
    )
    args = parser.parse_args(argv)
    names = args.models.split(",")
    roots = [os.path.abspath(root) for root in args.keras_vit.split(",")]
    with tempfile.TemporaryDirectory() as directory:
        _save(directory, names)
        cpu = harness.machine()["cpu"]
        print(f"{cpu}, {os.cpu_count()} cores; KERAS_BACKEND={args.backend}; median of {args.repeats}")
        print("| model | loader | keras_vit | first load, s | whole process, s |")
        print("|---|---|---|---|---|")
        for name in names:
            for loader in LOADERS:
                runs = {root: [] for root in roots}
                for _ in range(args.repeats):
                    for root in roots:
                        runs[root].append(_child(directory, name, loader, args.backend, root))
                for root, found in runs.items():
                    load = statistics.median(r["load_s"] for r in found)
                    whole = statistics.median(r["process_s"] for r in found)
                    print(f"| {name} | `{loader}` | {root} | {load:.1f} | {whole:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
