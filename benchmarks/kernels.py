"""Which oneDNN kernels a step runs, on which instruction set, and their share: keras_vit against timm.

TensorFlow and PyTorch both run their CPU matrix products (and some more) on oneDNN, which
under ONEDNN_VERBOSE=1 prints a line per kernel run: the primitive (matmul, softmax, eltwise,
convolution, reorder, ...), its implementation with the instruction set it was built for
(brg_matmul:avx512_core_bf16 on AVX-512 BF16; avx512_core_amx on an AMX Xeon), the data types,
the shapes and the milliseconds. Each side runs in a child process of its own (the variable is
read when oneDNN loads): keras_vit's training step as `python -m trainers.finetune` builds it
(benchmarks.train) or its inference (benchmarks.inference; on an x86 CPU without AVX-512, where
keras_vit compiles that call with XLA, whose products are XLA's own and print no line, its "TF
graph" row, traced without), and timm's in the dtype keras_vit's step runs in (bfloat16 under
torch.autocast in training). After two warm-up steps the lines of `--steps` steps are summed per
kernel and per matmul shape. Operations outside oneDNN
(TensorFlow's own element-wise ops and casts, PyTorch's layer norm) print no line:
`python -m benchmarks.op_profile --step=train` has TensorFlow's whole op table. The times are
wall times inside each kernel: on a loaded machine compare the shares and the kernels, not ms.

    python -m benchmarks.kernels
    python -m benchmarks.kernels --step=inference --batch_size=1 --frameworks=tf
"""

import argparse
import collections
import ctypes
import importlib.util
import math
import re
import subprocess
import sys
import time

# contestants first: it imports PyTorch before anything imports TensorFlow (harness does).
from benchmarks import contestants, flops, harness, inference, shared, train
from keras_vit import commands

FRAMEWORKS = {"tf": "keras_vit TF", "torch": "timm eager"}
_BEGIN, _END = "benchmark-kernels: begin", "benchmark-kernels: end"
KERNEL_COLUMNS = (
    ("contestant", "contestant", ""),
    ("primitive", "primitive", ""),
    ("implementation", "implementation", ""),
    ("data type", "dtype", ""),
    ("calls per step", "calls", ".0f"),
    ("ms per step", "ms", ".1f"),
    ("share", "share", ".1%"),
)
MATMUL_COLUMNS = (
    ("contestant", "contestant", ""),
    ("shapes (src:weights)", "shapes", ""),
    ("data type", "dtype", ""),
    ("calls per step", "calls", ".0f"),
    ("ms per step", "ms", ".1f"),
    ("GFLOP/s", "gflops_per_s", ".0f"),
    ("share of matmul time", "share", ".1%"),
)


def parse(lines, steps):
    """(kernel rows, matmul rows, the ISA line) from ONEDNN_VERBOSE output between the markers."""
    kernels, matmuls = collections.defaultdict(lambda: [0, 0.0]), collections.defaultdict(lambda: [0, 0.0, 0])
    isa, inside = "", False
    for line in lines:
        if line.startswith("onednn_verbose") and ",isa:" in line:
            isa = line.strip().split(",isa:", 1)[1]
        inside = (inside or line.startswith(_BEGIN)) and not line.startswith(_END)
        fields = line.strip().split(",")
        if not inside or len(fields) < 9 or fields[2:4] != ["primitive", "exec"]:
            continue
        primitive, implementation, ms, shapes = (
            fields[5],
            fields[6] or "(gemm)",
            float(fields[-1]),
            fields[-2],
        )
        dtype = _dtype(fields[8])
        kernels[(primitive, implementation, dtype)][0] += 1
        kernels[(primitive, implementation, dtype)][1] += ms
        if primitive in ("matmul", "gemm_api", "inner_product"):
            entry = matmuls[(shapes, dtype)]
            entry[0] += 1
            entry[1] += ms
            entry[2] += matmul_flops(shapes)
    whole = sum(ms for _, ms in kernels.values()) or 1
    kernel_rows = [
        {
            "primitive": p,
            "implementation": i,
            "dtype": d,
            "calls": n / steps,
            "ms": ms / steps,
            "share": ms / whole,
        }
        for (p, i, d), (n, ms) in sorted(kernels.items(), key=lambda kv: -kv[1][1])
    ]
    matmul_whole = sum(ms for _, ms, _ in matmuls.values()) or 1
    matmul_rows = [
        {
            "shapes": s,
            "dtype": d,
            "calls": n / steps,
            "ms": ms / steps,
            "gflops_per_s": flops / ms / 1e6 if ms else None,
            "share": ms / matmul_whole,
        }
        for (s, d), (n, ms, flops) in sorted(matmuls.items(), key=lambda kv: -kv[1][1])
    ]
    return kernel_rows, matmul_rows, isa


def _dtype(descriptors):
    """The source data type of a kernel line's memory descriptors ("src:bf16::blocked..." or
    "src_f32::blocked..."), or the first one named."""
    for part in descriptors.split():
        if part.startswith(("src:", "src_")):
            return part[4:].split(":")[0]
    return descriptors.split(":")[1] if ":" in descriptors else ""


