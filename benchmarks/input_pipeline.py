"""The fine-tuning input pipeline alone, against the Ti/16 training step it must feed.

The pipeline is trainers.data's, with the ops `python -m trainers.finetune` uses for Pets
(decode, inception crop, flip, resize to the preset's 384 px, [-1, 1], batch) on a TFDS
data_dir: --data_dir, or a small stand-in that ../shared/tools/fake_tfds.py writes (JPEGs of
120-260 px). The training step is benchmarks.train's keras_vit Trainer at the same size and
batch; both are timed in turns. The issue's target: the pipeline gives at least 3x the images
per second per core that the step consumes.

The jax engine's feed is timed too: the same pipeline at the accelerator benchmark's 224 px,
handed to a JAX device as the engine hands it (trainers/jax_distribute.py: tf.data to NumPy to
a sharded array). Its images per second per core say how many host cores a step of a given
speed needs (CORES_FOR: the H100 rate of benchmarks.accelerator's ViT-B/16 bfloat16 step).

    python -m benchmarks.input_pipeline
    python -m benchmarks.input_pipeline --data_dir=/data/tfds --batch_size=64
"""

import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import contestants  # noqa: E402, F401, I001  (first: it imports PyTorch before TensorFlow)
from benchmarks import harness, shared  # noqa: E402
from keras_vit import commands  # noqa: E402

FAKE_TFDS = os.path.join(os.path.dirname(harness.ROOT), "shared", "tools", "fake_tfds.py")
TARGET = 3.0  # pipeline images/s over the step's, per core
CORES_FOR = 3000.0  # images/s: the jax engine's step on one H100 (benchmarks.accelerator)
FEED_IMAGE_SIZE = 224


def make_fake_pets(data_dir, per_class):
    if not os.path.exists(FAKE_TFDS):
        raise SystemExit(f"error: {FAKE_TFDS} not found: give --data_dir with oxford_iiit_pet prepared")
    argv = ["--dataset", "oxford_iiit_pet", "--data_dir", data_dir, "--per_class", str(per_class)]
    # The tool leaves the source files it generates in a new temporary folder: this one.
    with tempfile.TemporaryDirectory(prefix="fake_oxford_iiit_pet_sources-") as sources:
        env = dict(os.environ, TMPDIR=sources)
        subprocess.run(
            [sys.executable, FAKE_TFDS, *argv, "--test_per_class", "1"],
            check=True,
            capture_output=True,
            env=env,
        )


def _train_input_fn(config, data_dir, batch):
    """The fine-tuning run's training input_fn for `config` at this batch."""
    from trainers import data

    spec = data.get_spec(config.dataset, data_dir=data_dir)
    return data.make_input_fn(
        spec,
        config.train_split,
        ops=data.train_ops(config),
        global_batch_size=batch,
        training=True,
        seed=config.seed,
    )


def pipeline_step(config, data_dir, batch):
    iterator = iter(_train_input_fn(config, data_dir, batch)(None))
    return lambda: next(iterator)[0].numpy()


def jax_feed_step(config, data_dir, batch):
    """The pipeline at FEED_IMAGE_SIZE through the jax engine's feed onto one device."""
    import jax

    from trainers import jax_distribute

    feed_config = config.copy_and_resolve_references()
    feed_config.image_size = FEED_IMAGE_SIZE
    input_fn = _train_input_fn(feed_config, data_dir, batch)
    strategy = jax_distribute.JaxStrategy(jax.devices()[:1])
    iterator = iter(strategy.distribute_datasets_from_function(input_fn))
    return lambda: next(iterator)[0].block_until_ready()


COLUMNS = (
    ("what", "what", ""),
    ("img/s", "images_per_s", ".1f"),
    ("img/s per core", "per_core", ".1f"),
    ("pipeline / this", "pipeline_over_this", ".2f"),
)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    start = time.perf_counter()
    p = harness.parser(__doc__.splitlines()[0], "input_pipeline")
    p.add_argument(
        "--data_dir", default="", help="a TFDS data_dir with oxford_iiit_pet (default: a stand-in)"
    )
    p.add_argument("--per_class", type=int, default=4, help="stand-in images per class")
    p.add_argument("--variant", default="ViT-Ti_16", help="the model of the step the pipeline feeds")
    p.add_argument("--image_size", type=int, default=0, help="0: the fine-tuning preset's (384)")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--num_layers", type=int, default=0, help="override the step's depth (0: the variant's)")
    args = p.parse_args(argv)
    config = shared.finetune_config(args.variant, args.image_size or 384, args.batch_size, args.num_layers)
    if not args.image_size:
        from trainers import finetune

        config.image_size = finetune.get_config("oxford_iiit_pet").image_size
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir
        if not data_dir:
            data_dir = os.path.join(tmp, "tfds")
            make_fake_pets(data_dir, args.per_class)
        entrants = [
            harness.Contestant("finetune pipeline", lambda: pipeline_step(config, data_dir, args.batch_size)),
            harness.Contestant(
                shared.trainer_name(config) + " step", lambda: shared.trainer_step(config, 1), ours=True
            ),
            harness.Contestant(
                f"jax engine feed, {FEED_IMAGE_SIZE} px (tf.data to device)",
                lambda: jax_feed_step(config, data_dir, args.batch_size),
            ),
        ]
        times = harness.interleave(entrants, args.repeats, args.min_seconds)
    speeds = [args.batch_size / harness.median(times[c.name]) for c in entrants]
    rows = [
        {
            "what": c.name,
            "images_per_s": s,
            "per_core": s / cores,
            "repeats_s": times[c.name],
            "pipeline_over_this": speeds[0] / s,
        }
        for c, s in zip(entrants, speeds)
    ]
    rows[0]["pipeline_over_this"] = None
    rows[2]["pipeline_over_this"] = None
    settings = {
        "variant": args.variant,
        "image_size": config.image_size,
        "batch_size": args.batch_size,
        "num_layers": args.num_layers or None,
        "repeats": args.repeats,
        "cores": cores,
        "data_dir": "given" if args.data_dir else f"fake_tfds.py, {args.per_class} per class",
    }
    data = harness.result("input_pipeline", argv, settings)
    data["target"] = {
        "ratio": TARGET,
        "measured": speeds[0] / speeds[1],
        "met": speeds[0] / speeds[1] >= TARGET,
    }
    feed_per_core = speeds[2] / cores
    data["jax_feed"] = {
        "image_size": FEED_IMAGE_SIZE,
        "images_per_s_per_core": feed_per_core,
        "step_images_per_s": CORES_FOR,
        "cores_needed": CORES_FOR / feed_per_core,
    }
    data["tables"].append(harness.section(f"Input pipeline ({cores} cores)", COLUMNS, rows))
    harness.finish(data, args.out, start)


if __name__ == "__main__":
    commands.exit_with(main)
