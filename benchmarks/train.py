"""Training images/s of the trainers' own step against keras-hub's model.fit and timm, same run.

keras_vit: `trainers.loop.TensorFlowTrainer` built by trainers.training for the configuration
`python -m trainers.finetune` picks (its defaults: optimizer, clipping, --mixed_precision=auto,
--jit_compile=auto, accumulation), with only the model, image size and batch set here, so a
change of a default shows here; further rows force XLA on, and float32 without XLA, where those
differ from the defaults' choice. keras-hub: ViTImageClassifier under model.fit (XLA in
float32; in bfloat16 without, as XLA's CPU backend has no fast bfloat16 matmul); timm: an eager
and a torch.compile step (in bfloat16 under torch.autocast). The peers run in float32, and also
in bfloat16 where our defaults chose it. The same trainer on the jax engine (`trainers.finetune
--engine=jax`, its own defaults) runs in a child process (benchmarks/jax_trainer.py), as Keras
fixes its backend per process. All: SGD with momentum 0.9, gradient global-norm clip 1, softmax
cross-entropy, 37 classes, random images.

    pip install -e ".[bench]"
    python -m benchmarks.train
    python -m benchmarks.train --variant=ViT-S_16 --batch_size=32 --repeats=3
"""

import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import contestants  # noqa: E402, I001  (first: it imports PyTorch before TensorFlow)
from benchmarks import flops, harness, jax_trainer, peak, shared  # noqa: E402
from keras_vit import commands  # noqa: E402

# keras_vit rows: the finetune defaults, then the same with one setting forced.
OURS = {
    "keras_vit": {},
    "keras_vit-xla": {"jit_compile": "true"},
    "keras_vit-float32": {"mixed_precision": "none", "jit_compile": "false"},
}
# The trainer on the jax engine (its finetune defaults), timed in a child process.
JAX = "keras_vit-jax"
PEER_LABELS = {
    "keras-hub": "keras-hub fit TF+XLA",
    "keras-hub-bfloat16": "keras-hub fit TF bfloat16",
    "timm-eager": "timm eager",
    "timm-compile": "timm torch.compile",
    "timm-eager-bfloat16": "timm eager bfloat16",
    "timm-compile-bfloat16": "timm torch.compile bfloat16",
}


def _ours_config(kind, args):
    settings = {"mixed_precision": args.mixed_precision, **({"engine": "jax"} if kind == JAX else OURS[kind])}
    return shared.finetune_config(args.variant, args.image_size, args.batch_size, args.num_layers, **settings)


def our_modes(args):
    """{keras_vit's kind: (row name, compute dtype)}, each decided once as a run decides it (each
    decision builds a run's strategy)."""
    return {kind: shared.trainer_mode(_ours_config(kind, args)) for kind in (*OURS, JAX)}


def kind_dtype(kind, modes):
    """The compute dtype of `kind`'s row: keras_vit's from `modes` (our_modes), a peer's from its kind."""
    if kind in modes:
        return modes[kind][1]
    return peer_dtype(kind)


def peer_dtype(kind):
    return "bfloat16" if kind.endswith("-bfloat16") else "float32"


def keras_hub_step(shape, image_size, batch, steps, dtype="float32"):
    import keras
    import tensorflow as tf

    model = contestants.keras_model("keras-hub", shape, image_size, shared.NUM_CLASSES, dtype)
    model.compile(
        optimizer=keras.optimizers.SGD(shared.LEARNING_RATE, momentum=0.9, global_clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=dtype == "float32",
    )
    # Each timed call is a `fit`, which makes a new iterator of the dataset, and an iterator with
    # tf.data's autotuning on waits at its end for the autotuning thread, whose period grows to
    # 5.12 s: a call of 2.6 s of steps took 5.12 s (2026-11-29, the family-25 EPYC). A user's fit
    # of a whole epoch pays that once; this constant batch needs no tuning, so it runs without.
    options = tf.data.Options()
    options.autotune.enabled = False
    batch_data = shared.synthetic_batch(batch, image_size)
    dataset = tf.data.Dataset.from_tensors(batch_data).repeat().with_options(options)
    return lambda: model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)


