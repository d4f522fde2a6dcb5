"""Peak memory of `python -m keras_vit.export`, per format, for ViT-B/16 at 384 px and ViT-L/16 at 224 px.

Each export is the whole command a user runs, `python -m keras_vit.export OUT --format=FORMAT
--model=VARIANT --weights=FILE`, in a process of its own: loading the weights, converting,
and running the artifact in its runtime against the Keras model. Its peak is the largest
sum of the resident memory of that process and every process it starts (the ONNX
conversion runs in a child), polled every 50 ms (harness.run_watched); an export that
passes --limit_gb is killed there, and its row says so. The weights are random (the official
files cannot be downloaded here; memory, sizes and agreement do not depend on the values),
written once per case as an .npz by a child process (with a random head, so that the
probabilities differ from class to class). One export runs at a time.

    python -m benchmarks.export_memory
    python -m benchmarks.export_memory --cases=ViT-B_16:384 --formats=onnx,litert
    python -m benchmarks.export_memory --growth onnx    # JSON: memory per extra byte of weights

`--markdown [JSON]` prints the table of docs/guides/deploy.md's "Peak memory" from a run's JSON.
`--growth FORMAT [BLOCKS]` exports a small model of one block and of BLOCKS (24), each in a
process of its own, and prints the export's memory per extra byte of weights
(tests/test_export.py bounds it).
"""

import json
import os
import re
import shutil
import sys
import tempfile
import time

from benchmarks import harness
from keras_vit import commands

DEFAULT_CASES = "ViT-B_16:384,ViT-L_16:224"
DEFAULT_FORMATS = "saved_model,onnx,litert,litert-int8"
# The bounds the export is meant to stay within on a machine of this size (GB, 10^9 bytes).
TARGET_GB = {"ViT-B_16:384": 3.0, "ViT-L_16:224": 8.0}
OUTPUTS = {
    "saved_model": "model",
    "onnx": "model.onnx",
    "litert": "model.tflite",
    "litert-int8": "model.tflite",
}
COLUMNS = [
    ("model", "case", ""),
    ("format", "format", ""),
    ("peak GB", "peak_gb", ".2f"),
    ("bound GB", "target_gb", ".0f"),
    ("within", "within", ""),
    ("weights GB", "weights_gb", ".2f"),
    ("size MB", "size_mb", ".1f"),
    ("max |diff|", "max_difference", ".1e"),
    ("seconds", "seconds", ".0f"),
]
_REPORT = re.compile(r"\(\S+, ([\d.]+) MiB\): max \|difference\| .* ([\d.e+-]+) \(tolerance")


def make_weights(variant, image_size, path):
    """In this process: a random `variant` at `image_size` with a random head, as an .npz."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import numpy as np

    import keras_vit

    model = keras_vit.create_model(variant, image_size=image_size, num_classes=1000)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.05, head.kernel.shape))
    keras_vit.weights.save_npz(model, path)
    return {"path": path, "parameters": model.count_params()}


# --growth: a model of GROWTH_LAYERS blocks against one of a single block, same width, each
# exported in a process of its own; the export's memory above what its process held before it,
# per extra byte of weights.
GROWTH_SHAPE = dict(image_size=32, hidden_size=256, num_heads=4, mlp_dim=1024, num_classes=10)
GROWTH_LAYERS = 24


def growth(format, layers=GROWTH_LAYERS):
    """{"weights": [bytes, bytes], "overhead": [bytes, bytes], "per_weight_byte"} for exports of
    one block and of `layers` blocks, each in a fresh process (growth_overhead), or {"error"}.

    A converter that copies all the weights once or a few times costs a few bytes per byte of
    weights; one that copies them once per block (or per pass over the blocks) costs `layers`.
    A process each, because a second export in the same process starts from what the first
    left behind (imported runtimes, caches, memory its allocator frees later), so the
    difference of two peaks there carried that noise too, up to about 150 MB."""
    found = {"weights": [], "overhead": []}
    for depth in (1, layers):
        argv = ["--growth_depth", format, str(depth)]
        one = harness.run_child("benchmarks.export_memory", argv, {"KERAS_BACKEND": "tensorflow"})
        if "error" in one:
            return {"error": f"the export of {depth} block(s): {one['error']}"}
        found["weights"].append(one["weights"])
        found["overhead"].append(one["overhead"])
    extra = found["weights"][1] - found["weights"][0]
    found["per_weight_byte"] = (found["overhead"][1] - found["overhead"][0]) / extra
    return found


def check_formats(formats):
    """A one-line error for the first of `formats` that keras_vit.export does not write."""
    unknown = sorted(set(formats) - set(OUTPUTS))
    if unknown:
        raise SystemExit(f"error: unknown format {unknown[0]!r}: choose from {', '.join(OUTPUTS)}")


def growth_arguments(words):
    """(format, blocks) from the words after --growth, FORMAT [BLOCKS], or a one-line error."""
    usage = "write --growth FORMAT [BLOCKS], e.g. --growth onnx 12"
    if len(words) not in (1, 2):
        raise SystemExit(f"error: --growth takes a format and, optionally, a number of blocks: {usage}")
    format, blocks = words[0], words[1] if len(words) == 2 else str(GROWTH_LAYERS)
    check_formats([format])
    # Two blocks at least: the growth is measured against the model of one.
    if not blocks.isdecimal() or int(blocks) < 2:
        raise SystemExit(f"error: {blocks!r} blocks: the number must be a whole number of 2 or more: {usage}")
    return format, int(blocks)


def growth_overhead(format, depth, shape=GROWTH_SHAPE):
    """In this process: {"weights", "overhead"} in bytes for the export of a model of `depth`
    blocks. The overhead is the peak anonymous resident memory (harness.tree_rss_bytes) of this
    process and its children during `keras_vit.export.export` less what they held before it."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import gc

    import numpy as np

    import keras_vit
    from keras_vit import export

    model = keras_vit.create_model("ViT-Ti_16", num_layers=depth, **shape)
    head = model.get_layer("head")  # zero at initialisation: the check needs outputs that differ
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32"))
    gc.collect()
    with tempfile.TemporaryDirectory(prefix="export_growth-") as scratch:
        with harness.PeakPoller(os.getpid(), anonymous=True) as poller:
            export.export(model, os.path.join(scratch, OUTPUTS[format]), format)
    return {"weights": model.count_params() * 4, "overhead": poller.peak_bytes - poller.start_bytes}


