"""What the benchmarks share: their synthetic inputs, and the trainers' own step as a run builds it.

Below every benchmark module (it imports none of them), so that train.py, jax_trainer.py,
input_pipeline.py and accelerator.py build the same thing the same way:

* `synthetic_images` and `synthetic_batch`: uniform random images in [-1, 1] (and labels), the
  same for every contestant of a row;
* `finetune_config`: the fine-tuning preset as `python -m trainers.finetune` builds it, at a
  benchmark's shape, on either engine;
* `trainer_step`: the trainers' own Trainer for that config (trainers.training.build_trainer:
  model, optimizer, clipping, precision, accumulation, XLA), fed through its engine's own input
  path, each call `trainer.train(iterator, steps)`, the call a run's controller makes. One
  builder for both engines; Keras fixes its backend per process, so the jax engine's runs in a
  child process (benchmarks/jax_trainer.py);
* `trainer_mode`: the row's name and compute dtype for that config on this machine.

The trainers are imported inside the functions: a benchmark's process imports PyTorch before
TensorFlow (benchmarks/contestants.py), and a child of another backend imports only its own.
"""

import numpy as np

NUM_CLASSES = 37  # oxford_iiit_pet, the fine-tuning preset's dataset
LEARNING_RATE = 0.01  # the peers' SGD, as the fine-tuning preset's


def synthetic_images(batch, image_size):
    """float32 (batch, image_size, image_size, 3), uniform in [-1, 1], the same at every call."""
    return synthetic_batch(batch, image_size)[0]


def synthetic_batch(batch, image_size, num_classes=NUM_CLASSES):
    """(images, int32 labels (batch,)): synthetic_images' images and labels below num_classes."""
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (batch, image_size, image_size, 3)).astype("float32")
    return images, rng.integers(0, num_classes, batch).astype("int32")


def finetune_config(variant, image_size, batch, num_layers=0, **settings):
    """The fine-tuning preset as `python -m trainers.finetune` builds it, at this shape, from
    scratch, with `settings` (e.g. jit_compile="true", engine="jax") over its defaults."""
    from trainers import finetune

    config = finetune.get_config("oxford_iiit_pet")
    config.model, config.image_size, config.batch_size = variant, image_size, batch
    config.weights = "none"  # no download; the step is the same
    if num_layers:
        config.num_layers = num_layers
    config.update(settings)
    return config


class Spec:  # all of a dataset that building the trainer reads
    num_classes = NUM_CLASSES


def trainer_step(config, steps):
    """A callable that runs `steps` steps of the trainers' own Trainer for `config` on one
    synthetic batch, repeated, under the config's engine."""
    import tensorflow as tf

    from trainers import engines, training

    strategy = engines.strategy_of(config)
    # The trainers' own construction (model, schedule, optimizer, accumulation, XLA choice).
    trainer = training.build_trainer(config, strategy, Spec).trainer
    images, labels = synthetic_batch(config.batch_size, config.image_size)
    rows = config.batch_size // strategy.num_replicas_in_sync  # each replica's share of the batch

    def input_fn(context):
        return tf.data.Dataset.from_tensors((images[:rows], labels[:rows])).repeat()

    iterator = iter(strategy.distribute_datasets_from_function(input_fn))
    return lambda: trainer.train(iterator, steps)


def trainer_mode(config):
    """(row name, compute dtype) of the trainers' step for `config` on this machine, decided as
    a run decides it (precision.resolve_step); the jax engine's is named from its registration,
    without loading JAX into the benchmark's process."""
    from trainers import distribute, model_builder, plan_pieces, precision

    strategy = distribute.create_strategy(config.strategy, cpu_devices=config.cpu_devices or 1)
    hidden_size, num_patches = model_builder.encoder_size(plan_pieces.model_settings(config))
    step = precision.resolve_step(
        config.mixed_precision,
        config.jit_compile,
        strategy,
        engine=config.engine,
        hidden_size=hidden_size,
        num_patches=num_patches,
    )
    dtype = precision.compute_dtype(step.precision)
    mode = f"{config.engine.upper()}{'+XLA' if step.jit else ''}{'' if dtype == 'float32' else ' ' + dtype}"
    return f"keras_vit Trainer {mode}", dtype


def trainer_name(config):
    return trainer_mode(config)[0]
