"""The trainers' own step on the jax engine (`trainers.finetune --engine=jax`), in a child process.

Keras fixes its backend per process, and a benchmark's process has its own (benchmarks.train:
TensorFlow), so the jax engine's trainer runs in a child that builds and times its steps on
request (harness.ChildServer): `python -m benchmarks.jax_trainer --serve`. The trainer is built
as `trainers.finetune --engine=jax` builds it (trainers.training.build_trainer on the fine-tuning
preset: optimizer, clipping, precision, accumulation), is fed through the engine's own input
path (a tf.data stream of one synthetic batch, put on the devices by its Feed), and each call is
`trainer.train(iterator, steps)`, the call the run's controller makes.

The trainer needs TensorFlow besides JAX (tf.data feeds both engines; the step counters,
checkpoints and summaries are TensorFlow's): where either is missing it is not measured, and
`missing()` says so in a note.
"""

import atexit
import importlib.util
import sys

from benchmarks import contestants, harness, shared
from keras_vit import commands

NAME = "keras_vit Trainer JAX+XLA (trainers.finetune --engine=jax)"
CHILD_ENV = {"KERAS_BACKEND": "jax", contestants.CHILD_FRAMEWORK: "jax"}
_SERVER = harness.ChildServer("benchmarks.jax_trainer", CHILD_ENV)
atexit.register(_SERVER.close)


def missing():
    """None where the trainer can run on the jax engine here, else a one-line note."""
    absent = [m for m in ("tensorflow", "jax") if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return (
        f"the trainer on the jax engine was not measured: it needs TensorFlow and JAX "
        f"({', '.join(absent)} missing here; tf.data feeds both engines): "
        'pip install -e ".[train]" and JAX for this machine'
    )


def step(variant, image_size, batch, num_layers, mixed_precision, steps):
    """A harness.ChildStep: `steps` steps of the trainer per call, in the child process."""
    return harness.ChildStep(_SERVER, variant, image_size, batch, num_layers, mixed_precision, steps)


def close():
    """Ends the child (its imports hold memory); a later step() starts another."""
    _SERVER.close()


def build(variant, image_size, batch, num_layers, mixed_precision, steps):
    """In the child (Keras on JAX): the trainer's `steps` steps per call, on synthetic data."""
    config = shared.finetune_config(
        variant, image_size, batch, num_layers, mixed_precision=mixed_precision, engine="jax"
    )
    return shared.trainer_step(config, steps)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] != ["--serve"]:
        raise SystemExit("usage: python -m benchmarks.jax_trainer --serve (a child of a benchmark)")
    harness.serve(build)


if __name__ == "__main__":
    commands.exit_with(main)
