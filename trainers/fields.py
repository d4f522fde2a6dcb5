"""The trainers' field schema: what each configuration field means, its allowed values and its topic.

Every field's default is configs/fields.py's (plain data, what the presets start from); here each
field gets its help text, the values it may take and the topic of `--help` it is listed under.
The allowed values are the ones the module that acts on the field declares (the training loop
its losses, trainers/optimizers.py its optimizers, ...), imported here, so a flag cannot offer a
value its code does not take. The trainers' command-line flags, their `--help`, validation and the
flag table of docs/reference/flags.md are generated from here (trainers/flags.py,
trainers/validation.py, trainers/flag_table.py).
"""

import dataclasses

from configs.fields import DEFAULTS
from configs.recipes import RECIPES
from keras_vit import posembs
from keras_vit.masked_patches import TARGETS as MASKED_TARGETS
from keras_vit.models import CLASSIFIERS
from trainers.data.augreg import AUGREG_LEVELS
from trainers.distribute import STRATEGIES
from trainers.engines import ENGINES, JIT_COMPILE
from trainers.numerics import LOSSES
from trainers.objectives import OBJECTIVES
from trainers.optimizers import DECAY_TYPES, MOMENTUM_DTYPES, OPTIMIZERS
from trainers.precision import PRECISIONS


@dataclasses.dataclass(frozen=True)
class Field:
    help: str
    choices: tuple = ()
    group: str = ""  # a key of GROUPS, set by in_group
    default: object = None  # configs/fields.py's DEFAULTS, set by in_group


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
    """`fields` ({name: Field}) declared under the topic `group`, with their defaults."""
    if group not in GROUPS:
        raise ValueError(f"group must be one of {', '.join(GROUPS)}, got {group!r}")
    missing = [name for name in fields if name not in DEFAULTS]
    if missing:
        raise ValueError(f"fields without a default in configs/fields.py: {', '.join(missing)}")
    return {
        name: dataclasses.replace(field, group=group, default=DEFAULTS[name])
        for name, field in fields.items()
    }


# The registered position-embedding types (keras_vit/posembs): the first is the default.
POSEMB_TYPES = posembs.names()


def _posemb_help():
    """'position information: learned_1d (official), ... or none', from each type's summary."""
    named = [f"{kind.name} ({kind.summary})" if kind.summary else kind.name for kind in posembs.types()]
    return "position information: " + ", ".join(named[:-1]) + " or " + named[-1]


# What to train on, and how its images are prepared.
_DATA = {
    "dataset": Field("TFDS name (oxford_iiit_pet, cifar10, imagenet2012, ...), folder:PATH, or digits"),
    "data_dir": Field("TFDS data_dir holding the prepared dataset ('' = TFDS default)"),
    "manual_dir": Field("directory with manually downloaded archives (imagenet2012)"),
    "train_split": Field("TFDS split to train on, e.g. train[:90%]"),
    "examples_per_class": Field("train on N examples of each class, drawn with --seed (0 = all)"),
    "crop_min_area": Field(
        "smallest area of the random training crop, a fraction of the image (paper: 0.05)"
    ),
    "random_flip": Field(
        "random horizontal flips in training (off for digits: a mirrored digit is another shape)"
    ),
    "augreg": Field(
        "AugReg level (Steiner et al.): sets --randaug and --mixup; none, light1, light2, medium1, "
        "medium2, strong1 or strong2",
        AUGREG_LEVELS,
    ),
    "randaug": Field(
        "RandAugment in training: N,M (N ops of magnitude M per image, e.g. 2,15), none, or level "
        "(--augreg's)"
    ),
    "mixup": Field(
        "Mixup in training: Beta concentration p of the mixing weight (e.g. 0.5; 0 = off), or level "
        "(--augreg's); the labels become soft targets"
    ),
    "pp_train": Field(
        "training preprocessing as registered ops, big_vision-style: e.g. 'decode|inception_crop(0.05)|"
        "resize(224)|flip_lr|value_range(-1,1)|mixup(0.5)' (batch ops such as mixup last); replaces "
        "--crop_min_area, --random_flip, --augreg, --randaug and --mixup ('' = the ops those give)"
    ),
    "pp_eval": Field(
        "evaluation preprocessing as registered ops, e.g. 'decode|resize(224)|value_range(-1,1)' "
        "('' = resize to --image_size)"
    ),
}

