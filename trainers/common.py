"""What the trainer command lines share: flags from presets, validation, the model, errors.

Every field of a trainer's preset (configs/<trainer>.py) is a flag of the same name. Flags
default to "not given"; a given flag overrides the preset that `--dataset` selects.
"""

import inspect
import json
import os
import sys

import keras
import ml_collections
from absl import flags

from configs.pretrain import RECIPES
from trainers import optimizers

HELP = {
    "dataset": "TFDS name (oxford_iiit_pet, cifar10, imagenet2012, ...), folder:PATH, or digits",
    "data_dir": "TFDS data_dir holding the prepared dataset ('' = TFDS default)",
    "manual_dir": "directory with manually downloaded archives (imagenet2012)",
    "train_split": "TFDS split to train on, e.g. train[:90%]",
    "eval_splits": "comma-separated name=split pairs evaluated every --eval_every steps",
    "examples_per_class": "train on N examples of each class, drawn with --seed (0 = all)",
    "crop_min_area": "smallest area of the random training crop, a fraction of the image (paper: 0.05)",
    "random_flip": "random horizontal flips in training (off for digits: a mirrored digit is another shape)",
    "workdir": "where checkpoints, TensorBoard logs, config.json, results.json and model.npz go",
    "model": "official model name: ViT-Ti_16, ViT-S_16, ViT-B_16, ..., ViT-H_14, R50+ViT-B_16",
    "weights": "initial weights: registry name, path to .npz/.weights.h5/.keras, or none",
    "image_size": "training and evaluation resolution (pixels, square)",
    "patch_size": "override the variant's patch size (0 = the variant's)",
    "hidden_size": "override the variant's hidden size (0 = the variant's)",
    "num_layers": "override the variant's depth (0 = the variant's)",
    "num_heads": "override the variant's attention heads (0 = the variant's)",
    "mlp_dim": "override the variant's MLP width (0 = the variant's)",
    "classifier": "token (class token) or gap (global average pooling)",
    "pre_logits": "add the tanh pre-logits layer (size = hidden size) before the head",
    "dropout_rate": "dropout rate in the encoder",
    "new_head": "start from a zero head even if the weights have one of the right size (the paper's recipe)",
    "loss": "softmax (cross-entropy, one label per image) or sigmoid (per-class binary cross-entropy, "
    "multi-label data; a new head starts with bias -10; evaluation reports prec@1)",
    "optimizer": "sgd (optax-style momentum 0.9: m = 0.9 m + g, w -= lr m) or adam (beta 0.9, 0.999; "
    "decoupled weight decay)",
    "recipe": "pre-training recipe, a row of the paper's Table 3: imagenet2012, imagenet21k or jft "
    "(default: the dataset's; sets lr, decay, weight decay, dropout, loss and steps)",
    "momentum_dtype": "storage of the sgd momentum: float32, or bfloat16 (vit_jax's option: half the memory)",
    "base_lr": "peak learning rate, reached after the warm-up; fine-tuning also takes 'sweep': one run "
    "per --sweep_lrs rate, the best on minival retrained on train+minival (the paper's protocol)",
    "sweep_lrs": "comma-separated learning rates that --base_lr=sweep tries",
    "weight_decay": "decoupled weight decay (multiplied by the learning rate)",
    "decay_type": "learning-rate decay after the warm-up: cosine or linear",
    "total_steps": "optimizer steps in all",
    "warmup_steps": "linear warm-up steps",
    "batch_size": "global batch size (over all replicas and accumulation steps)",
    "accum_steps": "split each batch into this many micro-batches (gradients summed)",
    "grad_norm_clip": "clip the global norm of the all-reduced gradient (0 = off)",
    "steps_per_loop": "optimizer steps per compiled loop call (host round trip)",
    "eval_every": "evaluate every N steps (0 = only at the end)",
    "checkpoint_every": "checkpoint every N steps (0 = only at the end)",
    "keep_checkpoints": "how many checkpoints to keep",
    "seed": "random seed (model init, data order, augmentation)",
    "strategy": "auto, tpu, gpu, cpu or multi_worker (TF_CONFIG)",
    "tpu": "TPU name or 'local' (TPU VM) for --strategy=tpu",
    "cpu_devices": "split the CPU into N logical devices (multi-replica testing)",
    "mixed_precision": "none, bfloat16 (TPU, recent GPUs) or float16 (GPUs, with loss scaling)",
    "jit_compile": "XLA for the step: auto (GPU and single-device runs), true or false",
    "fewshot_datasets": "comma-separated datasets for few-shot linear probes during pre-training",
    "fewshot_every": "run the few-shot probes every N steps (0 = only at the end)",
    "fewshot_shots": "comma-separated shots per class for the few-shot probes",
    "fewshot_seeds": "random draws of the few-shot training examples",
    "fewshot_l2_reg": "L2 regulariser of the closed-form few-shot probe",
    "fewshot_batch_size": "batch size for few-shot feature extraction",
    "test_split": "split the few-shot probes are scored on",
    "shots": "comma-separated training examples per class, e.g. 1,5,10,25",
    "seeds": "random draws of the k-shot training set per shot count (mean and std reported)",
    "l2_reg": "ridge regulariser: a positive number (default 2^10) or 'sweep' (chosen on held-out train)",
}

