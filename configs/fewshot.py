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
A pre-trained workdir of trainers.pretrain (its pre-logits are found in the file); the digits
preset has the pre-training digits preset's architecture, so no shape flags are needed:
    python -m trainers.pretrain --dataset=digits --workdir=/tmp/digits_pre
    python -m trainers.fewshot --dataset=digits:5-9 --weights=/tmp/digits_pre/model.npz \
        --workdir=/tmp/fewshot_digits
Raw pixels as features (the baseline every representation should beat):
    python -m trainers.fewshot --dataset=digits:5-9 --model=pixels --image_size=8 --workdir=/tmp/px
digits: the bundled scikit-learn digits, with the architecture of configs/pretrain.py's digits
    preset, so --weights=<that run>/model.npz loads without more flags (its pre-logits included).
"""

from configs import DIGITS_ARCHITECTURE
from configs.fields import COMMON, fields

# The few-shot trainer's fields: the common ones, then the probes.
FIELDS = COMMON + ("test_split", "shots", "seeds", "l2_reg", "batch_size")

# Where the few-shot trainer's flags mean something else than the training trainers'.
HELP = {
    "model": "official model name (ViT-Ti_16, ..., R50+ViT-B_16), or pixels (raw pixels as features)",
    "batch_size": "global batch size of the feature extraction",
}


def get_config(dataset="cifar10"):
    # Data, model ("pixels": raw resized pixels, no model; pre_logits: with --weights=none add
    # the layer, else the weights file decides), hardware: as the other trainers; then the probes
    # (k-shot sets from train_split, accuracy on test_split).
    c = fields(FIELDS)
    c.dataset = dataset
    c.batch_size = 256  # feature-extraction batch (global)
    if dataset.split(":")[0] == "digits":
        c.update(DIGITS_ARCHITECTURE)  # the digits pre-training preset's model: its model.npz loads
        c.batch_size = 512
    return c
