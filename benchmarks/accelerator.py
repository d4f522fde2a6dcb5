"""Inference and training images/s on a GPU: keras_vit and keras-hub on Keras' JAX backend, timm on PyTorch.

TensorFlow is not needed here: the Keras contestants run on Keras' JAX backend, each step one
XLA program (`jax.jit` over the model's stateless call; in training the same stateless step that
Keras' own `fit` compiles on JAX: loss, gradients, global-norm clip 1, SGD with momentum 0.9,
state buffers donated). timm runs eager and under `torch.compile`. bfloat16: Keras'
mixed_bfloat16 policy against timm's weights cast with .bfloat16() (inference) or
torch.autocast (training); float32: both sides let the GPU's TF32 tensor cores do the matmuls
(JAX's default on GPUs, torch.backends.cuda.matmul.allow_tf32 for PyTorch). Each row's model
FLOP utilisation is given against the matmul limit measured in the same run and against the
GPU's datasheet peak. Beside the bare step, training times the trainer itself: the step of
`trainers.finetune --engine=jax` (its fine-tuning defaults, in the case's dtype) as its run calls
it, fed by its own input path with one synthetic batch, in a child process
(benchmarks/jax_trainer.py). That trainer needs TensorFlow (tf.data feeds it): without it the
row is left out and a note says so. Without a GPU it runs on the CPU (the tests do, at a tiny size).

    pip install "jax[cuda13]" -e ".[bench]"
    python -m benchmarks.accelerator
    python -m benchmarks.accelerator --cases=ViT-B_16:224 --batch_sizes=1,128 --train_cases=none
"""

import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# JAX would otherwise take 75% of the GPU's memory at start, leaving PyTorch's contestants short.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from benchmarks import contestants  # noqa: E402, I001  (first: it imports PyTorch before anything else)
from benchmarks import flops, harness, inference, jax_trainer, peak, shared, train  # noqa: E402
from keras_vit import commands, fused_attention  # noqa: E402

NAMES = {
    "keras_vit": "keras_vit JAX+XLA",
    "keras-hub": "keras-hub JAX+XLA",
    "timm-eager": "timm eager",
    "timm-compile": "timm torch.compile",
    "keras_vit-trainer": jax_trainer.NAME,
}
# The trainer's --mixed_precision for a case's dtype (float32: no mixed precision).
TRAINER_PRECISION = {"bfloat16": "bfloat16", "float32": "none"}
# Dense tensor-core peaks from NVIDIA's datasheets (SXM parts): bfloat16, and TF32 for float32.
DATASHEET_PEAK = {
    "H100": {"bfloat16": 989.4e12, "float32": 494.7e12},
    "H200": {"bfloat16": 989.4e12, "float32": 494.7e12},
    "A100": {"bfloat16": 312e12, "float32": 156e12},
}
COLUMNS = (
    ("case", "case", ""),
    ("contestant", "contestant", ""),
    ("img/s", "images_per_s", ".1f"),
    ("ms/batch", "latency_ms", ".2f"),
    ("TFLOP/s", "tflops_per_s", ".1f"),
    ("of matmul limit", "fraction_of_peak", ".0%"),
    ("MFU (datasheet)", "mfu", ".0%"),
    ("keras_vit / this", "ours_over_this", ".2f"),
)
TRAIN_COLUMNS = tuple(c if c[1] != "latency_ms" else ("ms/step", "latency_ms", ".1f") for c in COLUMNS)


def torch_device():
    """ "cuda" where PyTorch sees a GPU, else "cpu"; float32 matmuls may use TF32 there."""
    if not contestants.TORCH_FIRST:
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    return "cuda"


def jax_platform():
    import jax

    return jax.devices()[0].platform


def keras_inference_step(kind, shape, image_size, batch, dtype):
    import jax

    model = contestants.keras_model(kind, shape, image_size, inference.NUM_CLASSES, dtype)
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
    )
    images = jax.device_put(shared.synthetic_images(batch, image_size))
    forward = jax.jit(lambda s, x: model.stateless_call(*s, x, training=False)[0])
    return lambda: forward(state, images).block_until_ready()


def keras_train_step(kind, shape, image_size, batch, dtype, steps):
    """`steps` of Keras' stateless training step under one jax.jit, as `model.fit` runs it on JAX."""
    import jax
    import keras

    model = contestants.keras_model(kind, shape, image_size, shared.NUM_CLASSES, dtype)
    optimizer = keras.optimizers.SGD(shared.LEARNING_RATE, momentum=0.9, global_clipnorm=1.0)
    optimizer.build(model.trainable_variables)
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return cross_entropy(y, keras.ops.cast(logits, "float32")), non_trainable

    gradients = jax.value_and_grad(loss, has_aux=True)

    def one_step(state, x, y):
        trainable, non_trainable, slots = state
        (value, non_trainable), grads = gradients(trainable, non_trainable, x, y)
        trainable, slots = optimizer.stateless_apply(slots, grads, trainable)
        return value, (trainable, non_trainable, slots)

    compiled = jax.jit(one_step, donate_argnums=0)
    held = {
        "state": tuple(
            [v.value for v in variables]
            for variables in (model.trainable_variables, model.non_trainable_variables, optimizer.variables)
        )
    }
    images, labels = jax.device_put(shared.synthetic_batch(batch, image_size))

    def step():
        for _ in range(steps):
            value, held["state"] = compiled(held["state"], images, labels)
        return float(value)

    return step


