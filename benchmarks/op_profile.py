"""Where keras_vit's inference or training time goes on TensorFlow: self time per operation type.

The model runs as the inference benchmark runs keras_vit (one tf.function on TensorFlow's own
kernels, as Keras' `model.predict` on a CPU; on an x86 CPU without AVX-512, where keras_vit
compiles that call with XLA itself, its "TF graph" row, traced without: XLA's fusions have no
per-operation statistics), or with --step=train as the trainers' training
step (benchmarks.train: the `python -m trainers.finetune` defaults with
--mixed_precision=bfloat16, or =none for --dtype=float32); a few calls are traced, and the
trace's per-op statistics are summed by operation type and grouped: matrix products, casts,
and the other element-wise ops. Self times are summed over the CPU's threads, so they add up
to more than the wall time of a call.
XLA-compiled kernels inside a TensorFlow step (the training step's GELU, keras_vit/fused_gelu.py)
are not in TensorFlow's per-operation statistics: their executions are read from the trace itself
and make one row of their own (XLA_ROW, group "XLA-compiled").

    python -m benchmarks.op_profile --dtype=bfloat16
    python -m benchmarks.op_profile --variant=ViT-Ti_16 --batch_size=8 --dtype=float32
    python -m benchmarks.op_profile --step=train --variant=ViT-Ti_16 --batch_size=16
"""

import collections
import glob
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import flops, harness, inference, shared  # noqa: E402
from keras_vit import commands  # noqa: E402

# Operation types (as TF's profiler names them, oneDNN's _Mkl prefix dropped) by group.
MATMULS = {
    "MatMul",
    "BatchMatMulV2",
    "Einsum",
    "FusedMatMul",
    "NativeFusedMatMul",
    "NativeFusedConv2D",
    "Conv2D",
    "NativeConv2DBackpropFilter",
    "Conv2DBackpropFilter",
}
CASTS = {"Cast"}
# What the trace calls one execution of an XLA-compiled CPU function on a TensorFlow thread, and
# the table's row of them.
XLA_EXECUTION = "CpuExecutable::ExecuteAsyncOnStream"
XLA_ROW = "XLA-compiled kernels"
COLUMNS = (
    ("operation type", "op_type", ""),
    ("group", "group", ""),
    ("ms per call", "ms_per_call", ".1f"),
    ("share", "share", ".1%"),
)


def group(op_type):
    if op_type == XLA_ROW:
        return "XLA-compiled"
    name = op_type.removeprefix("_Mkl")
    if name in MATMULS:
        return "matmul"
    return "cast" if name in CASTS else "element-wise and other"


def op_stats(step, calls, logdir):
    """{op type: total self time in µs} over `calls` traced calls of `step`."""
    import tensorflow as tf
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    tf.profiler.experimental.start(logdir)
    try:
        for _ in range(calls):
            step()
    finally:
        tf.profiler.experimental.stop()
    paths = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))
    data, ok = plugin.xspace_to_tools_data(paths[-1:], "framework_op_stats", {})
    if not ok:
        raise SystemExit(f"error: TensorFlow's profiler could not read its trace in {logdir}")
    table = json.loads(data)
    table = table[0] if isinstance(table, list) else table
    index = {c["label"]: i for i, c in enumerate(table["cols"])}
    totals = collections.Counter()
    for row in table["rows"]:
        cells = [c["v"] if isinstance(c, dict) else c for c in row["c"]]
        op_type = cells[index["Operation Type"]]
        if op_type != "IDLE":
            totals[op_type] += cells[index["Total self-time (us)"]]
    xla_us = xla_execution_us(paths[-1])
    if xla_us:
        totals[XLA_ROW] += xla_us
    return totals


def xla_execution_us(path):
    """The summed duration, in µs, of the XLA-compiled functions the trace at `path` ran."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    total_ps = 0
    for plane in space.planes:
        ids = {key for key, meta in plane.event_metadata.items() if meta.name == XLA_EXECUTION}
        total_ps += sum(e.duration_ps for line in plane.lines for e in line.events if e.metadata_id in ids)
    return total_ps / 1e6


def rows_of(totals, calls):
    whole = sum(totals.values()) or 1
    rows = [
        {"op_type": t, "group": group(t), "ms_per_call": us / calls / 1000, "share": us / whole}
        for t, us in totals.most_common()
    ]
    groups = collections.Counter()
    for r in rows:
        groups[r["group"]] += r["share"]
    return rows, dict(groups)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    start = time.perf_counter()
    p = harness.parser(__doc__.splitlines()[0], "op_profile")
    p.add_argument("--variant", default="ViT-B_16", help="a plain ViT variant")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--num_layers", type=int, default=0, help="override the variant's depth (0: its own)")
    p.add_argument("--calls", type=int, default=3, help="traced calls (after two untraced)")
    p.add_argument("--step", default="inference", choices=("inference", "train"))
    args = p.parse_args(argv)
    inference.check_variant(args.variant)
    shape = flops.shape(args.variant, num_layers=args.num_layers)
    if args.step == "train":
        precision = "bfloat16" if args.dtype == "bfloat16" else "none"
        size = (args.variant, args.image_size, args.batch_size, args.num_layers)
        config = shared.finetune_config(*size, mixed_precision=precision)
        name = shared.trainer_name(config)
        step = shared.trainer_step(config, 1)
    else:
        kind = inference.profiled_kind(args.dtype)
        name = inference.contestant_name(kind, args.dtype)
        step = inference.local_step(kind, shape, args.image_size, args.batch_size, args.dtype)
    step(), step()  # compile and warm up outside the trace
    with tempfile.TemporaryDirectory() as logdir:
        totals = op_stats(step, args.calls, logdir)
    rows, groups = rows_of(totals, args.calls)
    fields = ("step", "variant", "image_size", "batch_size", "dtype", "calls")
    settings = {k: getattr(args, k) for k in fields}
    data = harness.result("op_profile", argv, settings)
    data["groups"] = groups
    data["tables"].append(harness.section(f"Self time by operation type, {name}", COLUMNS, rows))
    data["notes"].append("groups: " + ", ".join(f"{g} {share:.0%}" for g, share in sorted(groups.items())))
    harness.finish(data, args.out, start)


if __name__ == "__main__":
    commands.exit_with(main)
