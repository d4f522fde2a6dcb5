"""Pre-train a ViT from scratch: the paper's upstream recipes (appendix Table 3).

    python -m trainers.pretrain --dataset=imagenet2012 --manual_dir=/data/imagenet --workdir=/tmp/in1k
    python -m trainers.pretrain --dataset=digits --workdir=/tmp/digits_pre

Defaults come from configs/pretrain.py (--recipe, by default the dataset's); every flag
overrides. With --fewshot_datasets, linear few-shot probes of the frozen representation are
logged every --fewshot_every steps and at the end. The exported WORKDIR/model.npz loads into
fine-tuning with --weights=WORKDIR/model.npz.
"""

from configs import pretrain as pretrain_config
from keras_vit import commands
from trainers import cli, training


def get_config(dataset="imagenet2012", recipe=None, model=None):
    return pretrain_config.get_config(dataset, recipe=recipe, model=model)


def run(config, weights_params=None):
    """Pre-trains per `config` (configs.pretrain.get_config(...) with changes); returns results.
    `weights_params`: the --weights file's parameters where the command line read them."""
    return training.run(config, weights_params=weights_params)


def main(argv=None):
    return cli.main(run, get_config, argv, about=__doc__)


if __name__ == "__main__":
    commands.exit_with(main)
