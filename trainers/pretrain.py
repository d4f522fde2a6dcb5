"""Pre-train a ViT from scratch: the paper's upstream recipe (Adam, weight decay, pre-logits).

    python -m trainers.pretrain --dataset=imagenet2012 --manual_dir=/data/imagenet --workdir=/tmp/in1k

Defaults come from configs/pretrain.py; every flag overrides. With --fewshot_datasets, linear
few-shot probes of the frozen representation are logged every --fewshot_every steps and at
the end. The exported WORKDIR/model.npz loads into fine-tuning with --weights=WORKDIR/model.npz.
"""

import sys

from configs import pretrain as pretrain_config
from trainers import common, experiment


def get_config(dataset="imagenet2012", recipe=None, model=None):
    return pretrain_config.get_config(dataset, recipe=recipe, model=model)


def run(config):
    """Pre-trains per `config` (configs.pretrain.get_config(...) with changes); returns results."""
    evaluators = []
    datasets = [d.strip() for d in config.fewshot_datasets.split(",") if d.strip()]
    if datasets:
        evaluators.append((config.fewshot_every, "fewshot", _fewshot_factory(config, datasets)))
    return experiment.run(config, evaluators=evaluators)


def _fewshot_factory(config, datasets):
    """make(strategy) -> evaluate(model): the few-shot probes, checked before training starts."""

    def make(strategy):
        from trainers import fewshot

        try:
            evaluator = fewshot.FewShotEvaluator(
                datasets, data_dir=config.data_dir or None, image_size=config.image_size,
                batch_size=config.fewshot_batch_size, shots=config.fewshot_shots, seeds=config.fewshot_seeds,
                l2_reg=config.fewshot_l2_reg, strategy=strategy)
        except fewshot.FewShotError as e:
            raise common.UsageError(f"few-shot evaluation: {e}") from None
        return evaluator.evaluate

    return make


def main(argv=None):
    return common.cli(run, get_config, argv)


if __name__ == "__main__":
    sys.exit(main())
