"""Every configuration field's default, as plain data: the base every preset starts from.

The presets (configs/finetune.py, pretrain.py, fewshot.py, demo.py) start from these defaults
with `fields(...)` and change values, never declare new fields. What a field means, its allowed
values and its topic are the trainers' (trainers/fields.py, the schema the flags, their `--help`,
validation and the flag table of docs/reference/flags.md come from); this package imports
nothing from trainers/, so importing a preset loads neither TensorFlow nor Keras. The type of a
flag is the type of its default.
"""

import ml_collections

DEFAULTS = {
    # What to train on, and how its images are prepared.
    "dataset": "",
    "data_dir": "",
    "manual_dir": "",
    "train_split": "train",
    "examples_per_class": 0,
    "crop_min_area": 0.05,
    "random_flip": True,
    "augreg": "none",
    "randaug": "level",
    "mixup": "level",
    "pp_train": "",
    "pp_eval": "",
    # The model: its shape, its initial weights, its regularisation.
    "model": "ViT-B_16",
    "weights": "none",
    "image_size": 224,
    "patch_size": 0,
    "hidden_size": 0,
    "num_layers": 0,
    "num_heads": 0,
    "mlp_dim": 0,
    "classifier": "token",
    "pre_logits": False,
    "posemb": "learned_1d",
    "dropout_rate": 0.0,
    "stochastic_depth": 0.0,
    "new_head": True,
    "seed": 0,
    # What is learned and how: the objective, the optimizer and its schedule, the batch.
    "loss": "softmax",
    "recipe": "imagenet2012",
    "objective": "classification",
    "masked_target": "mean_color",
    "optimizer": "sgd",
    "momentum_dtype": "float32",
    "base_lr": 0.01,
    "sweep_lrs": "0.001,0.003,0.01,0.03",
    "weight_decay": 0.0,
    "decay_type": "cosine",
    "total_steps": 500,
    "warmup_steps": 100,
    "batch_size": 512,
    "accum_steps": "auto",
    "grad_norm_clip": 1.0,
    # How the run proceeds: its compiled loops, checkpoints and resuming.
    "steps_per_loop": 50,
    "checkpoint_every": 100,
    "keep_checkpoints": 3,
    "allow_config_change": False,
    # How the model is measured: during training, and the few-shot trainer's probes.
    "eval_splits": "test=test",
    "eval_every": 100,
    "evals": "",
    "fewshot_datasets": "",
    "fewshot_every": 0,
    "fewshot_shots": "1,5,10,25",
    "fewshot_seeds": 1,
    "fewshot_l2_reg": "1024",
    "fewshot_batch_size": 256,
    "test_split": "test",
    "shots": "1,5,10,25",
    "seeds": 3,
    "l2_reg": "1024",
    # What the step runs on.
    "engine": "tf",
    "strategy": "auto",
    "tpu": "",
    "cpu_devices": 1,
    "cpu_threads": 0,
    "mixed_precision": "auto",
    "jit_compile": "auto",
    "device_memory_gb": 0.0,
    # Where the run writes, and what it prints.
    "workdir": "",
    "verbose": False,
}

# Fields every trainer has: where the data and workdir are, which model, which hardware.
COMMON = (
    "dataset",
    "data_dir",
    "manual_dir",
    "train_split",
    "workdir",
    "model",
    "weights",
    "image_size",
    "patch_size",
    "hidden_size",
    "num_layers",
    "num_heads",
    "mlp_dim",
    "classifier",
    "pre_logits",
    "posemb",
    "dropout_rate",
    "stochastic_depth",
    "seed",
    "engine",
    "strategy",
    "tpu",
    "cpu_devices",
    "cpu_threads",
    "verbose",
)
# The fields of one trainer alone: a workdir's config.json with them is that trainer's run.
OWN_FIELDS = {
    "trainers.finetune": ("new_head", "sweep_lrs"),
    "trainers.pretrain": ("recipe", "objective", "masked_target"),
}
# Fields of the two training trainers (fine-tuning and pre-training).
TRAINING = COMMON + (
    "eval_splits",
    "examples_per_class",
    "crop_min_area",
    "random_flip",
    "augreg",
    "randaug",
    "mixup",
    "pp_train",
    "pp_eval",
    "loss",
    "optimizer",
    "momentum_dtype",
    "base_lr",
    "weight_decay",
    "decay_type",
    "total_steps",
    "warmup_steps",
    "batch_size",
    "accum_steps",
    "device_memory_gb",
    "grad_norm_clip",
    "steps_per_loop",
    "eval_every",
    "evals",
    "checkpoint_every",
    "keep_checkpoints",
    "mixed_precision",
    "jit_compile",
    "fewshot_datasets",
    "fewshot_every",
    "fewshot_shots",
    "fewshot_seeds",
    "fewshot_l2_reg",
    "fewshot_batch_size",
    "allow_config_change",
)


# Fields that take a word or a number ("auto" or 4): typed object, so Python configs may set either.
WORD_OR_NUMBER = ("accum_steps", "mixup")
# Fields that take text on the command line and data (a dict, a list) in Python configs: typed object.
TEXT_OR_DATA = ("evals", "pp_train", "pp_eval")


def fields(names):
    """A ConfigDict holding `names` at their declared defaults (unlocked: the preset fills it in)."""
    config = ml_collections.ConfigDict()
    for name in names:
        default = DEFAULTS[name]
        if name in WORD_OR_NUMBER or name in TEXT_OR_DATA:
            default = ml_collections.FieldReference(default, field_type=object)
        config[name] = default
    return config
