"""Fine-tune a ViT on an image-classification dataset: the paper's transfer recipe.

    python -m trainers.finetune --dataset=oxford_iiit_pet --workdir=/tmp/pets
    python -m trainers.finetune --dataset=oxford_iiit_pet --base_lr=sweep --workdir=/tmp/pets_sweep

Defaults come from configs/finetune.py (per dataset); every flag overrides. Re-running the
same command on the same workdir resumes from its last checkpoint. --base_lr=sweep runs the
paper's protocol (trainers/sweep.py): one fine-tune per --sweep_lrs rate, the best on minival,
retrained on train + minival.
"""

from configs import finetune as finetune_config
from keras_vit import commands
from trainers import cli, sweep, training
from trainers.flags import parse_base_lr


def get_config(dataset="oxford_iiit_pet"):
    return finetune_config.get_config(dataset)


def run(config, weights_params=None):
    """Fine-tunes per `config` (configs.finetune.get_config(...) with changes); returns results.

    With config.base_lr = "sweep": the learning-rate sweep, and its summary as the results.
    `weights_params`: the --weights file's parameters where the command line read them.
    """
    base_lr = parse_base_lr(config.base_lr)
    if base_lr == "sweep":
        return sweep.run(config, weights_params=weights_params)
    return training.run(sweep.with_changes(config, base_lr=base_lr), weights_params=weights_params)


def main(argv=None):
    return cli.main(run, get_config, argv, about=__doc__)


if __name__ == "__main__":
    commands.exit_with(main)
