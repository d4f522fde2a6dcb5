"""Where keras_vit's inference or training time goes on TensorFlow: time per operation type or XLA kernel.

The model runs as the inference benchmark runs keras_vit (one tf.function on TensorFlow's own
kernels, as Keras' `model.predict` on a CPU), or with --step=train as the trainers' training
step (benchmarks.train: the `python -m trainers.finetune` defaults with
--mixed_precision=bfloat16, or =none for --dtype=float32); a few calls are traced, and the
trace's per-op statistics are summed by operation type and grouped: matrix products, casts,
and the other element-wise ops. Self times are summed over the CPU's threads, so they add up
to more than the wall time of a call.
XLA-compiled kernels inside a TensorFlow step (the training step's GELU, keras_vit/fused_gelu.py)
are not in TensorFlow's per-operation statistics: their executions are read from the trace itself
and make one row of their own (XLA_ROW, group "XLA-compiled").
On an x86 CPU without AVX-512, where keras_vit compiles its inference call with XLA itself
(keras_vit/xla_inference.py), that call has no TensorFlow operations to count: the table then has
one row per kind of XLA kernel it ran (the optimised program's instruction names, as
`XLA_FLAGS=--xla_dump_to=DIR` writes them: `MatMul_1` the products TensorFlow named so, `dot` the
attention's, `*_fusion` the element-wise passes XLA fused), each kernel's time on the thread that
ran it, read from the trace (kernels XLA runs at once, as a block's query, key and value
products, each count their whole time, so the sum can pass the call's wall time). A product's
row also names its shape (`MatMul 197x192 by 192x768`, `dot 3 x 197x64 by 64x197`: the query
projection and the MLP's are all `MatMul`) and gives its rate, from its FLOPs in the compiled
program's text, and that rate's share of TensorFlow's matmul peak measured in the same run. The
row IDLE_ROW holds the time of the program's executions in which no kernel ran on any thread:
the runtime handing kernels to its threads, and work that goes on after its kernel's event (the
patch embedding's convolution: a rate above the peak, which a note names, is such a kernel's, or
one timed under less load than the peak was).
`--xla_kernels=false` profiles the same call on TensorFlow's graph instead (the inference
benchmark's "keras_vit TF graph" row), per operation type.

    python -m benchmarks.op_profile --dtype=bfloat16
    python -m benchmarks.op_profile --variant=ViT-Ti_16 --batch_size=8 --dtype=float32
    python -m benchmarks.op_profile --step=train --variant=ViT-Ti_16 --batch_size=16
    python -m benchmarks.op_profile --variant=ViT-Ti_16 --batch_size=1 --dtype=float32
"""

import collections
import glob
import json
import math
import os
import re
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import flops, harness, inference, peak, shared  # noqa: E402
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
# The trace's spans that hold an XLA program's kernels: its execution on the calling thread and
# its thunk executors on the pool's threads. Their own and their helpers' events are not kernels.
XLA_SPANS = (XLA_EXECUTION, "ThunkExecutor::Execute")
XLA_NOT_KERNELS = (
    "CpuExecutable::",
    "ThunkExecutor::",
    "SlinkyThreadPool::",
    "BlockUntilReady",
    "end: ",
    "Memory",  # the profiler's own allocation records
    "ThreadpoolListener::",
)
XLA_MATMUL_PREFIXES = ("MatMul", "BatchMatMul", "Einsum", "dot", "convolution")
XLA_ROW = "XLA-compiled kernels"
# The per-XLA-kernel table's row of an execution's time in which no kernel ran on any thread: the
# runtime handing kernels to its threads, and a kernel's work after its event ended (the patch
# embedding's convolution runs on the pool after its thunk returns, so its own row's time is short).
IDLE_ROW = "no kernel running"
COLUMNS = (
    ("operation type", "op_type", ""),
    ("group", "group", ""),
    ("ms per call", "ms_per_call", ".1f"),
    ("share", "share", ".1%"),
)
# The per-XLA-kernel table: each product's rate, and its share of TensorFlow's matmul peak.
XLA_COLUMNS = (
    ("XLA kernel", "op_type", ""),
    *COLUMNS[1:],
    ("GFLOP/s", "gflop_per_s", ".0f"),
    ("of matmul peak", "of_peak", ".0%"),
)
# The first line of a computation of the program's text: `%fused_computation.2 (param_0.2: ...) {`.
HLO_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
# One instruction of an XLA program's text: name, element type, dimensions, opcode, operands,
# attributes (a tuple-shaped one does not match: none is a product).
HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = \w+\[([\d,]*)\]\S* ([\w\-]+)\(([^)]*)\)(.*)$")


