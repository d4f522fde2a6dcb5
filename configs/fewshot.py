"""Few-shot linear-probe presets: the paper's evaluation of frozen representations.

For each shot count k and each seed, k training images per class are drawn, their frozen
features (pre-logits, else the pooled token) whitened with the k-shot set's statistics, and a
closed-form ridge regression onto {-1, 1}^K targets is solved; the test-split accuracy is
averaged over seeds. Defaults as big_vision's few-shot evaluator: shots 1, 5, 10, 25, three
seeds, l2 regulariser 2^10 (or --l2_reg=sweep: chosen per k on a held-out 20% of train).

Any dataset the trainers read, any model and weights:
    python -m trainers.fewshot --dataset=cifar10 --model=ViT-B_16 --weights=imagenet21k \
        --image_size=224 --workdir=/tmp/fewshot_cifar10
    Expected (paper, Figure 3 scale): 10-shot CIFAR-10 accuracy well above 90 % for ImageNet-21k
    ViT-B/16 features; on this CPU use a smaller --image_size and a fake_tfds data_dir to try it.
A pre-trained workdir of trainers.pretrain (its pre-logits are found in the file):
    python -m trainers.fewshot --dataset=digits:5-9 --model=ViT-Ti_16 --weights=/tmp/pre/model.npz \
        --image_size=16 --patch_size=4 --hidden_size=64 --num_layers=2 --num_heads=4 --mlp_dim=128 \
        --workdir=/tmp/fewshot_digits
Raw pixels as features (the baseline every representation should beat):
    python -m trainers.fewshot --dataset=digits:5-9 --model=pixels --image_size=8 --workdir=/tmp/px
digits: the bundled scikit-learn digits, with the architecture of configs/pretrain.py's digits
    preset, so --weights=<that run>/model.npz loads without more flags (its pre-logits included).
"""

from configs import pretrain as pretrain_config
from configs.fields import COMMON, fields

# Where the few-shot trainer's flags mean something else than the training trainers'.
HELP = {
    "model": "official model name (ViT-Ti_16, ..., R50+ViT-B_16), or pixels (raw pixels as features)",
    "batch_size": "global batch size of the feature extraction",
}

ARCHITECTURE_FIELDS = ("model", "image_size", "patch_size", "hidden_size", "num_layers", "num_heads",
                       "mlp_dim", "classifier")


def get_config(dataset="cifar10"):
    # Data, model ("pixels": raw resized pixels, no model; pre_logits: with --weights=none add
    # the layer, else the weights file decides), hardware: as the other trainers; then the probes
    # (k-shot sets from train_split, accuracy on test_split).
    c = fields(COMMON + ("test_split", "shots", "seeds", "l2_reg", "batch_size"))
    c.dataset = dataset
    c.batch_size = 256  # feature-extraction batch (global)
    if dataset.split(":")[0] == "digits":
        pre = pretrain_config.get_config("digits")
        for name in ARCHITECTURE_FIELDS:
            c[name] = pre[name]
        c.batch_size = 512
    return c
