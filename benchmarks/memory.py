"""The memory estimate behind --accum_steps=auto against the peak memory of real training steps.

Each case runs in its own process (peak resident memory is per process): the trainers' Trainer
(SGD with momentum, clip 1, XLA off, one replica) takes two steps on a random batch; the peak
resident memory above what the process held once TensorFlow and keras_vit were imported is
compared with `trainers.memory.estimate(...).total(batch)`. A ratio of at least 1 means the
estimate is an upper bound, which is what keeps `auto` from choosing a batch that does not fit.
CPU only: on a GPU the step's memory is the device's, not the process's.

    python -m benchmarks.memory
    python -m benchmarks.memory --cases=ViT-Ti_16:224:16,ViT-B_16:384:4
"""

import argparse
import json
import os
import resource
import subprocess
import sys

from keras_vit import commands

DEFAULT_CASES = (
    "ViT-Ti_16:224:8,ViT-Ti_16:224:16,ViT-Ti_16:384:8,ViT-S_16:224:8,ViT-B_16:224:8,ViT-B_16:384:2"
)


def _peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def measure(variant, image_size, batch):
    """One case in this process: {"measured": bytes, "estimated": bytes, "parameters": n}."""
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import tensorflow as tf

    import keras_vit
    from trainers import loop, memory, optimizers

    baseline = _peak_rss()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = keras_vit.create_model(
            variant,
            image_size=image_size,
            num_classes=37,
            include_preprocessing=False,
            classifier_activation=None,
        )
        optimizer = optimizers.make_optimizer("sgd", 0.01)
        trainer = loop.TensorFlowTrainer(
            strategy=strategy, model=model, optimizer=optimizer, global_batch_size=batch, grad_norm_clip=1.0
        )
    images = tf.random.uniform([batch, image_size, image_size, 3], -1, 1, seed=0)
    dataset = tf.data.Dataset.from_tensors((images, tf.zeros([batch], tf.int32))).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    trainer.train(iterator, 2)
    estimated = memory.estimate(model, image_size=image_size).total(batch)
    return {"measured": _peak_rss() - baseline, "estimated": estimated, "parameters": model.count_params()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated VARIANT:IMAGE_SIZE:BATCH")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a single case, run in a child process
    args = parser.parse_args(argv)
    if args.one:
        variant, size, batch = args.one.split(":")
        print(json.dumps(measure(variant, int(size), int(batch))))
        return 0
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    print(f"{'case':<22}{'parameters':>12}{'measured GB':>13}{'estimated GB':>14}{'ratio':>8}")
    for case in args.cases.split(","):
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.memory", f"--one={case}"],
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode:
            print(f"{case:<22} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        ratio = row["estimated"] / row["measured"]
        print(
            f"{case:<22}{row['parameters']:>12,}{row['measured'] / 1e9:>13.2f}{row['estimated'] / 1e9:>14.2f}"
            f"{ratio:>8.2f}"
        )
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