def group(op_type):
    """The group of an operation type, or of an XLA kernel's row (its kind, before the product's
    shape)."""
    if op_type == XLA_ROW:
        return "XLA-compiled"
    if op_type == IDLE_ROW:
        return "between kernels"
    op_type = op_type.split(" ", 1)[0]
    if op_type.endswith("fusion") or op_type.startswith(("wrapped_", "convert")):
        # An XLA kernel: its name says what it fused or wrapped.
        if "dot" in op_type or "convolution" in op_type:
            return "matmul"
        return "cast" if "convert" in op_type else "element-wise and other"
    if op_type.startswith(XLA_MATMUL_PREFIXES):
        return "matmul"
    name = op_type.removeprefix("_Mkl")
    if name in MATMULS:
        return "matmul"
    return "cast" if name in CASTS else "element-wise and other"


def traced(step, calls, logdir):
    """The path of the trace (an XSpace file) of `calls` calls of `step`, written under `logdir`."""
    import tensorflow as tf

    tf.profiler.experimental.start(logdir)
    try:
        for _ in range(calls):
            step()
    finally:
        tf.profiler.experimental.stop()
    return sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]


def read_space(path):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    return space


def op_stats(step, calls, logdir):
    """{op type: total self time in µs} over `calls` traced calls of `step`."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    path = traced(step, calls, logdir)
    data, ok = plugin.xspace_to_tools_data([path], "framework_op_stats", {})
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
    xla_us = xla_execution_us(read_space(path))
    if xla_us:
        totals[XLA_ROW] += xla_us
    return totals


def xla_executions(plane):
    """(start ps, end ps) of each execution of an XLA-compiled function on `plane` (of an XSpace)."""
    ids = {key for key, meta in plane.event_metadata.items() if meta.name == XLA_EXECUTION}
    return [
        (e.offset_ps, e.offset_ps + e.duration_ps)
        for line in plane.lines
        for e in line.events
        if e.metadata_id in ids
    ]


def xla_execution_us(space):
    """The summed duration, in µs, of the XLA-compiled functions a trace (an XSpace) ran."""
    return sum(end - start for plane in space.planes for start, end in xla_executions(plane)) / 1e6


def xla_kernel_kind(name):
    """An XLA kernel's instruction name without its number: `MatMul_1.24` -> `MatMul_1`."""
    return re.sub(r"\.\d+$", "", name)


def xla_kernel_events(plane):
    """(instruction name, start ps, end ps) of each kernel the XLA programs on `plane` (of an
    XSpace) ran: each event inside one of XLA_SPANS on the same thread, but for those spans' own
    events."""
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    for line in plane.lines:
        spans = [
            (e.offset_ps, e.offset_ps + e.duration_ps)
            for e in line.events
            if names.get(e.metadata_id, "").startswith(XLA_SPANS)
        ]
        for e in line.events:
            name = names.get(e.metadata_id, "")
            if not name or name.startswith(XLA_NOT_KERNELS):
                continue
            start, end = e.offset_ps, e.offset_ps + e.duration_ps
            if any(span_start <= start and end <= span_end for span_start, span_end in spans):
                yield name, start, end


def uncovered_ps(span, intervals):
    """How much of `span` (start, end) none of `intervals` covers."""
    start, end = span
    covered_until, uncovered = start, 0
    for a, b in sorted(intervals):
        a, b = max(a, start), min(b, end)
        if b <= max(a, covered_until):  # outside the span, or covered already
            continue
        uncovered += max(0, a - covered_until)
        covered_until = b
    return uncovered + max(0, end - covered_until)


