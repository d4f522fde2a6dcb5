"""Inference images/s and latency of keras_vit against keras-hub and timm, measured in the same run.

Every contestant builds the same classifier (1000 classes) and runs inside one tf.function or
torch.inference_mode: keras_vit as Keras' `model.predict` runs it on a CPU (TensorFlow's own
kernels, no XLA; on an x86 CPU without AVX-512 keras_vit itself compiles the call with XLA,
keras_vit/xla_inference.py), keras-hub in its fastest mode (XLA-compiled in float32; in bfloat16
TensorFlow's own kernels are faster on a CPU with AVX-512, XLA without), timm eager and under
torch.compile.
bfloat16: the weights stored and computed in bfloat16, as a deployed model runs (Keras'
`bfloat16` policy, timm's weights cast with .bfloat16()). Peak resident memory is measured for
one case, each contestant in its own process.

keras_vit itself also runs where a user may deploy it on a CPU (--runtimes): on Keras' PyTorch
backend (eager, under torch.inference_mode, in a child process, since Keras fixes its backend per
process; its rounds still take turns with the others), and exported to ONNX by keras_vit's own
export, on ONNX Runtime (float32 only: the export is float32) and on OpenVINO (float32, and
bfloat16 as OpenVINO's inference precision where the CPU has bfloat16 instructions: OpenVINO
converts the float32 file's weights as it compiles), on Keras' OpenVINO backend (no export:
`predict_on_batch` in a child process, in the one precision OpenVINO picks for the CPU, bfloat16
where it has bfloat16 instructions), and in float32 XLA-compiled. In
bfloat16 it also runs with its inference in parts of the token rows switched off
(keras_vit/row_parts.py), and on an x86 CPU without AVX-512 with its own XLA compile switched
off (TensorFlow's graph), the gain of each measured in the same run.

    pip install -e ".[bench]"
    python -m benchmarks.inference
    python -m benchmarks.inference --cases=ViT-Ti_16:224 --batch_sizes=8 --dtypes=float32 --repeats=3
"""

import atexit
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import contestants  # noqa: E402, I001  (first: it imports PyTorch before TensorFlow)
from benchmarks import flops, harness, peak, shared  # noqa: E402
from keras_vit import commands, cpu_info, row_parts, xla_inference  # noqa: E402

NUM_CLASSES = 1000
OURS = "keras_vit TF"
# keras_vit on the other runtimes --runtimes names, without inference in parts of the rows, and
# without its own XLA compile (keras_vit/xla_inference.py).
ON_TORCH, ON_ONNX, WHOLE_ROWS = "keras_vit-torch", "keras_vit-onnxruntime", "keras_vit-whole-rows"
ON_GRAPH = "keras_vit-graph"
ON_OPENVINO = "keras_vit-openvino"
ON_KERAS_OPENVINO = "keras_vit-keras-openvino"
ON_XLA = "keras_vit-xla"
NAMES = {
    "keras_vit": OURS,
    ON_TORCH: "keras_vit PyTorch",
    ON_ONNX: "keras_vit ONNX Runtime",
    ON_OPENVINO: "keras_vit OpenVINO",
    ON_KERAS_OPENVINO: "keras_vit Keras-OpenVINO",
    WHOLE_ROWS: "keras_vit TF, whole rows",
    ON_GRAPH: "keras_vit TF graph",
    ON_XLA: "keras_vit TF+XLA",
    "keras-hub": "keras-hub TF+XLA",
    "timm-eager": "timm eager",
    "timm-compile": "timm torch.compile",
}
# --runtimes value -> (its kind, the modules it needs).
RUNTIMES = {
    "torch": (ON_TORCH, ("torch",)),
    "onnxruntime": (ON_ONNX, ("onnxruntime", "torch", "onnxscript", "onnx")),
    "openvino": (ON_OPENVINO, ("openvino", "torch", "onnxscript", "onnx")),
    "keras-openvino": (ON_KERAS_OPENVINO, ("openvino",)),
    "tf-whole-rows": (WHOLE_ROWS, ()),
    "tf-graph": (ON_GRAPH, ()),
    "tf-xla": (ON_XLA, ()),
}
# keras_vit's rows with one of its own paths off while the call is traced: kind -> the path's switch.
SWITCHED_OFF = {WHOLE_ROWS: row_parts.SWITCH, ON_GRAPH: xla_inference.SWITCH}
# The child process that runs keras_vit on Keras' PyTorch backend (harness.ChildServer).
TORCH_CHILD_ENV = {"KERAS_BACKEND": "torch", contestants.CHILD_FRAMEWORK: "torch"}
# The one that runs it on Keras' OpenVINO backend.
OPENVINO_CHILD_ENV = {"KERAS_BACKEND": "openvino", contestants.CHILD_FRAMEWORK: "openvino"}