def timm_step(shape, image_size, batch, steps, compiled, device="cpu", dtype="float32"):
    """timm's training step; in bfloat16 under torch.autocast, PyTorch's mixed precision."""
    import torch

    contestants.set_torch_threads()
    model = contestants.timm_model(shape, image_size, shared.NUM_CLASSES).train().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=shared.LEARNING_RATE, momentum=0.9)
    forward = torch.compile(model) if compiled else model
    images, labels = shared.synthetic_batch(batch, image_size)
    images = torch.from_numpy(images.transpose(0, 3, 1, 2).copy()).to(device)
    labels = torch.from_numpy(labels.astype("int64")).to(device)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bfloat16")

    def step():
        for _ in range(steps):
            with autocast:
                loss = torch.nn.functional.cross_entropy(forward(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        return loss.item()

    return step


def _jax_args(args, steps):
    """What benchmarks.jax_trainer builds the jax engine's trainer from."""
    return (args.variant, args.image_size, args.batch_size, args.num_layers, args.mixed_precision, steps)


def build(kind, args, steps):
    if kind in OURS:
        return shared.trainer_step(_ours_config(kind, args), steps)
    if kind == JAX:
        return jax_trainer.step(*_jax_args(args, steps))
    shape = flops.shape(args.variant, num_layers=args.num_layers)
    dtype = peer_dtype(kind)
    if kind.startswith("keras-hub"):
        return keras_hub_step(shape, args.image_size, args.batch_size, steps, dtype)
    compiled = kind.startswith("timm-compile")
    return timm_step(shape, args.image_size, args.batch_size, steps, compiled=compiled, dtype=dtype)


def names(args, modes):
    """{kind: the row's label}, keras_vit's from `modes` (our_modes) with the flags that chose it."""
    defaults = "finetune defaults" + (
        "" if args.mixed_precision == "auto" else f", --mixed_precision={args.mixed_precision}"
    )
    why = {
        "keras_vit": defaults,
        "keras_vit-xla": "--jit_compile=true",
        "keras_vit-float32": "--mixed_precision=none --jit_compile=false",
    }
    why[JAX] = "trainers.finetune --engine=jax"
    ours = {kind: f"{modes[kind][0]} ({why[kind]})" for kind in (*OURS, JAX)}
    return {**ours, **PEER_LABELS}


def chosen_kinds(args, peers, modes):
    """keras_vit's defaults, then each forced setting whose mode (in `modes`, our_modes) no row
    before it has, then the same trainer on the jax engine (where it can run), then the peers in
    float32 and, where the defaults chose bfloat16, in bfloat16 too."""
    first_of_mode = {}
    for kind in OURS:
        first_of_mode.setdefault(modes[kind], kind)
    kinds = list(first_of_mode.values())
    if args.jax_engine == "true" and not jax_trainer.missing():
        kinds.append(JAX)
    suffixes = [""] + (["-bfloat16"] if modes["keras_vit"][1] == "bfloat16" else [])
    if "keras-hub" in peers:
        kinds += [f"keras-hub{s}" for s in suffixes]
    if "timm" in peers:
        modes = [m.strip() for m in args.timm_modes.split(",") if m.strip()]
        kinds += [f"timm-{m}{s}" for s in suffixes for m in modes]
    return kinds


COLUMNS = (
    ("contestant", "contestant", ""),
    ("img/s", "images_per_s", ".1f"),
    ("ms/step", "step_ms", ".0f"),
    ("GFLOP/s", "gflops_per_s", ".0f"),
    ("of matmul peak", "fraction_of_peak", ".0%"),
    ("first call s", "compile_s", ".0f"),
    ("keras_vit / this", "ours_over_this", ".2f"),
)
MEMORY_COLUMNS = (
    ("contestant", "contestant", ""),
    ("peak RSS MB", "peak_mb", ".0f"),
    ("above imports MB", "above_imports_mb", ".0f"),
    ("keras_vit / this", "ours_over_this", ".2f"),
)


def parse(argv):
    p = harness.parser(__doc__.splitlines()[0], "train")
    p.add_argument("--variant", default="ViT-Ti_16", help="a plain ViT variant")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--num_layers", type=int, default=0, help="override the variant's depth (0: its own)")
    p.add_argument("--steps_per_call", type=int, default=4, help="training steps per timed call")
    p.add_argument(
        "--mixed_precision",
        default="auto",
        choices=("auto", "none", "bfloat16"),
        help="keras_vit's --mixed_precision (auto: what trainers.finetune picks on this machine)",
    )
    p.add_argument("--timm_modes", default="eager,compile", help="timm's modes: eager and/or compile")
    p.add_argument("--matmul_size", type=int, default=4096, help="the square matmul that measures the peak")
    p.add_argument("--memory", default="true", choices=("true", "false"), help="peak memory, a process each")
    p.add_argument(
        "--jax_engine",
        default="true",
        choices=("true", "false"),
        help="also time the trainer on the jax engine (in a child process)",
    )
    args = p.parse_args(argv)
    if args.variant not in flops.keras_vit.VARIANTS or args.variant.startswith("R"):
        p.error(f"unknown or hybrid variant {args.variant!r}: use a plain ViT, e.g. ViT-Ti_16")
    return args


def child(argv):
    """One contestant's training steps in this process; prints its peak memory as JSON."""
    import json

    kind, rest = argv[0], argv[1:]
    args = parse(rest)
    if kind.startswith("timm"):
        import timm  # noqa: F401
    elif kind.startswith("keras-hub"):
        import keras_hub  # noqa: F401
    else:
        import trainers.training  # noqa: F401
    base = harness.rss_mb()
    # This child runs Keras on the jax engine's backend for JAX's row: its trainer is built here.
    step = jax_trainer.build(*_jax_args(args, 1)) if kind == JAX else build(kind, args, 1)
    for _ in range(3):
        step()
    print(json.dumps({"peak_mb": harness.peak_rss_mb(), "above_imports_mb": harness.peak_rss_mb() - base}))


def measure(args, kinds, dtypes, label):
    """The timed rows of `kinds` (ours first), each named by `label` with its compute dtype from
    `dtypes`."""
    shape = flops.shape(args.variant, num_layers=args.num_layers)
    per_image = flops.train_step(args.image_size, **shape, num_classes=shared.NUM_CLASSES)
    entrants = [
        harness.Contestant(
            label[k],
            lambda k=k: build(k, args, args.steps_per_call),
            ours=k == "keras_vit",
            framework=framework_of(k),
        )
        for k in kinds
    ]
    times = harness.interleave(entrants, args.repeats, args.min_seconds)
    jax_trainer.close()
    images_per_call = args.batch_size * args.steps_per_call
    return [
        {
            "contestant": c.name,
            "ours": c.ours,
            "images_per_s": images_per_call / harness.median(times[c.name]),
            "step_ms": 1000 * harness.median(times[c.name]) / args.steps_per_call,
            "repeats_s": times[c.name],
            "compile_s": c.compile_s,
            "flops_per_image": per_image,
            "dtype": dtypes[k],
        }
        for k, c in zip(kinds, entrants)
    ]


def framework_of(kind):
    """Whose matmul peak a row's FLOP/s are compared with."""
    if kind.startswith("timm"):
        return "torch"
    return "jax" if kind == JAX else "tf"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    start = time.perf_counter()
    args = parse(argv)
    chosen = harness.peers(args.peers)
    notes = [n for n in map(harness.missing_peer, chosen) if n]
    chosen = [p for p in chosen if not harness.missing_peer(p)]
    if args.jax_engine == "true" and jax_trainer.missing():
        notes.append(jax_trainer.missing())
    with_jax = args.jax_engine == "true" and not jax_trainer.missing()
    frameworks = ["tf"] + (["jax"] if with_jax else []) + (["torch"] if "timm" in chosen else [])
    rates = peak.measure(frameworks, n=args.matmul_size, min_seconds=min(0.2, args.min_seconds))
    settings = {k: getattr(args, k) for k in ("variant", "image_size", "batch_size", "num_layers", "repeats")}
    data = harness.result("train", argv, {**settings, "steps_per_call": args.steps_per_call})
    data["notes"] += notes
    skipped = peak.without_fast_kernels(rates)
    # The rows, their names and compute dtypes, decided here once for the notes, the timing and
    # the memory; a peer without a fast kernel for its dtype is left out, with the note why.
    modes = our_modes(args)
    label = names(args, modes)
    kinds = chosen_kinds(args, chosen, modes)
    dtypes = {k: kind_dtype(k, modes) for k in kinds}
    wanted = {(framework_of(k), dtypes[k]) for k in kinds if k not in OURS}
    data["notes"] += [note for key, note in skipped.items() if key in wanted]
    kinds = [k for k in kinds if k in OURS or (framework_of(k), dtypes[k]) not in skipped]
    rows = measure(args, kinds, dtypes, label)
    harness.print_rates("timed", rows)  # the memory rows after them take minutes more
    data["matmul_peak_flops"] = rates = peak.best(
        rates, peak.measure(frameworks, n=args.matmul_size, min_seconds=min(0.2, args.min_seconds))
    )
    ours = rows[0]["images_per_s"]
    for kind, r in zip(kinds, rows):
        r["gflops_per_s"] = r["flops_per_image"] * r["images_per_s"] / 1e9
        r["fraction_of_peak"] = peak.fraction(rates, framework_of(kind), r["dtype"], r["gflops_per_s"] * 1e9)
        r["ours_over_this"] = None if r["ours"] else ours / r["images_per_s"]
    title = f"Training step, {args.variant} {args.image_size} px, batch {args.batch_size}"
    data["tables"].append(harness.section(title, COLUMNS, rows))
    if args.memory == "true":
        data["tables"].append(
            harness.section(
                "Peak memory, training (each in its own process)",
                MEMORY_COLUMNS,
                memory_rows(kinds, argv, label),
            )
        )
    harness.finish(data, args.out, start)


def memory_rows(kinds, argv, label):
    rows = []
    for kind in kinds:
        framework = framework_of(kind)
        env = {
            contestants.CHILD_FRAMEWORK: framework,
            "KERAS_BACKEND": {"torch": "torch", "jax": "jax"}.get(framework, "tensorflow"),
        }
        rows.append(
            {
                "contestant": label[kind],
                **harness.run_child("benchmarks.train", ["--child", kind, *argv], env),
            }
        )
    ours = rows[0].get("above_imports_mb")
    for r in rows[1:]:
        r["ours_over_this"] = ours / r["above_imports_mb"] if ours and r.get("above_imports_mb") else None
    return rows


if __name__ == "__main__":
    commands.exit_with(main)