def hlo_products(hlo):
    """{instruction name: (its product as "197x192 by 192x192", FLOPs)} for each `dot` and
    `convolution` of an XLA program's optimised text (as `experimental_get_compiler_ir` gives it,
    with the names the trace's kernels have), and for each fusion that holds one: the program's
    kernels, those of its entry computation (a fused computation's own products run inside its
    fusion's kernel, which the trace names)."""
    shapes, products, inside = {}, {}, collections.defaultdict(list)
    computation = entry = None
    for line in hlo.splitlines():
        header = HLO_COMPUTATION.match(line)
        if header:
            computation = header.group(1)
            entry = computation if line.startswith("ENTRY") else entry
            continue
        found = HLO_INSTRUCTION.match(line)
        if not found:
            continue
        name, dims, opcode, operands, attributes = found.groups()
        shapes[name] = [int(d) for d in dims.split(",") if d]
        operands = [o.strip().lstrip("%") for o in operands.split(",")]
        product = None
        if opcode in ("dot", "convolution") and all(o in shapes for o in operands[:2]):
            measure = _dot if opcode == "dot" else _convolution
            product = measure(shapes[name], shapes[operands[0]], shapes[operands[1]], attributes)
            inside[computation].append(product)
        elif opcode == "fusion":
            called = re.search(r"calls=%?([\w.\-]+)", attributes)
            fused = inside.get(called.group(1), []) if called else []
            if fused:  # a fused computation comes before its caller in the text
                product = (" + ".join(label for label, _ in fused), sum(f for _, f in fused))
        if product and computation == entry:
            products[name] = product
    return products


def _dims(attributes, key):
    found = re.search(rf"{key}={{([\d,]*)}}", attributes)
    return [int(d) for d in found.group(1).split(",") if d] if found else []


def _dot(out, lhs, rhs, attributes):
    """A dot's (label, FLOPs) from its operands' dimensions and its batch and contracting ones."""
    lhs_batch, rhs_batch = _dims(attributes, "lhs_batch_dims"), _dims(attributes, "rhs_batch_dims")
    lhs_k, rhs_k = _dims(attributes, "lhs_contracting_dims"), _dims(attributes, "rhs_contracting_dims")
    batch = math.prod(lhs[d] for d in lhs_batch)
    k = math.prod(lhs[d] for d in lhs_k)
    m = math.prod(lhs[d] for d in range(len(lhs)) if d not in lhs_batch + lhs_k)
    n = math.prod(rhs[d] for d in range(len(rhs)) if d not in rhs_batch + rhs_k)
    label = f"{m}x{k} by {k}x{n}"
    return (f"{batch} x {label}" if batch > 1 else label), 2 * math.prod(out) * k


