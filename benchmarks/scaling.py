"""Inference images/s and tokens/s as the resolution grows, with a plot next to the JSON.

The paper (Dosovitskiy et al. 2021, section 4.5 and appendix D.5): a ViT's cost grows about
linearly with the number of patches until the attention's T^2 terms dominate. Each size is
measured as benchmarks.inference measures it (peers in turns), with the share of FLOPs spent
in the two attention matmuls beside it; the PNG plots time per image and per token.

    python -m benchmarks.scaling
    python -m benchmarks.scaling --variant=ViT-Ti_16 --sizes=224,384 --batch_size=4
"""

import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import contestants  # noqa: E402, F401, I001  (first: it imports PyTorch before TensorFlow)
from benchmarks import flops, harness, inference  # noqa: E402
from keras_vit import commands  # noqa: E402

COLUMNS = (
    ("size", "image_size", "d"),
    ("tokens", "tokens", "d"),
    ("contestant", "contestant", ""),
    ("img/s", "images_per_s", ".2f"),
    ("tokens/s", "tokens_per_s", ".0f"),
    ("attention FLOPs", "attention_share", ".0%"),
    ("of matmul peak", "fraction_of_peak", ".0%"),
    ("keras_vit / this", "ours_over_this", ".2f"),
)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name in dict.fromkeys(r["contestant"] for r in rows):
        mine = [r for r in rows if r["contestant"] == name]
        tokens = [r["tokens"] for r in mine]
        left.plot(tokens, [1000 / r["images_per_s"] for r in mine], "o-", label=name)
        right.plot(tokens, [1e6 / r["tokens_per_s"] for r in mine], "o-", label=name)
    left.set(xlabel="tokens per image", ylabel="ms per image", title="time per image")
    right.set(xlabel="tokens per image", ylabel="µs per token", title="time per token (flat: linear)")
    left.legend()
    figure.tight_layout()
    figure.savefig(path + ".tmp.png", dpi=100)
    os.replace(path + ".tmp.png", path)  # atomic, like the JSON
    plt.close(figure)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    start = time.perf_counter()
    p = harness.parser(__doc__.splitlines()[0], "scaling")
    p.add_argument("--variant", default="ViT-B_16", help="a plain ViT variant")
    p.add_argument("--sizes", default="224,384,512", help="comma-separated image sizes")
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--num_layers", type=int, default=0, help="override the variant's depth (0: its own)")
    p.add_argument("--timm_modes", default="eager", help="timm's modes: eager and/or compile")
    p.add_argument("--matmul_size", type=int, default=4096, help="the square matmul that measures the peak")
    p.add_argument("--plot", default="", help="the PNG (default: the JSON's path with .png)")
    args = p.parse_args(argv)
    args.batch_sizes, args.dtypes, args.memory_case = str(args.batch_size), "float32", "none"
    args.runtimes = "none"  # keras_vit's own runtimes are compared by benchmarks.inference
    if not all(s.strip().isdigit() for s in args.sizes.split(",")):
        p.error(f"--sizes={args.sizes}: give image sizes in pixels, e.g. 224,384,512")
    cases = [(args.variant, int(s)) for s in args.sizes.split(",")]
    data = inference.run_inference(args, argv, "scaling", cases)
    rows = data["tables"][0]["rows"]
    shape = flops.shape(args.variant, num_layers=args.num_layers)
    for r in rows:
        parts = flops.forward(r["image_size"], **shape, num_classes=inference.NUM_CLASSES)
        r["tokens"] = flops.tokens(r["image_size"], shape["patch_size"])
        r["tokens_per_s"] = r["tokens"] * r["images_per_s"]
        r["attention_share"] = parts["attention"] / parts["total"]
    data["tables"][0] = harness.section(f"Scaling, {args.variant}, batch {args.batch_size}", COLUMNS, rows)
    path = args.plot or os.path.splitext(args.out)[0] + ".png"
    harness.fileio.makedirs(os.path.dirname(os.path.abspath(path)))
    plot(rows, path)
    data["plot"] = os.path.basename(path)
    harness.finish(data, args.out, start)


if __name__ == "__main__":
    commands.exit_with(main)