def parse_cases(text):
    """Parses --cases: ViT-B_16:224,ViT-B_16:384 -> [("ViT-B_16", 224), ...]."""
    cases = []
    for item in text.split(","):
        variant, _, size = item.strip().partition(":")
        if not size.isdigit():
            raise SystemExit(f"error: --cases entry {item!r}: write VARIANT:IMAGE_SIZE, e.g. ViT-B_16:224")
        cases.append((variant, int(size)))
    return cases


def parse_sizes_and_dtypes(batch_sizes, dtypes):
    """--batch_sizes and --dtypes -> ([8, ...], ["float32", ...]), or a one-line error."""
    if not all(b.strip().isdigit() and int(b) > 0 for b in batch_sizes.split(",")):
        raise SystemExit(f"error: --batch_sizes={batch_sizes}: give positive integers, e.g. 1,8")
    chosen = [d.strip() for d in dtypes.split(",")]
    if set(chosen) - {"float32", "bfloat16"}:
        raise SystemExit(f"error: --dtypes={dtypes}: choose float32 and/or bfloat16")
    return [int(b) for b in batch_sizes.split(",")], chosen


def parse_runtimes(text):
    """--runtimes -> (kinds, notes): the runtimes' kinds that can run here, a note for each that cannot."""
    chosen = [r.strip() for r in text.split(",") if r.strip() and r.strip() != "none"]
    unknown = sorted(set(chosen) - set(RUNTIMES))
    if unknown:
        raise SystemExit(f"error: unknown runtime {unknown[0]!r}: choose from {', '.join(RUNTIMES)} or none")
    kinds_, notes = [], []
    for runtime in chosen:
        kind, modules = RUNTIMES[runtime]
        absent = [m for m in modules if harness.importlib.util.find_spec(m) is None]
        if absent:
            notes.append(f'{NAMES[kind]} skipped: {", ".join(absent)} missing: pip install -e ".[bench]"')
        else:
            kinds_.append(kind)
    return kinds_, notes


def check_variant(variant):
    if variant not in flops.keras_vit.VARIANTS or variant.startswith("R"):
        raise SystemExit(f"error: unknown or hybrid variant {variant!r}: use a plain ViT, e.g. ViT-B_16")


def keras_step(kind, shape, image_size, batch, dtype, switched_off=None):
    """`kind`: "keras-hub", or keras_vit's "keras_vit" or ON_XLA; `switched_off`: a path of
    keras_vit's (its KERAS_VIT_* switch) that is off while the call is traced."""
    import tensorflow as tf

    # The dtype is the Keras policy: in bfloat16 the weights are stored in bfloat16 too. Under
    # mixed_bfloat16 (float32 weights, what training keeps) every call casts all the weights
    # again: a quarter of ViT-B/16's op time at batch 1 on the 2-core EPYC (benchmarks.op_profile).
    model_kind = "keras-hub" if kind == "keras-hub" else "keras_vit"
    model = contestants.keras_model(model_kind, shape, image_size, NUM_CLASSES, dtype, policy=dtype)
    images = tf.constant(shared.synthetic_images(batch, image_size))
    forward = tf.function(lambda x: model(x, training=False), jit_compile=keras_uses_xla(kind, dtype))
    if switched_off:
        previous = os.environ.get(switched_off)
        os.environ[switched_off] = "0"
        try:
            forward.get_concrete_function(images)  # traced now, without that path
        finally:  # as it was: the run's own setting, or unset
            if previous is None:
                del os.environ[switched_off]
            else:
                os.environ[switched_off] = previous

    def step():
        return forward(images).numpy()

    step.model, step.images = model, images  # for benchmarks.op_profile's look at the compiled call
    return step