def _convolution(out, image, kernel, attributes):
    """A convolution's (label, FLOPs): each output element sums the kernel's window over the input
    channels, the kernel's size over its output features (the output's last dimension, as
    TensorFlow lays it out)."""
    label = f"{'x'.join(map(str, image))} by {'x'.join(map(str, kernel))}"
    return label, 2 * math.prod(out) * (math.prod(kernel) // out[-1])


def xla_kernel_row(name, products):
    """A kernel's row: its instruction's name without the number (`MatMul_1.24` -> `MatMul_1`),
    with a product's shape after it, so that products of one name but other sizes have rows of
    their own (the query projection and the MLP's two, all `MatMul`)."""
    kind = xla_kernel_kind(name)
    return f"{kind} {products[name][0]}" if name in products else kind


def xla_kernel_us(space, products=None):
    """{row: µs} summed over the kernels the XLA programs in `space` ran, with IDLE_ROW the time of
    their executions that no kernel covers on any thread, and {row: FLOPs} of the products among
    them (`products`: hlo_products of the program)."""
    products = products or {}
    totals, product_flops = collections.Counter(), collections.Counter()
    for plane in space.planes:
        kernels = list(xla_kernel_events(plane))
        for name, start, end in kernels:
            row = xla_kernel_row(name, products)
            totals[row] += (end - start) / 1e6
            if name in products:
                product_flops[row] += products[name][1]
        intervals = sorted((a, b) for _, a, b in kernels)
        idle = sum(uncovered_ps(span, intervals) for span in xla_executions(plane))
        if kernels and idle:
            totals[IDLE_ROW] += idle / 1e6
    return totals, product_flops


def xla_kernel_stats(step, calls, logdir, products=None):
    """{row: µs} and {row: FLOPs} over `calls` traced calls of `step`, an XLA-compiled call."""
    totals, product_flops = xla_kernel_us(read_space(traced(step, calls, logdir)), products)
    if not totals:
        raise SystemExit("error: the trace holds no XLA kernels: run with --xla_kernels=false")
    return totals, product_flops


def xla_program(step):
    """The optimised text of the XLA-compiled call inside `step`, keras_vit's inference step
    (inference.keras_step, which keeps its model and images on it)."""
    from keras_vit import xla_inference

    compiled = xla_inference.compiled(step.model)
    return compiled.experimental_get_compiler_ir(step.images)(stage="optimized_hlo")


def rows_of(totals, calls, product_flops=None, peak_flops=None):
    """The table's rows, largest first; with `product_flops` ({row: FLOPs}) the products' rates, and
    with `peak_flops` (FLOP/s) their share of it."""
    whole = sum(totals.values()) or 1
    rows = [
        {"op_type": t, "group": group(t), "ms_per_call": us / calls / 1000, "share": us / whole}
        for t, us in totals.most_common()
    ]
    for r in rows:
        if product_flops and product_flops.get(r["op_type"]) and totals[r["op_type"]]:
            rate = product_flops[r["op_type"]] / (totals[r["op_type"]] / 1e6)
            r["gflop_per_s"] = rate / 1e9
            r["of_peak"] = rate / peak_flops if peak_flops else None
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
    p.add_argument(
        "--xla_kernels",
        default="auto",
        choices=("auto", "false"),
        help="inference where keras_vit compiles its call with XLA (an x86 CPU without AVX-512): "
        "auto profiles that call per XLA kernel, false the same call on TensorFlow's graph per operation",
    )
    p.add_argument(
        "--matmul_size",
        type=int,
        default=4096,
        help="the square matmul that measures the peak the per-XLA-kernel table's products are set against",
    )
    args = p.parse_args(argv)
    inference.check_variant(args.variant)
    # keras_vit's inference call is XLA-compiled where TensorFlow's graph is its diagnostic row.
    profiled = inference.profiled_kind(args.dtype)
    per_xla_kernel = (
        args.step == "inference" and args.xla_kernels == "auto" and profiled == inference.ON_GRAPH
    )
    shape = flops.shape(args.variant, num_layers=args.num_layers)
    if args.step == "train":
        precision = "bfloat16" if args.dtype == "bfloat16" else "none"
        size = (args.variant, args.image_size, args.batch_size, args.num_layers)
        config = shared.finetune_config(*size, mixed_precision=precision)
        name = shared.trainer_name(config)
        step = shared.trainer_step(config, 1)
    else:
        kind = "keras_vit" if per_xla_kernel else profiled
        name = inference.contestant_name(kind, args.dtype)
        step = inference.local_step(kind, shape, args.image_size, args.batch_size, args.dtype)
    step(), step()  # compile and warm up outside the trace
    fields = ("step", "variant", "image_size", "batch_size", "dtype", "calls", "xla_kernels")
    if per_xla_kernel:
        products = hlo_products(xla_program(step))
        peak_flops = peak.tf_matmul(args.dtype, args.matmul_size)
        with tempfile.TemporaryDirectory() as logdir:
            totals, product_flops = xla_kernel_stats(step, args.calls, logdir, products)
        rows, groups = rows_of(totals, args.calls, product_flops, peak_flops)
        fields += ("matmul_size",)
    else:
        with tempfile.TemporaryDirectory() as logdir:
            rows, groups = rows_of(op_stats(step, args.calls, logdir), args.calls)
    settings = {k: getattr(args, k) for k in fields}
    data = harness.result("op_profile", argv, settings)
    if per_xla_kernel:
        data["matmul_peak_flops"] = {f"tf {args.dtype}": peak_flops}
        for r in rows:
            if (r.get("of_peak") or 0) > 1:
                data["notes"].append(
                    f"{r['op_type']} above the matmul peak: its kernel's event ended before its work did "
                    f"(XLA ran the rest on its threads, in the row '{IDLE_ROW}'), or the machine's load "
                    "changed between the peak's measurement and the trace"
                )
    data["groups"] = groups
    title = (
        f"Time by XLA kernel, {name} (XLA-compiled)"
        if per_xla_kernel
        else f"Self time by operation type, {name}"
    )
    data["tables"].append(harness.section(title, XLA_COLUMNS if per_xla_kernel else COLUMNS, rows))
    data["notes"].append("groups: " + ", ".join(f"{g} {share:.0%}" for g, share in sorted(groups.items())))
    harness.finish(data, args.out, start)


if __name__ == "__main__":
    commands.exit_with(main)
