"""Pre-training presets: the paper's upstream recipes (Dosovitskiy et al. 2021, appendix B.1, Table 3).

`--recipe` picks a row of the paper's Table 3; by default the one of the dataset (imagenet2012 ->
imagenet2012, imagenet21k -> imagenet21k, jft -> jft, anything else -> imagenet2012, the
from-scratch-on-a-mid-size-dataset row). Every recipe: Adam (beta1 0.9, beta2 0.999), global batch
4096, 10k linear warm-up steps, global-norm clip 1, resolution 224, a pre-logits (tanh) layer of
the hidden size. Weight decay is decoupled, as flax.optim.Adam's `weight_decay`: w -= lr * wd * w
each step. Steps = epochs x the dataset's training images / 4096, rounded up. ImageNet-21k and JFT
are multi-label, so their recipes use sigmoid cross-entropy (--loss=sigmoid, as big_vision's
ImageNet-21k config); imagenet2012 uses softmax.

imagenet2012 (Table 3, row "ViT-* / ImageNet"): 300 epochs of 1,281,167 images = 93,836 steps,
    lr 3e-3, cosine decay, weight decay 0.3, dropout 0.1.
    python -m trainers.pretrain --dataset=imagenet2012 --manual_dir=/data/imagenet \
        --workdir=gs://bucket/vit_b16_in1k --strategy=tpu --tpu=local
    Expected (paper, Table 5 / Figure 3): ViT-B/16 pre-trained on ImageNet alone reaches about 78 %
    top-1 after fine-tuning at 384 (it needs ImageNet-21k or more data to beat ResNets).
imagenet21k (rows "ViT-B/{16,32}" and "ViT-L/{16,32} / ImageNet-21k"): 90 epochs of 14,197,122
    images = 311,949 steps, lr 1e-3, linear decay, weight decay 0.03, dropout 0.1.
    python -m trainers.pretrain --dataset=folder:/data/imagenet21k --recipe=imagenet21k \
        --workdir=gs://bucket/vit_b16_in21k --strategy=tpu --tpu=local
    Expected (paper, Table 5): ViT-B/16 pre-trained this way reaches about 84 % ImageNet top-1
    after fine-tuning at 384 px.
jft (rows "ViT-* / JFT-300M"): 7 epochs of 303M images = 517,823 steps, linear decay, weight
    decay 0.1, dropout 0, lr by model: B/16, B/32 and R50+B/16 8e-4; L/32 6e-4; L/16 4e-4 (7 or
    14 epochs in the paper; 7 here); H/14 3e-4 (14 epochs: 1,035,645 steps). Variants without a
    row (Ti, S, B/8) take the B rate.
    python -m trainers.pretrain --dataset=folder:/data/jft --recipe=jft --model=ViT-L_16
    Expected (paper, Table 2): ImageNet top-1 after fine-tuning 87.76 % (L/16), 88.55 % (H/14).
folder:PATH: the imagenet2012 recipe; set --total_steps / --warmup_steps to fit the data.
    python -m trainers.pretrain --dataset=folder:/data/imgs --total_steps=10000 --warmup_steps=1000
digits: a tiny ViT pre-trained from scratch on CPU (the demo's upstream run): the imagenet2012
    recipe scaled down (600 steps, 100 warm-up, lr 1e-3, linear decay, weight decay 0.1, no dropout).
    python -m trainers.pretrain --dataset=digits --workdir=/tmp/digits_pre
    Measured: test accuracy 0.883 after its 600 steps, 31 s on 2 CPU cores.
The result loads into fine-tuning and few-shot evaluation with --weights=WORKDIR/model.npz.
Every recipe leaves AugReg off (--augreg=none): these are the original paper's recipes. The AugReg
checkpoints (Steiner et al.) used levels none to strong1 with dropout and stochastic depth 0 or 0.1
(docs/guides/training.md, "AugReg"); e.g. --augreg=medium1 for ViT-B_16, as its file name says
(aug_medium1).
"""

import math

from configs import DIGITS, TRANSFER_SPLITS
from configs.fields import OWN_FIELDS, TRAINING, fields
from configs.recipes import JFT_BY_MODEL, RECIPES

BATCH_SIZE = 4096
WARMUP_STEPS = 10_000


def default_recipe(dataset):
    return dataset if dataset in RECIPES else "imagenet2012"


def recipe_steps(images, epochs, batch_size=BATCH_SIZE):
    return math.ceil(epochs * images / batch_size)


def get_config(dataset="imagenet2012", recipe=None, model=None):
    """The preset for `dataset`, with the Table 3 row of `recipe` (default: the dataset's) for `model`."""
    # From the declared defaults (configs/fields.py): ViT-B/16, from scratch, 224 px, clip 1.
    c = fields(TRAINING + OWN_FIELDS["trainers.pretrain"])
    c.dataset = dataset
    c.model = model or c.model
    c.recipe = recipe or default_recipe(dataset)
    if c.recipe not in RECIPES:
        # The flag's allowed values are checked with the others; keep the preset buildable meanwhile.
        c.recipe = default_recipe(dataset)
    row = RECIPES[c.recipe]
    epochs = row["epochs"]
    c.base_lr = row["base_lr"]
    if c.recipe == "jft" and c.model in JFT_BY_MODEL:
        c.base_lr, epochs = JFT_BY_MODEL[c.model]
    c.decay_type = row["decay_type"]
    c.weight_decay = row["weight_decay"]
    c.dropout_rate = row["dropout_rate"]
    c.loss = row.get("loss", c.loss)
    c.total_steps = recipe_steps(row["images"], epochs)
    c.warmup_steps = WARMUP_STEPS
    c.batch_size = BATCH_SIZE
    c.optimizer = "adam"
    c.pre_logits = True
    c.eval_every = 5000
    c.checkpoint_every = 1000
    c.steps_per_loop = 100
    if dataset in TRANSFER_SPLITS:
        c.train_split, c.eval_splits = TRANSFER_SPLITS[dataset]
    if dataset.split(":")[0] == "digits":
        _digits(c)
    return c


def _digits(c):
    c.update(DIGITS)
    c.base_lr = 1e-3
    c.decay_type = "linear"
    c.weight_decay = 0.1
    c.total_steps = 600
    c.warmup_steps = 100
    c.dropout_rate = 0.0
    c.eval_every = 200
    c.checkpoint_every = 200
