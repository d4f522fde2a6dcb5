"""Experiment presets: one module per trainer, `get_config(dataset)` returns plain data.

Plain data: nothing here imports the trainers or the library, so importing a preset loads
neither TensorFlow nor Keras. Every field's default is in configs/fields.py; what it means, its
allowed values and its topic are the trainers' schema (trainers/fields.py). Every field is also
a command-line flag of the trainer (`--total_steps=...`), and a flag that is given overrides the
preset. `base_config()` holds the
fields both training trainers share. The demo's stages are presets too (configs/demo.py).
"""

from configs.fields import COMMON, TRAINING, fields


def base_fields():
    """Where the data and workdir are, which model, which hardware: every trainer has these."""
    return fields(COMMON)


def base_config():
    """Fields shared by fine-tuning and pre-training, at their declared defaults; presets fill them in."""
    return fields(TRAINING)


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
# The model: the 8x8 scans upsampled to 16x16 in 4x4 patches (16 tokens and the class token),
# width 64, 4 blocks. `make demo` uses the same model (trainers/demo.py).
DIGITS_ARCHITECTURE = dict(
    model="ViT-Ti_16",
    image_size=16,
    patch_size=4,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    mlp_dim=128,
    classifier="token",
)
DIGITS = dict(
    DIGITS_ARCHITECTURE,
    weights="none",
    crop_min_area=0.5,
    random_flip=False,
    batch_size=64,
    steps_per_loop=50,
)
