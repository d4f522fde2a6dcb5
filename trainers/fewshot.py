"""Few-shot linear probes of a frozen model: the paper's measure of a representation.

    python -m trainers.fewshot --dataset=cifar10 --model=ViT-B_16 --weights=imagenet21k --workdir=/tmp/fs
    python -m trainers.fewshot --dataset=digits:5-9 --model=pixels --image_size=8 --workdir=/tmp/px

For every k in --shots and every one of --seeds draws: k training images per class, their
features (pre-logits if the model has them, else the pooled token; or raw pixels with
--model=pixels) whitened with the k-shot set's statistics, a closed-form ridge regression onto
{-1, 1}^K, accuracy on the test split. Features are computed once per split. Writes
WORKDIR/results.json ({k}shot_accuracy, {k}shot_accuracy_std) and TensorBoard scalars under
WORKDIR/eval. Defaults: configs/fewshot.py; every flag overrides.
"""

import sys
import time

import keras
import tensorflow as tf

from configs import fewshot as fewshot_config
from keras_vit import VARIANTS, fileio, initializers
from trainers import actions, cli, engines, image_summaries, plan_pieces
from trainers import results as results_lib
from trainers.console import Console
from trainers.controller import Controller
from trainers.errors import UsageError
from trainers.evaluators.fewshot import FewShotEvaluator, parse_l2_reg, parse_shots
from trainers.features import PIXELS, extract_features  # noqa: F401 (public API)
from trainers.flags import config_to_json
from trainers.linear_probe import fit_ridge, sample_k_per_class  # noqa: F401 (public API)
from trainers.model_builder import build_model
from trainers.validation import validate_common

# The evaluator's name for the command's one dataset (its tags read fewshot/data/...).
_DATA = "data"


def get_config(dataset="cifar10"):
    return fewshot_config.get_config(dataset)


def validate(config):
    """Checks that need only the config; raises UsageError/FewShotError before anything runs."""
    validate_common(
        config,
        models=(PIXELS, *VARIANTS),
        known_fields=fewshot_config.FIELDS,
        checks={"optimization": [_check_batch_size], "evaluation": [_check_probes]},
    )


def _check_batch_size(config):
    if config.batch_size <= 0:
        raise UsageError(f"--batch_size must be positive, got {config.batch_size}.")


def _check_probes(config):
    if config.seeds <= 0:
        raise UsageError(f"--seeds must be positive, got {config.seeds}.")
    parse_shots(config.shots)
    parse_l2_reg(config.l2_reg)


def build_feature_model(config, num_classes, params=None):
    """The frozen model whose representation is probed (PIXELS for the raw-pixel baseline).

    Unlike fine-tuning, a pre-logits layer in the weights file is kept: it is the
    representation the paper probes. `params`: the --weights file's parameters where the command
    line read them.
    """
    if config.model == PIXELS:
        return PIXELS
    keras.utils.set_random_seed(config.seed)
    # No head: the probe fits its own, so the model's would only be a zero-initialised layer
    # that loading reports and nothing uses.
    settings = plan_pieces.model_settings(config)
    with initializers.seeded(config.seed):  # a random-init probe starts as on every engine
        return build_model(
            settings,
            num_classes,
            pre_logits_from_weights=not config.pre_logits,
            include_top=False,
            params=params if settings.weights else None,
        )


def run(config, weights_params=None):
    """Probes per `config` (configs.fewshot.get_config(...) with changes); returns the results dict.
    `weights_params`: the --weights file's parameters where the command line read them."""
    validate(config)
    engine = engines.check(config)
    strategy = engines.strategy_of(config)
    if config.batch_size % strategy.num_replicas_in_sync:
        raise UsageError(
            f"--batch_size {config.batch_size} is not divisible by {strategy.num_replicas_in_sync} replicas."
        )
    console = Console(engine.is_chief(strategy))
    start = time.time()
    evaluator = FewShotEvaluator(
        {_DATA: config.dataset},
        data_dir=config.data_dir or None,
        image_size=config.image_size,
        batch_size=config.batch_size,
        shots=config.shots,
        seeds=config.seeds,
        l2_reg=config.l2_reg,
        strategy=strategy,
        train_split=config.train_split,
        test_split=config.test_split,
        console=console,
    )
    spec = evaluator.specs[_DATA]
    with strategy.scope():
        model = build_feature_model(config, spec.num_classes, weights_params)
    chief = engine.is_chief(strategy)
    summaries = actions.Summaries(config.workdir, chief)
    # The probes print their own summary lines (_finish): the evaluation's own line would repeat them.
    # TensorBoard's tags are the documented fewshot/<k>shot_accuracy (and _std), without _DATA.
    probes = actions.Evaluate(
        evaluator, model, summaries, strategy, console, quiet=True, tag_of=_tensorboard_tag
    )

    def finish(step, scores):
        return _finish(config, evaluator, scores, summaries, console, chief, time.time() - start)

    # The controller's evaluate-only mode: the end of a training run, without the training.
    return Controller(strategy=strategy, evaluations=[probes], finish=finish).evaluate_only()


def _tensorboard_tag(tag):
    """'fewshot/data/10shot_accuracy' -> 'fewshot/10shot_accuracy' (docs/guides/fewshot.md)."""
    return tag.replace(f"fewshot/{_DATA}/", "fewshot/", 1)


def _finish(config, evaluator, scores, summaries, console, chief, seconds):
    """results.json (returned too), the probes' TensorBoard curves and console lines."""
    results = {
        "dataset": config.dataset,
        "model": config.model,
        "weights": config.weights,
        "shots": list(evaluator.shots),
        "seeds": evaluator.seeds,
        "wall_time_s": round(seconds, 2),
    }
    for k in evaluator.shots:
        results[f"{k}shot_accuracy"] = scores[f"fewshot/{_DATA}/{k}shot_accuracy"]
        results[f"{k}shot_accuracy_std"] = scores[f"fewshot/{_DATA}/{k}shot_accuracy_std"]
        results[f"{k}shot_l2_reg"] = evaluator.l2_used[(_DATA, k)]
    results.update(evaluator.stats[_DATA])
    with summaries.eval.as_default():
        for k in evaluator.shots:
            # One curve over k: accuracy against the number of examples per class.
            tf.summary.scalar("fewshot/accuracy_by_shots", results[f"{k}shot_accuracy"], step=k)
        image_summaries.log_accuracy_by_shots(scores, step=0, rename={_DATA: config.dataset})
    summaries.flush()
    if chief:
        fileio.makedirs(config.workdir)
        fileio.write_atomic(fileio.join(config.workdir, "config.json"), config_to_json(config) + "\n")
        results_lib.write(config.workdir, results)
    for k in evaluator.shots:
        console.print(
            f"{k}-shot accuracy {results[f'{k}shot_accuracy']:.4f} "
            f"+- {results[f'{k}shot_accuracy_std']:.4f}  (l2 {results[f'{k}shot_l2_reg']:g})"
        )
    return results


def main(argv=None):
    return cli.main(run, get_config, argv, help_overrides=fewshot_config.HELP, about=__doc__)


if __name__ == "__main__":
    sys.exit(main())
