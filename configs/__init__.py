"""Experiment presets: one module per trainer, `get_config(dataset)` returns plain data.

Every field is also a command-line flag of the trainer (`--total_steps=...`); a flag that is
given overrides the preset. `base_config()` holds the fields both trainers share.
"""

import ml_collections


def base_fields():
    """Where the data and workdir are, which model, which hardware: every trainer has these."""
    c = ml_collections.ConfigDict()
    # Data.
    c.dataset = ""
    c.data_dir = ""  # TFDS data_dir ("" = the TFDS default, ~/tensorflow_datasets)
    c.manual_dir = ""  # where manually downloaded archives are (imagenet2012)
    c.train_split = "train"
    c.workdir = ""
    # Model.
    c.model = "ViT-B_16"  # an official name (keras_vit.VARIANTS)
    c.weights = "none"  # registry name, path (.npz/.weights.h5/.keras) or "none"
    c.image_size = 224
    c.patch_size = 0  # 0 = the variant's; > 0 overrides (small custom models)
    c.hidden_size = 0
    c.num_layers = 0
    c.num_heads = 0
    c.mlp_dim = 0
    c.classifier = "token"
    c.pre_logits = False  # a tanh "pre-logits" layer of the hidden size before the head
    c.dropout_rate = 0.0
    c.seed = 0
    # Hardware.
    c.strategy = "auto"
    c.tpu = ""
    c.cpu_devices = 1
    return c


def base_config():
    """Fields shared by fine-tuning and pre-training; the trainer presets fill them in."""
    c = base_fields()
    c.eval_splits = "test=test"  # name=split pairs, comma-separated
    c.examples_per_class = 0  # > 0: train on N examples of each class only (drawn with seed)
    c.crop_min_area = 0.05  # training crops cover 5%-100% of the image (the paper's inception crop)
    c.random_flip = True
    # Optimisation.
    c.loss = "softmax"  # or "sigmoid": per-class binary cross-entropy (multi-label upstream data)
    c.optimizer = "sgd"
    c.momentum_dtype = "float32"  # sgd only; vit_jax stores it in bfloat16
    c.base_lr = 0.01
    c.weight_decay = 0.0
    c.decay_type = "cosine"
    c.total_steps = 500
    c.warmup_steps = 100
    c.batch_size = 512  # global batch, over all replicas and accumulation steps
    c.accum_steps = 1
    c.grad_norm_clip = 1.0  # 0 = no clipping
    # Loop, logging, checkpoints.
    c.steps_per_loop = 50
    c.eval_every = 100  # 0 = only at the end
    c.checkpoint_every = 100  # 0 = only at the end (and on SIGTERM)
    c.keep_checkpoints = 3
    c.mixed_precision = "none"
    c.jit_compile = "auto"
    return c


# The paper's transfer datasets: (train split, eval splits) as vit_jax's input pipeline uses them.
TRANSFER_SPLITS = {
    "oxford_iiit_pet": ("train[:90%]", "minival=train[90%:],test=test"),
    "oxford_flowers102": ("train[:90%]", "minival=train[90%:],test=test"),
    "cifar10": ("train[:98%]", "minival=train[98%:],test=test"),
    "cifar100": ("train[:98%]", "minival=train[98%:],test=test"),
    "imagenet2012": ("train[:99%]", "minival=train[99%:],test=validation"),
}


# The digits presets' model and input: a ViT small enough to train from scratch on the 1,797
# UCI digits on a laptop CPU. On 8 x 8 scans the paper's 5% crop is 2 x 2 pixels, and a
# mirrored digit is another shape, hence larger crops and no flips.
DIGITS = dict(model="ViT-Ti_16", weights="none", image_size=32, patch_size=8, hidden_size=64,
              num_layers=2, num_heads=4, mlp_dim=128, crop_min_area=0.5, random_flip=False,
              batch_size=64, steps_per_loop=50)