def matmul_flops(shapes):
    """2·batch·M·K·N of a oneDNN matmul's "src:weights" shapes, e.g. 16x197x192:1x192x192
    (the batch axes broadcast), or 2·M·K·N of an inner product's, e.g. mb197ic192oc768."""
    product = re.fullmatch(r"mb(\d+)ic(\d+)oc(\d+)", shapes)
    if product:
        return 2 * math.prod(int(n) for n in product.groups())
    src, weights = ([int(n) for n in part.split("x")] for part in shapes.split(":")[:2])
    batch = max(math.prod(src[:-2]), math.prod(weights[:-2]))
    return 2 * batch * src[-2] * src[-1] * weights[-1]


def child(args):
    """Builds one side's step, warms it up, and runs `--steps` steps between the markers."""
    shape = flops.shape(args.variant, num_layers=args.num_layers)
    step = _build(args, shape)
    step(), step()
    libc = ctypes.CDLL(None)  # oneDNN prints through C's stdout: flush it around the markers
    libc.fflush(None)
    print(_BEGIN, flush=True)
    for _ in range(args.steps):
        step()
    libc.fflush(None)
    print(_END, flush=True)


def _build(args, shape):
    if args.step == "train":
        config = shared.finetune_config(
            args.variant,
            args.image_size,
            args.batch_size,
            args.num_layers,
            mixed_precision=args.mixed_precision,
        )
        if args.child == "tf":
            return shared.trainer_step(config, 1)
        dtype = shared.trainer_mode(config)[1]
        return train.timm_step(shape, args.image_size, args.batch_size, 1, compiled=False, dtype=dtype)
    dtype = args.inference_dtype
    if args.child == "tf":
        kind = inference.profiled_kind(dtype)
        return inference.local_step(kind, shape, args.image_size, args.batch_size, dtype)
    return inference.timm_step("timm-eager", shape, args.image_size, args.batch_size, dtype)


def side_name(framework, args):
    """The contestant whose kernels `framework`'s side shows."""
    if framework == "tf" and args.step == "inference":
        return inference.contestant_name(inference.profiled_kind(args.inference_dtype), args.inference_dtype)
    return FRAMEWORKS[framework]


def run_side(framework, argv):
    """The kernel lines of `framework`'s steps, from a child process with ONEDNN_VERBOSE=1."""
    env = harness.child_env({"ONEDNN_VERBOSE": "1", contestants.CHILD_FRAMEWORK: framework})
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.kernels", "--child", framework, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=harness.ROOT,
    )
    if proc.returncode:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"error: the {framework} side exited with {proc.returncode}: {tail}")
    return proc.stdout.splitlines()


def parse_args(argv):
    p = harness.parser(__doc__.splitlines()[0], "kernels")
    p.add_argument("--step", default="train", choices=("train", "inference"))
    p.add_argument("--variant", default="ViT-Ti_16", help="a plain ViT variant")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--num_layers", type=int, default=0, help="override the variant's depth (0: its own)")
    p.add_argument("--steps", type=int, default=2, help="steps whose kernels are summed (after two warm-ups)")
    p.add_argument(
        "--mixed_precision",
        default="auto",
        choices=("auto", "none", "bfloat16"),
        help="training: keras_vit's --mixed_precision; timm runs in the dtype it resolves to",
    )
    p.add_argument("--inference_dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--frameworks", default="tf,torch", help="tf (keras_vit) and/or torch (timm)")
    p.add_argument("--child", choices=tuple(FRAMEWORKS), help=argparse.SUPPRESS)  # the side a child runs
    args = p.parse_args(argv)
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    if not args.frameworks or set(args.frameworks) - set(FRAMEWORKS):
        p.error(f"--frameworks: choose tf and/or torch, got {','.join(args.frameworks) or 'none'}")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.child:
        return child(args)
    start = time.perf_counter()
    settings = {k: getattr(args, k) for k in ("step", "variant", "image_size", "batch_size", "steps")}
    data = harness.result("kernels", argv, settings)
    kernel_rows, matmul_rows = [], []
    for framework in args.frameworks:
        name = side_name(framework, args)
        # Not harness.missing_peer alone: the sides run in children, so TensorFlow here is no bar.
        absent = [m for m in harness.PEER_MODULES["timm"] if importlib.util.find_spec(m) is None]
        if framework == "torch" and absent:
            data["notes"].append(harness.missing_peer("timm"))
            continue
        kernels, matmuls, isa = parse(run_side(framework, argv), args.steps)
        kernel_rows += [{"contestant": name, **r} for r in kernels]
        matmul_rows += [{"contestant": name, **r} for r in matmuls[:12]]
        data["notes"].append(f"{name}: oneDNN's ISA here: {isa or 'not reported'}")
    title = f"{args.variant} {args.image_size} px, batch {args.batch_size}, {args.step}"
    data["tables"].append(harness.section(f"oneDNN kernels per step, {title}", KERNEL_COLUMNS, kernel_rows))
    data["tables"].append(harness.section(f"Matrix products by shape, {title}", MATMUL_COLUMNS, matmul_rows))
    harness.finish(data, args.out, start)


if __name__ == "__main__":
    commands.exit_with(main)