# The model: its shape, its initial weights, its regularisation.
_MODEL = {
    "model": Field(
        "official model name: ViT-Ti_16, ViT-S_16, ViT-B_16, ..., ViT-H_14, or a hybrid: "
        "R+ViT-Ti_16, R26+ViT-S_32, R50+ViT-B_16, R50+ViT-L_32, ..."
    ),
    "weights": Field(
        "initial weights: registry name, Hub name (hf-hub:timm/..., hf://google/...), path to "
        ".npz/.weights.h5/.keras, a timm/transformers .safetensors file or folder, a trainer's "
        "workdir (its model.npz), or none"
    ),
    "image_size": Field("training and evaluation resolution (pixels, square)"),
    "patch_size": Field("override the variant's patch size (0 = the variant's)"),
    "hidden_size": Field("override the variant's hidden size (0 = the variant's)"),
    "num_layers": Field("override the variant's depth (0 = the variant's)"),
    "num_heads": Field("override the variant's attention heads (0 = the variant's)"),
    "mlp_dim": Field("override the variant's MLP width (0 = the variant's)"),
    "classifier": Field("token (class token) or gap (global average pooling)", CLASSIFIERS),
    "pre_logits": Field("add the tanh pre-logits layer (size = hidden size) before the head"),
    "posemb": Field(_posemb_help(), POSEMB_TYPES),
    "dropout_rate": Field("dropout rate in the encoder"),
    "stochastic_depth": Field(
        "stochastic depth: drop rate of the last block's residual branches (linear from 0 at the first)"
    ),
    "new_head": Field(
        "start from a zero head even if the weights have one of the right size (the paper's recipe)"
    ),
    "seed": Field("random seed (model init, data order, augmentation)"),
}

# What is learned and how: the objective, the optimizer and its schedule, the batch.
_OPTIMIZATION = {
    "loss": Field(
        "softmax (cross-entropy, one label per image) or sigmoid (per-class binary "
        "cross-entropy, multi-label data; a new head starts with bias -10; evaluation reports "
        "prec@1)",
        LOSSES,
    ),
    "recipe": Field(
        "pre-training recipe, a row of the paper's Table 3: imagenet2012, "
        "imagenet21k or jft (default: the dataset's; sets lr, decay, weight decay, dropout, loss "
        "and steps)",
        tuple(RECIPES),
    ),
    "objective": Field(
        "what pre-training learns: classification (of the labels) or masked_patch (the paper's "
        "self-supervised masked patch prediction: 50% of the patch embeddings corrupted, their "
        "--masked_target predicted; labels are not read)",
        OBJECTIVES,
    ),
    "masked_target": Field(
        "with --objective=masked_patch, what is predicted of each corrupted patch: mean_color (its "
        "mean colour, 3 bits per channel: 512 classes), downsampled (4x4 cells of 3-bit colour: "
        "16 x 512 classes) or l2 (its pixels, squared error)",
        MASKED_TARGETS,
    ),
    "optimizer": Field(
        "sgd (optax-style momentum 0.9: m = 0.9 m + g, w -= lr m) or adam (beta 0.9, "
        "0.999; decoupled weight decay)",
        OPTIMIZERS,
    ),
    "momentum_dtype": Field(
        "storage of the sgd momentum: float32, or bfloat16 (vit_jax's option: half the memory)",
        MOMENTUM_DTYPES,
    ),
    "base_lr": Field(
        "peak learning rate, reached after the warm-up; fine-tuning also takes 'sweep': "
        "one run per --sweep_lrs rate, the best on minival retrained on train+minival (the "
        "paper's protocol)"
    ),
    "sweep_lrs": Field("comma-separated learning rates that --base_lr=sweep tries"),
    "weight_decay": Field("decoupled weight decay (multiplied by the learning rate)"),
    "decay_type": Field("learning-rate decay after the warm-up: cosine or linear", DECAY_TYPES),
    "total_steps": Field("optimizer steps in all"),
    "warmup_steps": Field("linear warm-up steps"),
    "batch_size": Field("global batch size (over all replicas and accumulation steps)"),
    "accum_steps": Field(
        "split each batch into this many micro-batches, their gradients summed (the same update); "
        "auto: the fewest whose step fits the device's memory"
    ),
    "grad_norm_clip": Field("clip the global norm of the all-reduced gradient (0 = off)"),
}

