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

import contextlib
import time

import keras
import tensorflow as tf

from configs import fewshot as fewshot_config
from keras_vit import VARIANTS, commands, initializers
from trainers import actions, cli, data, disk_space, engines, image_summaries, workdir_lock, workdir_owner
from trainers import plan as plan_lib
from trainers.console import Console
from trainers.controller import Controller
from trainers.evaluators.fewshot import FewShotEvaluator
from trainers.features import PIXELS, extract_features  # noqa: F401 (public API)
from trainers.linear_probe import fit_ridge, sample_k_per_class  # noqa: F401 (public API)
from trainers.model_builder import build_model
from trainers.validation import validate_fewshot

# The evaluator's name for the command's one dataset (its tags read fewshot/data/...).
_DATA = "data"


def get_config(dataset="cifar10"):
    return fewshot_config.get_config(dataset)


def validate(config):
    """Checks that need only the config; raises UsageError/FewShotError before anything runs."""
    validate_fewshot(config, models=(PIXELS, *VARIANTS), known_fields=fewshot_config.FIELDS)


def build_feature_model(plan, num_classes):
    """The frozen model whose representation is probed (PIXELS for the raw-pixel baseline), of a
    ProbePlan (trainers/plan.py resolve_probes).

    Unlike fine-tuning, a pre-logits layer in the weights file is kept: it is the
    representation the paper probes.
    """
    if plan.model is None:
        return PIXELS
    keras.utils.set_random_seed(plan.seed)
    # No head: the probe fits its own, so the model's would only be a zero-initialised layer
    # that loading reports and nothing uses.
    with initializers.seeded(plan.seed):  # a random-init probe starts as on every engine
        return build_model(
            plan.model,
            num_classes,
            pre_logits_from_weights=plan.pre_logits_from_weights,
            include_top=False,
            params=plan.params,
        )


class _CommandProbes(FewShotEvaluator):
    """The command's probes of its one dataset: results.json's form of the few-shot command
    ({k}shot_accuracy, {k}shot_accuracy_std, {k}shot_l2_reg, the shots, seeds and feature sizes)
    and a console line per shot count."""

    def results(self, tags):
        section = {"shots": list(self.shots), "seeds": self.seeds}
        for k in self.shots:
            section[f"{k}shot_accuracy"] = tags[f"fewshot/{_DATA}/{k}shot_accuracy"]
            section[f"{k}shot_accuracy_std"] = tags[f"fewshot/{_DATA}/{k}shot_accuracy_std"]
            section[f"{k}shot_l2_reg"] = self.l2_used[(_DATA, k)]
        section.update(self.stats[_DATA])
        return section

    def final_lines(self, section):
        return [
            f"{k}-shot accuracy {section[f'{k}shot_accuracy']:.4f} "
            f"+- {section[f'{k}shot_accuracy_std']:.4f}  (l2 {section[f'{k}shot_l2_reg']:g})"
            for k in self.shots
        ]


class _Export(actions.Export):
    """The command's end: TensorBoard's accuracy against shots, then config.json and results.json."""

    def __init__(self, plan, chief, summaries):
        output = plan.output
        super().__init__(None, output.workdir, chief, config_json=output.config_json, summaries=summaries)
        self.dataset = plan.data.dataset

    def __call__(self, results):
        shots = results["shots"]
        with self.summaries.eval.as_default():
            for k in shots:
                # One curve over k: accuracy against the number of examples per class.
                tf.summary.scalar("fewshot/accuracy_by_shots", results[f"{k}shot_accuracy"], step=k)
            tags = {
                f"fewshot/{self.dataset}/{k}shot_accuracy{std}": results[f"{k}shot_accuracy{std}"]
                for k in shots
                for std in ("", "_std")
            }
            image_summaries.log_accuracy_by_shots(tags, step=0)
        super().__call__(results)


def run(config, weights_params=None):
    """Probes per `config` (configs.fewshot.get_config(...) with changes); returns the results dict.
    `weights_params`: the --weights file's parameters where the command line read them."""
    validate(config)
    workdir_owner.check_probes_workdir(config.workdir)
    engine = engines.check(config)
    strategy = engines.strategy_of(config)
    # From here on the command reads its evaluate-only plan (trainers/plan.py), not the config.
    plan = plan_lib.resolve_probes(config, strategy, weights_params)
    chief = engine.is_chief(strategy)
    console = Console(chief)
    started = time.time()
    probe = plan.probes
    evaluator = _CommandProbes(
        {_DATA: plan.data.dataset},
        data_dir=plan.data.data_dir,
        image_size=probe.image_size,
        batch_size=probe.batch_size,
        shots=probe.shots,
        seeds=probe.seeds,
        l2_reg=probe.l2_reg,
        strategy=strategy,
        train_split=probe.train_split,
        test_split=probe.test_split,
        console=console,
    )
    spec = evaluator.specs[_DATA]
    for split in (probe.train_split, probe.test_split):  # found before the workdir is made
        data.check_split(spec, split)
    with strategy.scope():
        model = build_feature_model(plan, spec.num_classes)
    if chief:  # TensorFlow's writers would make it, with a traceback where they could not
        disk_space.create_workdir(plan.output.workdir)
    # A training run started in the folder while the probes ran would have its config.json and
    # results.json replaced at their end: one run at a time, as the trainers (workdir_lock.py).
    with workdir_lock.held(plan.output.workdir) if chief else contextlib.nullcontext():
        summaries = actions.Summaries(plan.output.workdir, chief)
        # The probes print their own summary lines (final_lines): the evaluation's own line would
        # repeat them. TensorBoard's tags are the documented fewshot/<k>shot_accuracy (and _std),
        # without _DATA.
        probes = actions.Evaluate(
            evaluator, model, summaries, strategy, console, quiet=True, tag_of=_tensorboard_tag
        )
        # The controller's evaluate-only mode: the end of a training run, without the training.
        return Controller(
            strategy=strategy,
            evaluations=[probes],
            record=plan.record,
            export=_Export(plan, chief, summaries),
            console=console,
            started=started,
        ).evaluate_only()


def _tensorboard_tag(tag):
    """'fewshot/data/10shot_accuracy' -> 'fewshot/10shot_accuracy' (docs/guides/fewshot.md)."""
    return tag.replace(f"fewshot/{_DATA}/", "fewshot/", 1)


def main(argv=None):
    return cli.main(run, get_config, argv, help_overrides=fewshot_config.HELP, about=__doc__)


if __name__ == "__main__":
    commands.exit_with(main)
