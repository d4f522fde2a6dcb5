"""Fine-tune a ViT on an image-classification dataset: the paper's transfer recipe.

    python -m trainers.finetune --dataset=oxford_iiit_pet --workdir=/tmp/pets

Defaults come from configs/finetune.py (per dataset); every flag overrides. Re-running the
same command on the same workdir resumes from its last checkpoint.
"""

import sys

from configs import finetune as finetune_config
from trainers import common, experiment


def get_config(dataset="oxford_iiit_pet"):
    return finetune_config.get_config(dataset)


def run(config):
    """Fine-tunes per `config` (configs.finetune.get_config(...) with changes); returns results."""
    return experiment.run(config)


def main(argv=None):
    return common.cli(run, get_config, argv)


if __name__ == "__main__":
    sys.exit(main())
