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

import json
import sys
import time

from configs import fewshot as fewshot_config
from keras_vit import fileio
from trainers import common
from trainers.features import PIXELS, IncompatibleModelError, extract_features  # noqa: F401 (public API)
from trainers.fewshot_evaluator import FewShotEvaluator, parse_l2_reg, parse_shots
from trainers.linear_probe import FewShotError, fit_ridge, sample_k_per_class  # noqa: F401 (public API)

HELP_OVERRIDES = {
    "model": common.HELP["model"] + ", or pixels (raw pixels as features)",
    "batch_size": "global batch size of the feature extraction",
}


def get_config(dataset="cifar10"):
    return fewshot_config.get_config(dataset)


def validate(config):
    """Checks that need only the config; raises UsageError/FewShotError before anything runs."""
    import keras_vit

    if not config.dataset:
        raise common.UsageError("--dataset is required (a TFDS name, folder:PATH or digits).")
    if not config.workdir:
        raise common.UsageError("--workdir is required (where results.json and the logs go).")
    if config.model != PIXELS and config.model not in keras_vit.VARIANTS:
        raise common.UsageError(
            f"unknown --model {config.model!r}; known: {PIXELS}, {', '.join(keras_vit.VARIANTS)}.")
    for name in ("batch_size", "image_size", "seeds"):
        if config[name] <= 0:
            raise common.UsageError(f"--{name} must be positive, got {config[name]}.")
    for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "cpu_devices"):
        if config[name] < 0:
            raise common.UsageError(f"--{name} must not be negative, got {config[name]}.")
    for name, values in common.CHOICES.items():
        if name in config and config[name] not in values:
            raise common.UsageError(f"--{name} must be one of {', '.join(values)}, got {config[name]!r}.")
    parse_shots(config.shots)
    parse_l2_reg(config.l2_reg)
    if fileio.exists(config.workdir) and not fileio.isdir(config.workdir):
        raise common.UsageError(f"--workdir {config.workdir!r} exists and is not a directory.")


def build_feature_model(config, num_classes):
    """The frozen model whose representation is probed (PIXELS for the raw-pixel baseline).

    Unlike fine-tuning, a pre-logits layer in the weights file is kept: it is the
    representation the paper probes.
    """
    if config.model == PIXELS:
        return PIXELS
    import keras

    keras.utils.set_random_seed(config.seed)
    return common.build_model(config, num_classes, pre_logits_from_weights=not config.pre_logits)


def run(config):
    """Probes per `config` (configs.fewshot.get_config(...) with changes); returns the results dict."""
    import tensorflow as tf

    from trainers import data, distribute

    validate(config)
    strategy = distribute.create_strategy(config.strategy, tpu=config.tpu or None,
                                          cpu_devices=config.cpu_devices or 1)
    if config.batch_size % strategy.num_replicas_in_sync:
        raise common.UsageError(f"--batch_size {config.batch_size} is not divisible by "
                                f"{strategy.num_replicas_in_sync} replicas.")
    start = time.time()
    evaluator = FewShotEvaluator({"data": config.dataset}, data_dir=config.data_dir or None,
                                 image_size=config.image_size, batch_size=config.batch_size,
                                 shots=config.shots, seeds=config.seeds, l2_reg=config.l2_reg,
                                 strategy=strategy, train_split=config.train_split,
                                 test_split=config.test_split)
    spec = evaluator.specs["data"]
    if spec.multi_label:
        raise common.UsageError(data.multi_label_refusal(
            spec, "a few-shot probe", "probe a single-label dataset (e.g. cifar10, oxford_iiit_pet)"))
    with strategy.scope():
        model = build_feature_model(config, spec.num_classes)
        scores = evaluator.evaluate(model)

    results = {"dataset": config.dataset, "model": config.model, "weights": config.weights,
               "shots": list(evaluator.shots), "seeds": evaluator.seeds,
               "wall_time_s": round(time.time() - start, 2)}
    for k in evaluator.shots:
        results[f"{k}shot_accuracy"] = scores[f"fewshot/data/{k}shot_accuracy"]
        results[f"{k}shot_accuracy_std"] = scores[f"fewshot/data/{k}shot_accuracy_std"]
        results[f"{k}shot_l2_reg"] = evaluator.l2_used[("data", k)]
    results.update(evaluator.stats["data"])

    fileio.makedirs(config.workdir)
    fileio.write_atomic(fileio.join(config.workdir, "config.json"), common.config_to_json(config) + "\n")
    writer = tf.summary.create_file_writer(fileio.join(config.workdir, "eval"))
    with writer.as_default():
        for k in evaluator.shots:
            tf.summary.scalar(f"fewshot/{k}shot_accuracy", results[f"{k}shot_accuracy"], step=0)
            # One curve over k: accuracy against the number of examples per class.
            tf.summary.scalar("fewshot/accuracy_by_shots", results[f"{k}shot_accuracy"], step=k)
    writer.flush()
    fileio.write_atomic(fileio.join(config.workdir, "results.json"),
                        json.dumps(results, indent=2, sort_keys=True) + "\n")
    for k in evaluator.shots:
        print(f"{k}-shot accuracy {results[f'{k}shot_accuracy']:.4f} "
              f"+- {results[f'{k}shot_accuracy_std']:.4f}  (l2 {results[f'{k}shot_l2_reg']:g})", flush=True)
    return results


def _run_cli(config):
    """run() with the probe's own input errors reported like every other usage error."""
    try:
        return run(config)
    except (FewShotError, IncompatibleModelError) as e:
        raise common.UsageError(str(e)) from None


def main(argv=None):
    return common.cli(_run_cli, get_config, argv, help_overrides=HELP_OVERRIDES)


if __name__ == "__main__":
    sys.exit(main())