def inference_step(kind, shape, image_size, batch, dtype):
    if kind.startswith("timm"):
        return inference.timm_step(kind, shape, image_size, batch, dtype, device=torch_device())
    return keras_inference_step(kind, shape, image_size, batch, dtype)


def train_step(kind, shape, image_size, batch, dtype, steps, variant=None, num_layers=0):
    """A contestant's `steps` training steps per call; the trainer's is built from the variant's
    name (num_layers: its depth override), as the trainers build it."""
    if kind == "keras_vit-trainer":
        return jax_trainer.step(variant, image_size, batch, num_layers, TRAINER_PRECISION[dtype], steps)
    if kind.startswith("timm"):
        compiled = kind == "timm-compile"
        return train.timm_step(shape, image_size, batch, steps, compiled, device=torch_device(), dtype=dtype)
    return keras_train_step(kind, shape, image_size, batch, dtype, steps)


def parse_train_cases(text):
    """--train_cases: ViT-B_16:224:128,... -> [("ViT-B_16", 224, 128)]; "none" -> []."""
    if text.strip() == "none":
        return []
    found = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts[1:]):
            raise SystemExit(
                f"error: --train_cases entry {item!r}: write VARIANT:IMAGE_SIZE:BATCH, e.g. ViT-B_16:224:128"
            )
        found.append((parts[0], int(parts[1]), int(parts[2])))
    return found


def training_kinds(kinds_):
    """The training table's contestants: the bare step, then the trainer itself (where it can
    run here), then the peers."""
    if "keras_vit" not in kinds_ or jax_trainer.missing():
        return list(kinds_)
    at = kinds_.index("keras_vit") + 1
    return [*kinds_[:at], "keras_vit-trainer", *kinds_[at:]]


def measure_training(train_cases, kinds_, dtypes, args):
    rows = []
    for variant, image_size, batch in train_cases:
        shape = flops.shape(variant, num_layers=args.num_layers)
        per_image = flops.train_step(image_size, **shape, num_classes=shared.NUM_CLASSES)
        for dtype in dtypes:
            entrants = [
                harness.Contestant(
                    NAMES[k],
                    # bound now: the loops move on before interleave calls it
                    lambda k=k, s=shape, i=image_size, b=batch, d=dtype, v=variant: train_step(
                        k, s, i, b, d, args.steps_per_call, variant=v, num_layers=args.num_layers
                    ),
                    ours=k == "keras_vit",
                    framework="torch" if k.startswith("timm") else "jax",
                )
                for k in kinds_
            ]
            times = harness.interleave(entrants, args.repeats, args.min_seconds)
            case = f"{variant} {image_size} px b{batch} {dtype}"
            rows += inference.case_rows(
                entrants, times, case, batch, per_image, steps=args.steps_per_call, dtype=dtype
            )
    return rows