def keras_uses_xla(kind, dtype):
    """Whether a contestant's call is wrapped in XLA here. keras_vit runs as Keras' `model.predict`
    runs it on a CPU, not wrapped (in float32 as fast as XLA or faster on the CPUs with AVX-512:
    ViT-Ti/16 at batch 1 1.16x, its rows in parts; on an x86 CPU without AVX-512 the model
    compiles its call itself, keras_vit/xla_inference.py), and wrapped as the runtime ON_XLA
    (float32); keras-hub under XLA in its fastest mode: float32, and bfloat16 on a CPU without
    AVX-512. Where the CPU has AVX-512, XLA's CPU backend, which has no bfloat16 matmul kernels,
    ran the bfloat16 step at half the speed of TensorFlow's own oneDNN kernels; without it
    TensorFlow has no fast bfloat16 kernels either, and keras-hub's bfloat16 ViT-Ti/16 at batch 8
    ran 5x as fast under XLA (the AVX2 EPYC, 2026-12-02)."""
    if kind == ON_XLA:
        return dtype == "float32"
    return kind == "keras-hub" and (dtype == "float32" or xla_inference.cpu_prefers_xla())


def keras_torch_step(shape, image_size, batch, dtype):
    """keras_vit on Keras' PyTorch backend (this process must run on it), eager, no autograd."""
    import keras
    import torch

    assert keras.backend.backend() == "torch", keras.backend.backend()
    contestants.set_torch_threads()
    model = contestants.keras_model("keras_vit", shape, image_size, NUM_CLASSES, dtype, policy=dtype)
    images = keras.ops.convert_to_tensor(shared.synthetic_images(batch, image_size))

    def step():
        with torch.inference_mode():
            return keras.ops.convert_to_numpy(model(images, training=False))

    return step


def keras_openvino_step(shape, image_size, batch, dtype):
    """keras_vit on Keras' OpenVINO backend (this process must run on it): `predict_on_batch`,
    which keras_vit compiles for the batch's shape at the model's precision (`dtype`'s policy, as
    on TensorFlow: keras_vit/openvino_predict.py), and then calls."""
    import keras

    assert keras.backend.backend() == "openvino", keras.backend.backend()
    model = contestants.keras_model("keras_vit", shape, image_size, NUM_CLASSES, dtype, policy=dtype)
    images = shared.synthetic_images(batch, image_size)
    return lambda: model.predict_on_batch(images)


_TORCH_SERVER = harness.ChildServer("benchmarks.inference", TORCH_CHILD_ENV)
atexit.register(_TORCH_SERVER.close)
_OPENVINO_SERVER = harness.ChildServer("benchmarks.inference", OPENVINO_CHILD_ENV)
atexit.register(_OPENVINO_SERVER.close)
_ONNX_FILES = {}


