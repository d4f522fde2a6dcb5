"""Every configuration field, declared once: its default, its allowed values and its help text.

The allowed values are the ones the module that acts on the field declares (the training loop
its losses, trainers/optimizers.py its optimizers, ...), imported here, so a flag cannot offer a
value its code does not take.

The presets (configs/finetune.py, pretrain.py, fewshot.py) start from these defaults with
`fields(...)` and change values, never declare new fields; the trainers' command-line flags,
their `--help` and the flag table of docs/reference/flags.md are generated from here (trainers/flags.py,
trainers/flag_table.py). The type of a flag is the type of its default.
"""

import dataclasses

import ml_collections

# First, so that the trainers pick Keras' backend (trainers/engine_env.py) before the library loads it.
import trainers  # noqa: F401
from configs.recipes import RECIPES
from keras_vit import posembs
from keras_vit.masked_patches import TARGETS as MASKED_TARGETS
from keras_vit.models import CLASSIFIERS
from trainers.distribute import STRATEGIES
from trainers.engines import ENGINES
from trainers.loop import LOSSES
from trainers.objectives import OBJECTIVES
from trainers.optimizers import DECAY_TYPES, MOMENTUM_DTYPES, OPTIMIZERS
from trainers.precision import PRECISIONS


@dataclasses.dataclass(frozen=True)
class Field:
    default: object
    help: str
    choices: tuple = ()
    group: str = ""  # a key of GROUPS, set by in_group


# The topics of the flags, in the order a user settles them: what to train on, the model, how
# it learns, how the run proceeds, how it is measured, what it runs on, where it writes. `--help`
# lists the flags under these titles, and the first checks of a command run in this order
# (trainers/validation.py), so the first error names what to fix first.
GROUPS = {
    "data": "Data",
    "model": "Model",
    "optimization": "Optimization",
    "loop": "Loop and checkpoints",
    "evaluation": "Evaluation",
    "hardware": "Hardware",
    "output": "Output",
}


def in_group(group, fields):
    """`fields` ({name: Field}) declared under the topic `group`."""
    if group not in GROUPS:
        raise ValueError(f"group must be one of {', '.join(GROUPS)}, got {group!r}")
    return {name: dataclasses.replace(field, group=group) for name, field in fields.items()}


# The allowed values of a flag belong to the module that acts on them; they are offered here.
# Not yet owned elsewhere: --jit_compile's (read by trainers/plan.py, which imports this
# module) and the AugReg levels (trainers/data/augreg.py holds their values and checks the names:
# the data package reads the declared defaults from here, so it cannot be imported here).
JIT_COMPILE = ("auto", "true", "false")
# The registered position-embedding types (keras_vit/posembs): the first is the default.
POSEMB_TYPES = posembs.names()
AUGREG_LEVELS = ("none", "light1", "light2", "medium1", "medium2", "strong1", "strong2")


def _posemb_help():
    """'position information: learned_1d (official), ... or none', from each type's summary."""
    named = [f"{kind.name} ({kind.summary})" if kind.summary else kind.name for kind in posembs.types()]
    return "position information: " + ", ".join(named[:-1]) + " or " + named[-1]


# What to train on, and how its images are prepared.
_DATA = {
    "dataset": Field("", "TFDS name (oxford_iiit_pet, cifar10, imagenet2012, ...), folder:PATH, or digits"),
    "data_dir": Field("", "TFDS data_dir holding the prepared dataset ('' = TFDS default)"),
    "manual_dir": Field("", "directory with manually downloaded archives (imagenet2012)"),
    "train_split": Field("train", "TFDS split to train on, e.g. train[:90%]"),
    "examples_per_class": Field(0, "train on N examples of each class, drawn with --seed (0 = all)"),
    "crop_min_area": Field(
        0.05, "smallest area of the random training crop, a fraction of the image (paper: 0.05)"
    ),
    "random_flip": Field(
        True, "random horizontal flips in training (off for digits: a mirrored digit is another shape)"
    ),
    "augreg": Field(
        "none",
        "AugReg level (Steiner et al.): sets --randaug and --mixup; none, light1, light2, medium1, "
        "medium2, strong1 or strong2",
        AUGREG_LEVELS,
    ),
    "randaug": Field(
        "level",
        "RandAugment in training: N,M (N ops of magnitude M per image, e.g. 2,15), none, or level "
        "(--augreg's)",
    ),
    "mixup": Field(
        "level",
        "Mixup in training: Beta concentration p of the mixing weight (e.g. 0.5; 0 = off), or level "
        "(--augreg's); the labels become soft targets",
    ),
    "pp_train": Field(
        "",
        "training preprocessing as registered ops, big_vision-style: e.g. 'decode|inception_crop(0.05)|"
        "resize(224)|flip_lr|value_range(-1,1)|mixup(0.5)' (batch ops such as mixup last); replaces "
        "--crop_min_area, --random_flip, --augreg, --randaug and --mixup ('' = the ops those give)",
    ),
    "pp_eval": Field(
        "",
        "evaluation preprocessing as registered ops, e.g. 'decode|resize(224)|value_range(-1,1)' "
        "('' = resize to --image_size)",
    ),
}