def attention_check(layers=2, batch=4):
    """{"logits": relative difference, "gradients": ...} of keras_vit (B/16 width, `layers` blocks,
    mixed_bfloat16, a random head) with its attention as it runs here against Keras' own choice
    (XLA's unfused attention in training, where JAX refuses cuDNN's kernel for 197 tokens)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    model = contestants.keras_model(
        "keras_vit", flops.shape("ViT-B_16", num_layers=layers), 224, 10, "bfloat16"
    )
    rng = np.random.default_rng(1)
    for v in model.trainable_variables:
        if "head" in v.path:  # zero at the start, which would hide every difference
            v.assign(rng.normal(0, 0.02, v.shape))
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    images = jnp.asarray(rng.uniform(-1, 1, (batch, 224, 224, 3)), "float32")

    def logits(params):
        return model.stateless_call(params, non_trainable, images, training=True)[0].astype("float32")

    def run():
        out = jax.jit(logits)(trainable)
        grads = jax.jit(jax.grad(lambda p: jnp.sum(logits(p) * jnp.arange(10.0))))(trainable)
        return np.asarray(out), np.concatenate([np.asarray(g, "float32").ravel() for g in grads])

    fused = run()
    needs_padding = fused_attention.needs_padding_for_flash
    fused_attention.needs_padding_for_flash = lambda *_: False
    try:
        reference = run()
    finally:
        fused_attention.needs_padding_for_flash = needs_padding
    return {
        name: float(np.linalg.norm(a - b) / np.linalg.norm(b))
        for name, a, b in zip(("logits", "gradients"), fused, reference)
    }


def datasheet_peak(name):
    """{dtype: FLOP/s} of the GPU named `name` (nvidia-smi's name), or {} if not in the table."""
    return next((peaks for model, peaks in DATASHEET_PEAK.items() if model in (name or "")), {})


def utilisation(rows, rates, gpu):
    sheet = datasheet_peak(gpu)
    for r in rows:
        r["tflops_per_s"] = r["gflops_per_s"] / 1e3
        r["fraction_of_peak"] = peak.fraction(rates, r["framework"], r["dtype"], r["gflops_per_s"] * 1e9)
        r["mfu"] = r["gflops_per_s"] * 1e9 / sheet[r["dtype"]] if r["dtype"] in sheet else None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    start = time.perf_counter()
    p = harness.parser(__doc__.splitlines()[0], "accelerator")
    p.add_argument(
        "--cases",
        default="ViT-B_16:224,ViT-B_16:384,ViT-L_16:224",
        help="inference: VARIANT:SIZE,... or none",
    )
    p.add_argument("--batch_sizes", default="1,128", help="inference batch sizes (1: latency)")
    p.add_argument("--dtypes", default="bfloat16,float32", help="bfloat16 and/or float32 (TF32 matmuls)")
    p.add_argument("--train_cases", default="ViT-B_16:224:128", help="VARIANT:SIZE:BATCH,... or none")
    p.add_argument("--steps_per_call", type=int, default=8, help="training steps per timed call")
    p.add_argument("--num_layers", type=int, default=0, help="override the variants' depth (0: theirs)")
    p.add_argument("--timm_modes", default="eager,compile", help="timm's modes: eager and/or compile")
    p.add_argument("--matmul_size", type=int, default=8192, help="the square matmul that measures the limit")
    args = p.parse_args(argv)
    cases = [] if args.cases.strip() == "none" else inference.parse_cases(args.cases)
    train_cases = parse_train_cases(args.train_cases)
    batch_sizes, dtypes = inference.parse_sizes_and_dtypes(args.batch_sizes, args.dtypes)
    for variant in [v for v, _ in cases] + [v for v, _, _ in train_cases]:
        inference.check_variant(variant)
    chosen = harness.peers(args.peers)
    notes = [n for n in map(harness.missing_peer, chosen) if n]
    chosen = [p for p in chosen if not harness.missing_peer(p)]
    kinds_ = inference.kinds(chosen, [m.strip() for m in args.timm_modes.split(",") if m.strip()])
    device = torch_device() if "timm" in chosen else "cpu"
    frameworks = ["jax"] + (["torch"] if "timm" in chosen else [])
    measure_limit = lambda: peak.measure(  # noqa: E731
        frameworks, n=args.matmul_size, min_seconds=min(0.2, args.min_seconds), torch_device=device
    )
    rates = measure_limit()
    settings = {
        "cases": [f"{v}:{s}" for v, s in cases],
        "batch_sizes": batch_sizes,
        "dtypes": dtypes,
        "train_cases": [f"{v}:{s}:{b}" for v, s, b in train_cases],
        "steps_per_call": args.steps_per_call,
        "repeats": args.repeats,
        "num_layers": args.num_layers or None,
        "matmul_size": args.matmul_size,
    }
    data = harness.result("accelerator", argv, settings)
    data["machine"]["accelerator"] = gpu = harness.accelerator()
    data["notes"] += notes
    if "keras_vit" in kinds_ and jax_platform() == "gpu":
        data["attention_check"] = check = attention_check()
        data["notes"].append(
            "keras_vit's attention on this GPU against Keras' own choice, B/16 width, 2 blocks, bfloat16: "
            f"relative difference {check['logits']:.1e} in the logits, "
            f"{check['gradients']:.1e} in the gradients"
        )
    rows = inference.measure_cases(
        cases,
        kinds_,
        batch_sizes,
        dtypes,
        args,
        {"num_layers": args.num_layers},
        build_step=inference_step,
        name=lambda k, _: NAMES[k],
        keras="jax",
    )
    if train_cases and "keras_vit" in kinds_ and jax_trainer.missing():
        data["notes"].append(jax_trainer.missing())
    train_rows = measure_training(train_cases, training_kinds(kinds_), dtypes, args)
    jax_trainer.close()
    data["matmul_peak_flops"] = rates = peak.best(rates, measure_limit())
    utilisation(rows + train_rows, rates, gpu)
    if rows:
        data["tables"].append(harness.section("Inference", COLUMNS, rows))
    if train_rows:
        data["tables"].append(harness.section("Training step", TRAIN_COLUMNS, train_rows))
    harness.finish(data, args.out, start)


if __name__ == "__main__":
    commands.exit_with(main)