def onnx_file(shape, image_size):
    """The ONNX export of the classifier of `shape` at `image_size`, written once per run."""
    key = (json.dumps(shape, sort_keys=True), image_size)
    if key not in _ONNX_FILES:
        directory = tempfile.mkdtemp(prefix="keras_vit-benchmark-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = os.path.join(directory, "model.onnx")
        # In a process of its own: the export's peak (2.8 GB for ViT-B/16 at 384 px, see
        # benchmarks/export_memory.py) would otherwise stay on top of this process's models.
        got = harness.run_child(
            "benchmarks.inference",
            ["--export_onnx", key[0], str(image_size), path],
            {"KERAS_BACKEND": "tensorflow"},
        )
        if "error" in got:
            raise RuntimeError(f"the ONNX export failed: {got['error']}")
        _ONNX_FILES[key] = path
    return _ONNX_FILES[key]


def export_pixels(batch, image_size):
    """The other contestants' images as the exported file takes them: pixels in [0, 255]."""
    return (shared.synthetic_images(batch, image_size) + 1.0) * 127.5


def onnx_step(path, image_size, batch):
    """The exported model on ONNX Runtime."""
    session = contestants.onnx_session(path)
    name = session.get_inputs()[0].name
    pixels = export_pixels(batch, image_size)
    return lambda: session.run(None, {name: pixels})[0]


def openvino_step(path, image_size, batch, dtype):
    """The same ONNX file compiled by OpenVINO for this batch, at `dtype`'s inference precision."""
    request = contestants.openvino_model(path, dtype, batch, image_size).create_infer_request()
    pixels = export_pixels(batch, image_size)
    return lambda: request.infer({0: pixels})[0]


def runs_in(kind, dtype):
    """Whether contestant `kind` has a `dtype` mode: the ONNX export on ONNX Runtime and XLA run
    float32 only, OpenVINO (the exported file, and keras_vit on Keras' OpenVINO backend) bfloat16
    only on a CPU with bfloat16 instructions (elsewhere it would compute in float32 under the
    bfloat16 name), the whole rows bfloat16 only, the dtype whose gain from the parts the table
    follows, and only where keras_vit does not compile its call with XLA (inside XLA's call the
    rows are never in parts: the row would time the default's own program again), and
    TensorFlow's graph only where keras_vit compiles its call with XLA (elsewhere it is keras_vit's
    own row)."""
    if kind == WHOLE_ROWS:
        return dtype == "bfloat16" and not xla_inference.cpu_prefers_xla()
    if kind == ON_GRAPH:
        return xla_inference.cpu_prefers_xla()
    if kind in (ON_OPENVINO, ON_KERAS_OPENVINO):
        return dtype == "float32" or cpu_info.has_bfloat16()
    return kind not in (ON_ONNX, ON_XLA) or dtype == "float32"


def framework_of(kind, keras="tf"):
    """Whose matmul peak a contestant's FLOP/s are compared with (none measured for ONNX Runtime
    and OpenVINO: OpenVINO's square product of 4096 ran at 450-505 GFLOP/s in bfloat16 on the
    2-core Xeon, below the 611-652 its ViT-B/16 graphs reached at batch 8 in the same hour, so it
    is no limit)."""
    if kind.startswith("timm") or kind == ON_TORCH:
        return "torch"
    return {ON_ONNX: "onnxruntime", ON_OPENVINO: "openvino", ON_KERAS_OPENVINO: "openvino"}.get(kind, keras)


def profiled_kind(dtype):
    """keras_vit's contestant whose operations a profile sees for `dtype`: its own call or, where
    keras_vit compiles that call with XLA (whose fusions show neither TensorFlow's operations nor
    oneDNN's kernels), the same call on TensorFlow's graph."""
    return ON_GRAPH if runs_in(ON_GRAPH, dtype) else "keras_vit"


def contestant_name(kind, dtype):
    """The contestant's name with the mode it runs in for `dtype`."""
    if kind == "keras-hub" and not keras_uses_xla(kind, dtype):
        return NAMES[kind].replace("TF+XLA", "TF")
    return NAMES[kind]


def timm_step(kind, shape, image_size, batch, dtype, device="cpu"):
    import torch

    contestants.set_torch_threads()
    model = contestants.timm_model(shape, image_size, NUM_CLASSES).eval().to(device)
    images = torch.from_numpy(shared.synthetic_images(batch, image_size).transpose(0, 3, 1, 2).copy()).to(
        device
    )
    if dtype == "bfloat16":
        model, images = model.bfloat16(), images.bfloat16()
    if kind == "timm-compile":
        model = torch.compile(model)

    def step():
        with torch.inference_mode():
            return model(images).float().cpu().numpy()  # on the host: the step has finished

    return step


def build(kind, shape, image_size, batch, dtype):
    """A step of contestant `kind` (a key of NAMES); keras_vit on PyTorch's backend runs in the
    child process that serves it."""
    if kind == ON_TORCH:
        return harness.ChildStep(_TORCH_SERVER, kind, shape, image_size, batch, dtype)
    if kind == ON_KERAS_OPENVINO:
        return harness.ChildStep(_OPENVINO_SERVER, kind, shape, image_size, batch, dtype)
    if kind == ON_ONNX:
        return onnx_step(onnx_file(shape, image_size), image_size, batch)
    if kind == ON_OPENVINO:
        return openvino_step(onnx_file(shape, image_size), image_size, batch, dtype)
    return local_step(kind, shape, image_size, batch, dtype)


def local_step(kind, shape, image_size, batch, dtype):
    """A step of contestant `kind` built in this process."""
    if kind.startswith("timm"):
        return timm_step(kind, shape, image_size, batch, dtype)
    if kind == ON_TORCH:
        return keras_torch_step(shape, image_size, batch, dtype)
    if kind == ON_KERAS_OPENVINO:
        return keras_openvino_step(shape, image_size, batch, dtype)
    if kind in SWITCHED_OFF:
        return keras_step("keras_vit", shape, image_size, batch, dtype, switched_off=SWITCHED_OFF[kind])
    return keras_step(kind, shape, image_size, batch, dtype)


def kinds(peers, timm_modes, runtimes=()):
    """Contestant kinds in table order: keras_vit, keras_vit on `runtimes`' kinds, the peers."""
    chosen = ["keras_vit", *runtimes] + [p for p in peers if p == "keras-hub"]
    if "timm" in peers:
        chosen += [f"timm-{m}" for m in timm_modes]
    return chosen


def measure_cases(
    cases, kinds_, batch_sizes, dtypes, args, overrides, build_step=None, name=None, keras="tf", skipped=()
):
    """Rows of every (case, batch, dtype) with every contestant, interleaved within each.

    `build_step(kind, shape, image_size, batch, dtype)` and `name(kind, dtype)` default to this
    module's (Keras on TensorFlow); `keras` names the Keras contestants' framework ("tf", "jax");
    a contestant whose (framework, dtype) is in `skipped` is left out."""
    build_step, name = build_step or build, name or contestant_name
    rows = []
    for variant, image_size in cases:
        shape = flops.shape(variant, **overrides)
        per_image = flops.forward(image_size, **shape, num_classes=NUM_CLASSES)["total"]
        for dtype in dtypes:
            for batch in batch_sizes:
                entrants = [
                    harness.Contestant(
                        name(k, dtype),
                        # bound now: the loops move on before interleave calls it
                        lambda k=k, s=shape, i=image_size, b=batch, d=dtype: build_step(k, s, i, b, d),
                        ours=k == "keras_vit",
                        framework=framework_of(k, keras),
                        switched_off=SWITCHED_OFF.get(k),
                    )
                    for k in kinds_
                    if runs_in(k, dtype) and (framework_of(k, keras), dtype) not in skipped
                ]
                times = harness.interleave(entrants, args.repeats, args.min_seconds)
                case = f"{variant} {image_size} px b{batch} {dtype}"
                rows += case_rows(
                    entrants,
                    times,
                    case,
                    batch,
                    per_image,
                    variant=variant,
                    image_size=image_size,
                    dtype=dtype,
                )
    return rows


def case_rows(entrants, times, case, batch, flops_per_image, steps=1, **fields):
    """A row per contestant of one case from its timed rounds, each `steps` batches of `batch`
    images, with keras_vit's speed over each peer's and `fields` added; printed as one line."""
    found = []
    for c in entrants:
        seconds = harness.median(times[c.name]) / steps
        speed = batch / seconds
        found.append(
            {
                "case": case,
                "batch": batch,
                **fields,
                "contestant": c.name,
                "ours": c.ours,
                "images_per_s": speed,
                "latency_ms": 1000 * seconds,
                "repeats_s": times[c.name],
                "compile_s": c.compile_s,
                "gflops_per_s": flops_per_image * speed / 1e9,
                "framework": c.framework,
                **({"switched_off": c.switched_off} if c.switched_off else {}),
            }
        )
    ours = next(r for r in found if r["ours"])
    for r in found:
        r["ours_over_this"] = None if r["ours"] else ours["images_per_s"] / r["images_per_s"]
    harness.print_rates(case, found)
    return found


COLUMNS = (
    ("case", "case", ""),
    ("contestant", "contestant", ""),
    ("img/s", "images_per_s", ".1f"),
    ("ms/batch", "latency_ms", ".1f"),
    ("GFLOP/s", "gflops_per_s", ".0f"),
    ("of matmul peak", "fraction_of_peak", ".0%"),
    ("keras_vit / this", "ours_over_this", ".2f"),
)
MEMORY_COLUMNS = (
    ("case", "case", ""),
    ("contestant", "contestant", ""),
    ("peak RSS MB", "peak_mb", ".0f"),
    ("above imports MB", "above_imports_mb", ".0f"),
    ("keras_vit / this", "ours_over_this", ".2f"),
)


def child(argv):
    """In a child process: build one contestant, run a few steps, print the peak memory as JSON.
    The ONNX Runtime and OpenVINO contestants get the exported file's path as a last argument."""
    kind, variant, image_size, batch, dtype, num_layers, *onnx_path = argv
    # The framework's own memory is not the model's: import it before the baseline.
    if kind.startswith("timm"):
        import timm  # noqa: F401
    elif kind == "keras-hub":
        import keras_hub  # noqa: F401
    elif kind == ON_ONNX:
        import onnxruntime  # noqa: F401
    elif kind == ON_OPENVINO:
        import openvino  # noqa: F401
    else:
        import keras_vit  # noqa: F401
    base = harness.rss_mb()
    if kind == ON_ONNX:
        step = onnx_step(onnx_path[0], int(image_size), int(batch))
    elif kind == ON_OPENVINO:
        step = openvino_step(onnx_path[0], int(image_size), int(batch), dtype)
    else:
        shape = flops.shape(variant, num_layers=int(num_layers))
        step = local_step(kind, shape, int(image_size), int(batch), dtype)
    for _ in range(3):
        step()
    print(json.dumps({"peak_mb": harness.peak_rss_mb(), "above_imports_mb": harness.peak_rss_mb() - base}))


def memory_rows(module, case, kinds_, num_layers):
    """Peak resident memory of each contestant on `case` ("VARIANT:SIZE:BATCH"), one process each."""
    variant, size, batch = case.split(":")
    rows = []
    for kind in [k for k in kinds_ if runs_in(k, "float32")]:  # the case runs in float32
        # Each process loads one framework: Keras on PyTorch's backend keeps TensorFlow out of timm's.
        if kind == ON_KERAS_OPENVINO:
            env = OPENVINO_CHILD_ENV
        else:
            framework = "torch" if framework_of(kind) == "torch" else "tf"
            env = {
                contestants.CHILD_FRAMEWORK: framework,
                "KERAS_BACKEND": "torch" if framework == "torch" else "tensorflow",
            }
        argv = ["--child", kind, variant, size, batch, "float32", str(num_layers or 0)]
        if kind in (ON_ONNX, ON_OPENVINO):  # exported here: the child's peak is the runtime's alone
            argv.append(onnx_file(flops.shape(variant, num_layers=num_layers), int(size)))
        got = harness.run_child(module, argv, env)
        rows.append(
            {"case": f"{variant} {size} px b{batch} float32", "contestant": NAMES.get(kind, kind), **got}
        )
    ours = rows[0].get("above_imports_mb")
    for r in rows[1:]:
        r["ours_over_this"] = ours / r["above_imports_mb"] if ours and r.get("above_imports_mb") else None
    return rows


def add_flags(p):
    p.add_argument("--batch_sizes", default="1,8", help="comma-separated batch sizes (1: latency)")
    p.add_argument("--dtypes", default="float32,bfloat16", help="float32 and/or bfloat16")
    p.add_argument("--num_layers", type=int, default=0, help="override the variants' depth (0: theirs)")
    p.add_argument("--timm_modes", default="eager,compile", help="timm's modes: eager and/or compile")
    p.add_argument("--matmul_size", type=int, default=4096, help="the square matmul that measures the peak")
    p.add_argument("--memory_case", default="ViT-B_16:224:8", help="VARIANT:SIZE:BATCH, or none")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    if argv[:1] == ["--export_onnx"]:
        shape, image_size, path = argv[1:]
        contestants.keras_vit_onnx(json.loads(shape), int(image_size), NUM_CLASSES, path)
        print(json.dumps({"path": path}))
        return None
    if argv[:1] == ["--serve"]:
        return harness.serve(local_step)
    start = time.perf_counter()
    p = harness.parser(__doc__.splitlines()[0], "inference")
    p.add_argument("--cases", default="ViT-Ti_16:224,ViT-B_16:224,ViT-B_16:384", help="VARIANT:SIZE,...")
    p.add_argument(
        "--runtimes",
        default="torch,onnxruntime,openvino,keras-openvino,tf-whole-rows,tf-graph,tf-xla",
        help="keras_vit also on: torch (Keras' PyTorch backend), onnxruntime and openvino (its ONNX "
        "export), keras-openvino (Keras' OpenVINO backend, predict_on_batch), tf-whole-rows "
        "(TensorFlow without inference in parts of the rows, bfloat16), tf-graph (TensorFlow's "
        "graph where keras_vit compiles with XLA itself: x86 without AVX-512), tf-xla "
        "(XLA-compiled, float32), or none",
    )
    add_flags(p)
    args = p.parse_args(argv)
    data = run_inference(args, argv, "inference", parse_cases(args.cases))
    harness.finish(data, args.out, start)


def run_inference(args, argv, name, cases):
    chosen = harness.peers(args.peers)
    notes = [n for n in map(harness.missing_peer, chosen) if n]
    chosen = [p for p in chosen if not harness.missing_peer(p)]
    runtimes, runtime_notes = parse_runtimes(args.runtimes)
    notes += runtime_notes
    kinds_ = kinds(chosen, [m.strip() for m in args.timm_modes.split(",") if m.strip()], runtimes)
    batch_sizes, dtypes = parse_sizes_and_dtypes(args.batch_sizes, args.dtypes)
    for variant, _ in cases:
        check_variant(variant)
    if ON_ONNX in kinds_ and set(dtypes) - {"float32"}:
        notes.append(f"{NAMES[ON_ONNX]} runs float32 only: keras_vit's ONNX export is float32")
    # PyTorch's matmul peak where PyTorch could load before TensorFlow (benchmarks/contestants.py).
    uses_torch = "timm" in chosen or ON_TORCH in kinds_
    frameworks = ["tf"] + (["torch"] if uses_torch and "torch" in sys.modules else [])
    rates = peak.measure(frameworks, n=args.matmul_size, min_seconds=min(0.2, args.min_seconds))
    skipped = peak.without_fast_kernels(rates)
    notes += [skipped[k] for k in skipped if k[1] in dtypes]
    # Without a fast kernel for keras_vit's own dtype on TensorFlow, no row of it can be timed.
    dtypes = [d for d in dtypes if ("tf", d) not in skipped]
    overrides = {"num_layers": args.num_layers}
    settings = {
        "cases": [f"{v}:{s}" for v, s in cases],
        "batch_sizes": batch_sizes,
        "dtypes": dtypes,
        "repeats": args.repeats,
        "num_layers": args.num_layers or None,
        "matmul_size": args.matmul_size,
        "runtimes": [NAMES[k] for k in runtimes] or None,
    }
    data = harness.result(name, argv, settings)
    data["notes"] += notes
    rows = measure_cases(cases, kinds_, batch_sizes, dtypes, args, overrides, skipped=skipped)
    data["matmul_peak_flops"] = rates = peak.best(
        rates, peak.measure(frameworks, n=args.matmul_size, min_seconds=min(0.2, args.min_seconds))
    )
    for r in rows:
        r["fraction_of_peak"] = peak.fraction(rates, r["framework"], r["dtype"], r["gflops_per_s"] * 1e9)
    data["tables"].append(harness.section("Inference", COLUMNS, rows))
    if args.memory_case != "none":
        mem = memory_rows("benchmarks.inference", args.memory_case, kinds_, args.num_layers)
        data["tables"].append(
            harness.section("Peak memory, inference (each in its own process)", MEMORY_COLUMNS, mem)
        )
    return data


if __name__ == "__main__":
    commands.exit_with(main)
