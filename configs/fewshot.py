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

import ml_collections

from configs import pretrain as pretrain_config

ARCHITECTURE_FIELDS = ("model", "image_size", "patch_size", "hidden_size", "num_layers", "num_heads",
                       "mlp_dim", "classifier")


def get_config(dataset="cifar10"):
    c = ml_collections.ConfigDict()
    c.dataset = dataset
    c.data_dir = ""  # TFDS data_dir ("" = the TFDS default)
    c.manual_dir = ""
    c.train_split = "train"  # k-shot examples are drawn from here
    c.test_split = "test"  # accuracy is measured here
    c.workdir = ""
    # Model: an official name, or "pixels" (raw resized pixels, no model).
    c.model = "ViT-B_16"
    c.weights = "none"  # registry name, path (.npz/.weights.h5/.keras) or "none" (random init)
    c.image_size = 224
    c.patch_size = 0  # 0 = the variant's; > 0 overrides (small custom models)
    c.hidden_size = 0
    c.num_layers = 0
    c.num_heads = 0
    c.mlp_dim = 0
    c.classifier = "token"
    c.pre_logits = False  # True: a pre-logits layer of the hidden size; else as the weights file says
    c.dropout_rate = 0.0  # the model is only run in inference mode; kept for the shared model builder
    # The probes.
    c.shots = "1,5,10,25"
    c.seeds = 3
    c.l2_reg = "1024"  # a positive number, or "sweep"
    c.batch_size = 256  # feature-extraction batch (global)
    c.seed = 0  # initialisation of a model without weights
    # Hardware.
    c.strategy = "auto"
    c.tpu = ""
    c.cpu_devices = 1
    if dataset.split(":")[0] == "digits":
        pre = pretrain_config.get_config("digits")
        for name in ARCHITECTURE_FIELDS:
            c[name] = pre[name]
        c.batch_size = 512
    return c
