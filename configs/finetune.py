"""Fine-tuning presets: the paper's transfer recipe (Dosovitskiy et al. 2021, appendix B.1.1).

All presets: SGD with momentum 0.9, global batch 512, gradient global-norm clip 1, no weight
decay, linear warm-up then cosine decay, resolution 384, a new zero-initialised head, and
ImageNet-21k pre-trained ViT-B/16 weights. `base_lr` 0.01, or "sweep": the paper's protocol
(appendix B.1.1, Table 4: learning rates {0.001, 0.003, 0.01, 0.03}, chosen on minival):

    python -m trainers.finetune --dataset=oxford_iiit_pet --base_lr=sweep --workdir=/tmp/pets_sweep

runs one fine-tune per rate in `sweep_lrs` on the train split into WORKDIR/lr_<rate>, takes
the rate with the best `minival` accuracy (ties: the smaller rate), retrains with it on the
train split plus minival (`train[:90%]+train[90%:]`) into WORKDIR/final, evaluated on the
other eval splits, and writes the summary to WORKDIR/results.json (trainers/sweep.py). It
needs a `minival` entry in `eval_splits` and one more to report. Per dataset:

oxford_iiit_pet, oxford_flowers102: 500 steps, warm-up 100; train `train[:90%]`, minival
    `train[90%:]`, test `test`.
    python -m trainers.finetune --dataset=oxford_iiit_pet --workdir=/tmp/pets
    Expected (paper, Table 5, ViT-B/16 ImageNet-21k): test accuracy about 94 % (Pets),
    about 99 % (Flowers).
cifar10, cifar100: 10k steps, warm-up 500; train `train[:98%]`, minival `train[98%:]`.
    python -m trainers.finetune --dataset=cifar10 --workdir=/tmp/cifar10
    Expected (vit_jax README, same recipe): test accuracy 98.9 % (CIFAR-10), 92.2 % (CIFAR-100).
imagenet2012: 20k steps, warm-up 500; train `train[:99%]`, minival `train[99%:]`, test
    `validation`; the archives must be in --manual_dir.
    python -m trainers.finetune --dataset=imagenet2012 --manual_dir=/data/imagenet --workdir=/tmp/in1k
    Expected (vit_jax README): validation accuracy 84.6 %.
folder:PATH (one sub-folder per class under PATH/train and PATH/test): the Pets recipe.
    python -m trainers.finetune --dataset=folder:/data/my_images --workdir=/tmp/mine
digits (the bundled scikit-learn digits, 8x8 upsampled): a tiny ViT from scratch on CPU.
    python -m trainers.finetune --dataset=digits --workdir=/tmp/digits
    Measured: test accuracy 0.961 after its 1,500 steps, 90 s on 2 CPU cores.
    No minival split: to sweep, add one, e.g. --base_lr=sweep --train_split=train[:80%]
    --eval_splits=minival=train[80%:],test=test. Measured so: chose 0.03 (minival 0.969),
    test accuracy 0.961, 4 min 47 s on 2 CPU cores.
Any other TFDS image-classification dataset by name gets the Pets recipe with `train` and
`test` splits; override with --train_split / --eval_splits.
"""

import ml_collections

from configs import DIGITS, TRANSFER_SPLITS
from configs.fields import OWN_FIELDS, TRAINING, fields

LONG = {"cifar10": (10_000, 500), "cifar100": (10_000, 500), "imagenet2012": (20_000, 500)}


def get_config(dataset="oxford_iiit_pet"):
    # The declared defaults (configs/fields.py) are the transfer recipe: ViT-B/16, SGD, base_lr
    # 0.01 and the sweep's grid (appendix B.1.1 / Table 4), no weight decay, cosine decay, batch
    # 512, clip 1, no dropout, no pre-logits layer (vit_jax drops it when fine-tuning) and a new
    # zero head even when the loaded one has the right class count (--new_head).
    c = fields(TRAINING + OWN_FIELDS["trainers.finetune"])
    c.dataset = dataset
    c.weights = "imagenet21k"
    c.image_size = 384
    # A number, or "sweep" (see above): the field takes both, so it is typed object.
    c.base_lr = ml_collections.FieldReference(c.base_lr, field_type=object)
    c.total_steps, c.warmup_steps = LONG.get(dataset, (500, 100))
    if dataset in TRANSFER_SPLITS:
        c.train_split, c.eval_splits = TRANSFER_SPLITS[dataset]
    if dataset == "imagenet2012":
        c.eval_every = 1000
        c.checkpoint_every = 1000
    elif dataset in ("cifar10", "cifar100"):
        c.eval_every = 500
        c.checkpoint_every = 500
    if dataset.split(":")[0] == "digits":
        _digits(c)
    return c


def _digits(c):
    """A ViT small enough to train from scratch on the 1,797 UCI digits on a laptop CPU."""
    c.update(DIGITS)
    c.base_lr = 0.1
    c.total_steps = 1500
    c.warmup_steps = 50
    c.eval_every = 500
    c.checkpoint_every = 500