CHOICES = {
    "classifier": ("token", "gap"),
    "loss": ("softmax", "sigmoid"),
    "optimizer": optimizers.OPTIMIZERS,
    "momentum_dtype": optimizers.MOMENTUM_DTYPES,
    "recipe": tuple(RECIPES),
    "decay_type": optimizers.DECAY_TYPES,
    "strategy": ("auto", "tpu", "gpu", "cpu", "multi_worker"),
    "mixed_precision": ("none", "bfloat16", "float16"),
    "jit_compile": ("auto", "true", "false"),
}


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit code 2."""


class TrainingError(RuntimeError):
    """The run started but cannot go on (e.g. the loss diverged): one line, exit code 1."""


def parse_flags(argv, get_config, help_overrides=None):
    """argv -> the resolved ConfigDict: the preset for --dataset, then every given flag.

    `help_overrides` replaces HELP entries whose meaning differs in one trainer.
    """
    defaults = get_config()
    values = flags.FlagValues()
    help_table = {**HELP, **(help_overrides or {})}
    for name, default in defaults.items():
        help_text = help_table.get(name, name)
        if name == "base_lr":
            # A number; "sweep" too where the preset has the grid to sweep (fine-tuning).
            parser = _LearningRateParser(sweepable="sweep_lrs" in defaults)
            flags.DEFINE(parser, name, None, help_text, flag_values=values)
        elif name in CHOICES:
            flags.DEFINE_enum(name, None, CHOICES[name], help_text, flag_values=values)
        elif isinstance(default, bool):
            flags.DEFINE_bool(name, None, help_text, flag_values=values)
        elif isinstance(default, int):
            flags.DEFINE_integer(name, None, help_text, flag_values=values)
        elif isinstance(default, float):
            flags.DEFINE_float(name, None, help_text, flag_values=values)
        else:
            flags.DEFINE_string(name, None, help_text, flag_values=values)
    if any(a in ("--help", "-h", "--helpfull") for a in argv[1:]):
        print(f"usage: python -m {_program(argv)} --dataset=NAME --workdir=DIR [flags]\n")
        print(values.get_help())
        raise SystemExit(0)
    try:
        rest = values(argv)
    except flags.Error as e:
        raise UsageError(str(e)) from None
    if len(rest) > 1:
        raise UsageError(f"unexpected arguments {rest[1:]}; flags look like --name=value.")
    # The preset depends on the given flags that get_config takes (--dataset; for pre-training
    # also --recipe and --model, which pick a row of the paper's Table 3).
    preset_args = {
        name: values[name].value
        for name in inspect.signature(get_config).parameters
        if name in defaults and values[name].value is not None
    }
    config = get_config(**preset_args) if preset_args else defaults
    for name in defaults:
        if values[name].value is not None:
            config[name] = values[name].value
    return config


def parse_base_lr(value, sweepable=True):
    """--base_lr as given (a flag's text or a config value) -> a float, or "sweep" where allowed."""
    try:
        return _read_base_lr(value, sweepable)
    except ValueError as e:
        raise UsageError(f"--base_lr={value}: {e}.") from None


def _read_base_lr(value, sweepable):
    if isinstance(value, str) and value.strip().lower() == "sweep":
        if not sweepable:
            raise ValueError("sweep is a fine-tuning option (python -m trainers.finetune); give a number")
        return "sweep"
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError("must be a number or 'sweep'" if sweepable else "must be a number") from None


class _LearningRateParser(flags.ArgumentParser):
    """absl parser of --base_lr; a bad value reads "flag --base_lr=VALUE: must be a number or 'sweep'"."""

    def __init__(self, sweepable):
        self.sweepable = sweepable

    def parse(self, argument):
        return _read_base_lr(argument, self.sweepable)

    def flag_type(self):
        return "float or 'sweep'" if self.sweepable else "float"


def _program(argv):
    return os.path.basename(argv[0]).replace(".py", "") if argv else "trainer"


def parse_eval_splits(text):
    """'minival=train[90%:],test=test' -> {'minival': 'train[90%:]', 'test': 'test'}."""
    splits = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, split = item.partition("=")
        if not sep or not name or not split:
            raise UsageError(f"--eval_splits entry {item!r} is not name=split (e.g. test=test).")
        if name in splits:
            raise UsageError(f"--eval_splits names {name!r} twice.")
        splits[name.strip()] = split.strip()
    return splits


def validate(config):
    """Checks that need nothing but the config; raises UsageError on the first problem."""
    import keras_vit

    if not config.dataset:
        raise UsageError("--dataset is required (a TFDS name, folder:PATH or digits).")
    if not config.workdir:
        raise UsageError("--workdir is required (where checkpoints, logs and results go).")
    if config.model not in keras_vit.VARIANTS:
        raise UsageError(f"unknown --model {config.model!r}; known models: {', '.join(keras_vit.VARIANTS)}.")
    for name, values in CHOICES.items():
        if name in config and config[name] not in values:
            raise UsageError(f"--{name} must be one of {', '.join(values)}, got {config[name]!r}.")
    for name in (
        "total_steps",
        "batch_size",
        "accum_steps",
        "steps_per_loop",
        "image_size",
        "keep_checkpoints",
    ):
        if config[name] <= 0:
            raise UsageError(f"--{name} must be positive, got {config[name]}.")
    for name in (
        "warmup_steps",
        "eval_every",
        "checkpoint_every",
        "examples_per_class",
        "cpu_devices",
        "patch_size",
        "hidden_size",
        "num_layers",
        "num_heads",
        "mlp_dim",
        "fewshot_every",
    ):
        if name in config and config[name] < 0:
            raise UsageError(f"--{name} must not be negative, got {config[name]}.")
    if config.warmup_steps > config.total_steps:
        raise UsageError(
            f"--warmup_steps ({config.warmup_steps}) exceeds --total_steps ({config.total_steps})."
        )
    for name in ("base_lr", "weight_decay", "grad_norm_clip", "dropout_rate"):
        if not config[name] >= 0:
            raise UsageError(f"--{name} must not be negative, got {config[name]}.")
    if config.dropout_rate >= 1:
        raise UsageError(f"--dropout_rate must be below 1, got {config.dropout_rate}.")
    if config.batch_size % config.accum_steps:
        raise UsageError(
            f"--batch_size {config.batch_size} is not divisible by --accum_steps {config.accum_steps}."
        )
    if not parse_eval_splits(config.eval_splits):
        raise UsageError("--eval_splits is empty; give at least one name=split pair.")


def check_replicas(config, replicas):
    if config.batch_size % (replicas * config.accum_steps):
        raise UsageError(
            f"--batch_size {config.batch_size} is not divisible by {replicas} replicas x --accum_steps "
            f"{config.accum_steps}; use a multiple of {replicas * config.accum_steps}."
        )


def model_kwargs(config, num_classes):
    """keras_vit.create_model keyword arguments for this config (trainers feed [-1, 1] images)."""
    import keras_vit

    kwargs = dict(
        image_size=config.image_size,
        num_classes=num_classes,
        include_preprocessing=False,
        dropout_rate=config.dropout_rate,
        classifier=config.classifier,
        classifier_activation=None,  # the loss takes logits
    )
    for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
        if config[name]:
            kwargs[name] = config[name]
    hidden = kwargs.get("hidden_size", keras_vit.VARIANTS[config.model]["hidden_size"])
    kwargs["representation_size"] = hidden if config.pre_logits else None
    return kwargs


def weights_arg(config):
    return None if config.weights.lower() in ("", "none") else config.weights


def build_model(config, num_classes, pre_logits_from_weights=False):
    """The model for this config; bad model or weights arguments become UsageError.

    pre_logits_from_weights: the weights file decides whether the model has a pre-logits
    layer (few-shot probes keep a pre-training run's representation); otherwise
    --pre_logits does (fine-tuning drops the checkpoint's, as vit_jax does).
    """
    import keras_vit
    from keras_vit import fileio

    weights = weights_arg(config)
    if weights and not _is_registry_name(weights) and not fileio.exists(weights):
        raise UsageError(f"--weights {weights!r}: no such file (give a registry name, a path, or none).")
    kwargs = model_kwargs(config, num_classes)
    if pre_logits_from_weights and weights:
        del kwargs["representation_size"]
    try:
        model = keras_vit.create_model(config.model, weights=weights, **kwargs)
    except (ValueError, OSError) as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"cannot build {config.model} with --weights={config.weights}: {first_line}") \
            from None
    if weights and config.get("new_head", False):
        # The paper's fine-tuning always starts from a zero head, also when the checkpoint's
        # head happens to have the right number of classes.
        for variable in model.get_layer("head").weights:
            variable.assign(keras.ops.zeros(variable.shape, variable.dtype))
    if config.get("loss", "softmax") == "sigmoid":
        _start_new_head_for_sigmoid(model.get_layer("head"))
    return model