# How the run proceeds: its compiled loops, checkpoints and resuming.
_LOOP = {
    "steps_per_loop": Field("optimizer steps per compiled loop call (host round trip)"),
    "checkpoint_every": Field("checkpoint every N steps (0 = only at the end)"),
    "keep_checkpoints": Field("how many checkpoints to keep"),
    "allow_config_change": Field(
        "resume a workdir whose config.json differs from these flags in more than where and how long "
        "it runs, and record the new config"
    ),
}

# How the model is measured: during training, and the few-shot trainer's probes.
_EVALUATION = {
    "eval_splits": Field("comma-separated name=split pairs evaluated every --eval_every steps"),
    "eval_every": Field("evaluate every N steps (0 = only at the end)"),
    "evals": Field(
        'the evaluators as JSON: {"NAME": {"type": TYPE, "every": N, "split": SPLIT, ...}, ...}; types: '
        "classification, fewshot, topk, or MODULE:TYPE for one registered in MODULE; keys left out "
        "take the flags' values ('' = classification on --eval_splits, few-shot with --fewshot_datasets)"
    ),
    "fewshot_datasets": Field("comma-separated datasets for few-shot linear probes during training"),
    "fewshot_every": Field("run the few-shot probes every N steps (0 = only at the end)"),
    "fewshot_shots": Field("comma-separated shots per class for the few-shot probes"),
    "fewshot_seeds": Field("random draws of the few-shot training examples"),
    "fewshot_l2_reg": Field(
        "L2 regulariser of the closed-form few-shot probe: a positive number (default 2^10) or 'sweep'"
    ),
    "fewshot_batch_size": Field("batch size for few-shot feature extraction"),
    "test_split": Field("split the few-shot probes are scored on"),
    "shots": Field("comma-separated training examples per class, e.g. 1,5,10,25"),
    "seeds": Field("random draws of the k-shot training set per shot count (mean and std reported)"),
    "l2_reg": Field(
        "ridge regulariser: a positive number (default 2^10) or 'sweep' (chosen on held-out train)"
    ),
}

# What the step runs on.
_HARDWARE = {
    "engine": Field(
        "what runs the step: tf (tf.distribute: TPUStrategy, MirroredStrategy, MultiWorkerMirroredStrategy) "
        "or jax (Keras on JAX: the whole step one XLA program, data-parallel over every device); "
        "tf.data feeds both",
        ENGINES,
    ),
    "strategy": Field("auto, tpu, gpu, cpu or multi_worker (TF_CONFIG)", STRATEGIES),
    "tpu": Field("TPU name or 'local' (TPU VM) for --strategy=tpu"),
    "cpu_devices": Field("split the CPU into N logical devices (multi-replica testing)"),
    "cpu_threads": Field(
        "threads of TensorFlow's CPU kernels (0 = one per core); sums are split by the count, so "
        "numbers repeat across machines only at the same count (the demo uses 2)"
    ),
    "mixed_precision": Field(
        "compute dtype: auto (bfloat16 where it measured faster: TPUs, GPUs of compute capability "
        "8.0+, CPUs with AMX or AVX-512 BF16 with XLA off for models ViT-Ti wide "
        "or wider on 64+ patches; float32 elsewhere), none (float32), bfloat16, or float16 (GPUs, with "
        "loss scaling)",
        PRECISIONS,
    ),
    "jit_compile": Field(
        "XLA for the step: auto (on GPUs; on CPUs for float32 steps of models ViT-Ti wide or wider, "
        "off for bfloat16 and narrower models there), true (any device and replica count) or false",
        JIT_COMPILE,
    ),
    "device_memory_gb": Field(
        "memory per replica that --accum_steps=auto fits the step into (0 = detect: the GPU's "
        "memory, or the available RAM on CPU; TPUs need it set)"
    ),
}

# Where the run writes, and what it prints.
_OUTPUT = {
    "workdir": Field("where checkpoints, TensorBoard logs, config.json, results.json and model.npz go"),
    "verbose": Field("show TensorFlow's own start-up and runtime log lines"),
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
if set(FIELDS) != set(DEFAULTS):
    raise ValueError(f"defaults without a declaration: {', '.join(sorted(set(DEFAULTS) - set(FIELDS)))}")