# The model: its shape, its initial weights, its regularisation.
_MODEL = {
    "model": Field(
        "ViT-B_16",
        "official model name: ViT-Ti_16, ViT-S_16, ViT-B_16, ..., ViT-H_14, or a hybrid: "
        "R+ViT-Ti_16, R26+ViT-S_32, R50+ViT-B_16, R50+ViT-L_32, ...",
    ),
    "weights": Field(
        "none",
        "initial weights: registry name, Hub name (hf-hub:timm/..., hf://google/...), path to "
        ".npz/.weights.h5/.keras, a timm/transformers .safetensors file or folder, or none",
    ),
    "image_size": Field(224, "training and evaluation resolution (pixels, square)"),
    "patch_size": Field(0, "override the variant's patch size (0 = the variant's)"),
    "hidden_size": Field(0, "override the variant's hidden size (0 = the variant's)"),
    "num_layers": Field(0, "override the variant's depth (0 = the variant's)"),
    "num_heads": Field(0, "override the variant's attention heads (0 = the variant's)"),
    "mlp_dim": Field(0, "override the variant's MLP width (0 = the variant's)"),
    "classifier": Field("token", "token (class token) or gap (global average pooling)", CLASSIFIERS),
    "pre_logits": Field(False, "add the tanh pre-logits layer (size = hidden size) before the head"),
    "posemb": Field(POSEMB_TYPES[0], _posemb_help(), POSEMB_TYPES),
    "dropout_rate": Field(0.0, "dropout rate in the encoder"),
    "stochastic_depth": Field(
        0.0, "stochastic depth: drop rate of the last block's residual branches (linear from 0 at the first)"
    ),
    "new_head": Field(
        True, "start from a zero head even if the weights have one of the right size (the paper's recipe)"
    ),
    "seed": Field(0, "random seed (model init, data order, augmentation)"),
}

# What is learned and how: the objective, the optimizer and its schedule, the batch.
_OPTIMIZATION = {
    "loss": Field(
        "softmax",
        "softmax (cross-entropy, one label per image) or sigmoid (per-class binary "
        "cross-entropy, multi-label data; a new head starts with bias -10; evaluation reports "
        "prec@1)",
        LOSSES,
    ),
    "recipe": Field(
        "imagenet2012",
        "pre-training recipe, a row of the paper's Table 3: imagenet2012, "
        "imagenet21k or jft (default: the dataset's; sets lr, decay, weight decay, dropout, loss "
        "and steps)",
        tuple(RECIPES),
    ),
    "objective": Field(
        "classification",
        "what pre-training learns: classification (of the labels) or masked_patch (the paper's "
        "self-supervised masked patch prediction: 50% of the patch embeddings corrupted, their "
        "--masked_target predicted; labels are not read)",
        OBJECTIVES,
    ),
    "masked_target": Field(
        "mean_color",
        "with --objective=masked_patch, what is predicted of each corrupted patch: mean_color (its "
        "mean colour, 3 bits per channel: 512 classes), downsampled (4x4 cells of 3-bit colour: "
        "16 x 512 classes) or l2 (its pixels, squared error)",
        MASKED_TARGETS,
    ),
    "optimizer": Field(
        "sgd",
        "sgd (optax-style momentum 0.9: m = 0.9 m + g, w -= lr m) or adam (beta 0.9, "
        "0.999; decoupled weight decay)",
        OPTIMIZERS,
    ),
    "momentum_dtype": Field(
        "float32",
        "storage of the sgd momentum: float32, or bfloat16 (vit_jax's option: half the memory)",
        MOMENTUM_DTYPES,
    ),
    "base_lr": Field(
        0.01,
        "peak learning rate, reached after the warm-up; fine-tuning also takes 'sweep': "
        "one run per --sweep_lrs rate, the best on minival retrained on train+minival (the "
        "paper's protocol)",
    ),
    "sweep_lrs": Field("0.001,0.003,0.01,0.03", "comma-separated learning rates that --base_lr=sweep tries"),
    "weight_decay": Field(0.0, "decoupled weight decay (multiplied by the learning rate)"),
    "decay_type": Field("cosine", "learning-rate decay after the warm-up: cosine or linear", DECAY_TYPES),
    "total_steps": Field(500, "optimizer steps in all"),
    "warmup_steps": Field(100, "linear warm-up steps"),
    "batch_size": Field(512, "global batch size (over all replicas and accumulation steps)"),
    "accum_steps": Field(
        "auto",
        "split each batch into this many micro-batches, their gradients summed (the same update); "
        "auto: the fewest whose step fits the device's memory",
    ),
    "grad_norm_clip": Field(1.0, "clip the global norm of the all-reduced gradient (0 = off)"),
}