# big_vision's init_head_bias for sigmoid runs: a new head predicts sigmoid(-10) ~ 4.5e-5 for
# every class, so the first steps do not spend their gradient pushing thousands of negatives down.
SIGMOID_HEAD_BIAS = -10.0


def _start_new_head_for_sigmoid(head):
    """Sets the bias of a new head to SIGMOID_HEAD_BIAS; a head loaded from weights is kept.

    A new head is all zeros (from scratch, a checkpoint of another class count, --new_head);
    a trained one never is.
    """
    if any(bool(keras.ops.any(keras.ops.not_equal(variable, 0))) for variable in head.weights):
        return
    head.bias.assign(keras.ops.full(head.bias.shape, SIGMOID_HEAD_BIAS, head.bias.dtype))


def _is_registry_name(weights):
    from keras_vit import checkpoints

    return weights in checkpoints.REGISTRY


def config_to_json(config):
    return json.dumps(
        config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config),
        indent=2,
        sort_keys=True,
    )


def cli(run, get_config, argv=None, help_overrides=None):
    """The command line: flags -> run(config); errors are one line on stderr, no traceback.

    Exit codes: 0 done (or stopped by SIGTERM after saving a checkpoint), 2 bad input,
    1 the run failed (e.g. the loss diverged).
    """
    from trainers import data, distribute

    argv = sys.argv if argv is None else argv
    program = _program(argv)
    try:
        config = parse_flags(argv, get_config, help_overrides)
        run(config)
    except (UsageError, data.DatasetError, distribute.StrategyError) as e:
        print(f"{program}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except TrainingError as e:
        print(f"{program}: error: {_one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        return 130
    return 0


def _one_line(error):
    return " ".join(str(error).split()) or type(error).__name__