def measure(case, format, weights, out_dir, limit_bytes):
    """One export as a user runs it, watched: a table row."""
    variant, _ = case.split(":")
    out = os.path.join(out_dir, format, OUTPUTS[format])
    argv = ["-m", "keras_vit.export", out, f"--format={format}", f"--model={variant}", f"--weights={weights}"]
    watched = harness.run_watched([sys.executable, *argv], limit_bytes, env={"KERAS_BACKEND": "tensorflow"})
    row = {"case": case, "format": format, "peak_gb": watched["peak_bytes"] / 1e9}
    row["seconds"] = watched["seconds"]
    found = _REPORT.search(watched["stdout"])
    if watched["killed"]:
        row["error"] = f"killed at the {limit_bytes / 1e9:.0f} GB limit"
    elif watched["returncode"] or not found:
        row["error"] = f"exit {watched['returncode']}: {watched['last_line']}"
    else:
        row["size_mb"] = float(found.group(1)) * 2**20 / 1e6
        row["max_difference"] = float(found.group(2))
    shutil.rmtree(os.path.join(out_dir, format), ignore_errors=True)
    return row


def markdown(data):
    """The table of docs/guides/deploy.md's "Peak memory": a row per format, a column per case."""
    rows = data["tables"][0]["rows"]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    formats = list(dict.fromkeys(r["format"] for r in rows))
    found = {(r["case"], r["format"]): r for r in rows}

    def cell(row):
        if row is None:
            return "—"
        if "error" in row:
            return f"over {row['peak_gb']:.0f} GB ({row['error']})"
        return f"{row['peak_gb']:.2f} GB, {row['seconds']:.0f} s"

    def title(case):
        variant, size = case.split(":")
        return f"{variant.replace('_', '/')}, {size} px"

    lines = [
        "| format | " + " | ".join(title(c) for c in cases) + " |",
        "|---|" + "--:|" * len(cases),
    ]
    lines += [f"| `{f}` | " + " | ".join(cell(found.get((c, f))) for c in cases) + " |" for f in formats]
    bounds = [f"{TARGET_GB[c]:g} GB" if c in TARGET_GB else "—" for c in cases]
    return "\n".join(lines + ["| the bound | " + " | ".join(bounds) + " |"])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--markdown"]:
        path = argv[1] if argv[1:] else os.path.join(harness.OUT_DIR, "export_memory.json")
        if not os.path.isfile(path):
            raise SystemExit(f"error: no run's JSON at {path}: run python -m benchmarks.export_memory first")
        with open(path, encoding="utf-8") as f:
            print(markdown(json.load(f)))
        return 0
    if argv[:1] == ["--growth"]:
        print(json.dumps(growth(*growth_arguments(argv[1:]))))
        return 0
    if argv[:1] == ["--growth_depth"]:
        print(json.dumps(growth_overhead(argv[1], int(argv[2]))))
        return 0
    if argv[:1] == ["--make_weights"]:
        variant, size, path = argv[1:]
        print(json.dumps(make_weights(variant, int(size), path)))
        return 0
    start = time.perf_counter()
    p = harness.parser(__doc__.splitlines()[0], "export_memory")
    p.add_argument("--cases", default=DEFAULT_CASES, help="VARIANT:IMAGE_SIZE,...")
    p.add_argument("--formats", default=DEFAULT_FORMATS, help="keras_vit.export formats, comma-separated")
    p.add_argument("--limit_gb", type=float, default=12.0, help="kill an export whose memory passes this")
    args = p.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    check_formats(formats)
    for case in cases:
        if not re.fullmatch(r"[\w-]+:\d+", case):
            raise SystemExit(f"error: --cases entry {case!r}: write VARIANT:IMAGE_SIZE, e.g. ViT-B_16:384")
    settings = {"cases": cases, "formats": formats, "limit_gb": args.limit_gb}
    data = harness.result("export_memory", argv, settings)
    rows = []
    with tempfile.TemporaryDirectory(prefix="export_memory-") as scratch:
        for case in cases:
            variant, size = case.split(":")
            weights = os.path.join(scratch, f"{variant}_{size}.npz")
            made = harness.run_child("benchmarks.export_memory", ["--make_weights", variant, size, weights])
            if "error" in made:
                rows.append({"case": case, "format": "—", "error": f"the weights: {made['error']}"})
                continue
            for format in formats:
                row = measure(case, format, weights, scratch, args.limit_gb * 1e9)
                row["weights_gb"] = made["parameters"] * 4 / 1e9
                if case in TARGET_GB:
                    row["target_gb"] = TARGET_GB[case]
                    within = "error" not in row and row["peak_gb"] <= TARGET_GB[case]
                    row["within"] = "yes" if within else "no"
                rows.append(row)
                print(json.dumps(row), flush=True)
            os.remove(weights)
    data["tables"].append(harness.section("Peak memory of python -m keras_vit.export", COLUMNS, rows))
    data["notes"] += [f"{r['case']} {r['format']}: {r['error']}" for r in rows if "error" in r]
    harness.finish(data, args.out, start)
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