# How the run proceeds: its compiled loops, checkpoints and resuming.
_LOOP = {
    "steps_per_loop": Field(50, "optimizer steps per compiled loop call (host round trip)"),
    "checkpoint_every": Field(100, "checkpoint every N steps (0 = only at the end)"),
    "keep_checkpoints": Field(3, "how many checkpoints to keep"),
    "allow_config_change": Field(
        False,
        "resume a workdir whose config.json differs from these flags in more than where and how long "
        "it runs, and record the new config",
    ),
}

# How the model is measured: during training, and the few-shot trainer's probes.
_EVALUATION = {
    "eval_splits": Field("test=test", "comma-separated name=split pairs evaluated every --eval_every steps"),
    "eval_every": Field(100, "evaluate every N steps (0 = only at the end)"),
    "evals": Field(
        "",
        'the evaluators as JSON: {"NAME": {"type": TYPE, "every": N, "split": SPLIT, ...}, ...}; types: '
        "classification, fewshot, topk, or MODULE:TYPE for one registered in MODULE; keys left out "
        "take the flags' values ('' = classification on --eval_splits, few-shot with --fewshot_datasets)",
    ),
    "fewshot_datasets": Field("", "comma-separated datasets for few-shot linear probes during training"),
    "fewshot_every": Field(0, "run the few-shot probes every N steps (0 = only at the end)"),
    "fewshot_shots": Field("1,5,10,25", "comma-separated shots per class for the few-shot probes"),
    "fewshot_seeds": Field(1, "random draws of the few-shot training examples"),
    "fewshot_l2_reg": Field(
        "1024",
        "L2 regulariser of the closed-form few-shot probe: a positive number (default 2^10) or 'sweep'",
    ),
    "fewshot_batch_size": Field(256, "batch size for few-shot feature extraction"),
    "test_split": Field("test", "split the few-shot probes are scored on"),
    "shots": Field("1,5,10,25", "comma-separated training examples per class, e.g. 1,5,10,25"),
    "seeds": Field(3, "random draws of the k-shot training set per shot count (mean and std reported)"),
    "l2_reg": Field(
        "1024", "ridge regulariser: a positive number (default 2^10) or 'sweep' (chosen on held-out train)"
    ),
}

# What the step runs on.
_HARDWARE = {
    "engine": Field(
        "tf",
        "what runs the step: tf (tf.distribute: TPUStrategy, MirroredStrategy, MultiWorkerMirroredStrategy) "
        "or jax (Keras on JAX: the whole step one XLA program, data-parallel over every device); "
        "tf.data feeds both",
        ENGINES,
    ),
    "strategy": Field("auto", "auto, tpu, gpu, cpu or multi_worker (TF_CONFIG)", STRATEGIES),
    "tpu": Field("", "TPU name or 'local' (TPU VM) for --strategy=tpu"),
    "cpu_devices": Field(1, "split the CPU into N logical devices (multi-replica testing)"),
    "cpu_threads": Field(
        0,
        "threads of TensorFlow's CPU kernels (0 = one per core); sums are split by the count, so "
        "numbers repeat across machines only at the same count (the demo uses 2)",
    ),
    "mixed_precision": Field(
        "auto",
        "compute dtype: auto (bfloat16 where it measured faster: TPUs, GPUs of compute capability "
        "8.0+, CPUs with AMX or AVX-512 BF16 with XLA off for models ViT-Ti wide "
        "or wider on 64+ patches; float32 elsewhere), none (float32), bfloat16, or float16 (GPUs, with "
        "loss scaling)",
        PRECISIONS,
    ),
    "jit_compile": Field(
        "auto",
        "XLA for the step: auto (on GPUs; off on CPU, where the step measured slower with it), "
        "true (any device and replica count) or false",
        JIT_COMPILE,
    ),
    "device_memory_gb": Field(
        0.0,
        "memory per replica that --accum_steps=auto fits the step into (0 = detect: the GPU's "
        "memory, or the available RAM on CPU; TPUs need it set)",
    ),
}

# Where the run writes, and what it prints.
_OUTPUT = {
    "workdir": Field("", "where checkpoints, TensorBoard logs, config.json, results.json and model.npz go"),
    "verbose": Field(False, "show TensorFlow's own start-up and runtime log lines"),
}

FIELDS = {
    **in_group("data", _DATA),
    **in_group("model", _MODEL),
    **in_group("optimization", _OPTIMIZATION),
    **in_group("loop", _LOOP),
    **in_group("evaluation", _EVALUATION),
    **in_group("hardware", _HARDWARE),
    **in_group("output", _OUTPUT),
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
        default = FIELDS[name].default
        if name in WORD_OR_NUMBER or name in TEXT_OR_DATA:
            default = ml_collections.FieldReference(default, field_type=object)
        config[name] = default
    return config
