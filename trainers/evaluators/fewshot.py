"""FewShotEvaluator: linear probes of a (training or trained) model on one or more datasets.

Used by `python -m trainers.fewshot` and, every --fewshot_every steps, by any training run with
--fewshot_datasets or an evals entry of type "fewshot" (as big_vision evaluates its runs). Each
call computes every split's features once and reuses them for all shot counts and seeds; the data
pipelines and the compiled feature step are built once and reused across calls.
"""

import re

import numpy as np

from configs.fields import DEFAULTS
from trainers import data, engines, features, linear_probe
from trainers.console import Console
from trainers.errors import FewShotError, UsageError
from trainers.evaluators import Evaluator, registry


def metric_name(dataset):
    """A TensorBoard-safe name for a dataset ("digits:5-9" -> "digits_5-9")."""
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", dataset).strip("_")


def parse_l2_reg(value):
    """A positive float or "sweep" from a flag or config value."""
    if isinstance(value, str) and value.strip().lower() == "sweep":
        return "sweep"
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise linear_probe.FewShotError(
            f"--l2_reg must be a positive number or 'sweep', got {value!r}"
        ) from None
    if not number > 0:
        raise linear_probe.FewShotError(f"--l2_reg must be a positive number or 'sweep', got {value!r}")
    return number


def parse_shots(value):
    """(1, 5, 10) from "1,5,10", a list or a tuple; sorted, unique, each >= 1."""
    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        shots = sorted({int(str(s).strip()) for s in items if str(s).strip()})
    except ValueError:
        raise linear_probe.FewShotError(f"--shots must be comma-separated integers, got {value!r}") from None
    if not shots or shots[0] < 1:
        raise linear_probe.FewShotError(f"--shots must be positive integers, got {value!r}")
    return tuple(shots)


# The declared defaults (configs/fields.py), for callers that build an evaluator in Python.
DEFAULT_SHOTS = parse_shots(DEFAULTS["shots"])
DEFAULT_L2_REG = parse_l2_reg(DEFAULTS["l2_reg"])


class FewShotEvaluator(Evaluator):
    """run(model) -> {"fewshot/<dataset>/<k>shot_accuracy": mean, ..._std: spread over seeds}.

    `datasets`: a dataset name, a list of names, or a dict {display name: dataset name}; any
    name trainers.data reads ("digits:5-9", TFDS names, "folder:PATH").
    `l2_reg`: a positive number or "sweep" (chosen per shot count on a held-out 20% of train).
    `model` for run: a Keras ViT (its representation is probed) or features.PIXELS.
    `every`: steps between runs during training (0 = only at the end).
    """

    name = "fewshot"

    def __init__(
        self,
        datasets,
        *,
        data_dir=None,
        image_size,
        batch_size,
        shots=DEFAULT_SHOTS,
        seeds=3,
        l2_reg=DEFAULT_L2_REG,
        strategy=None,
        train_split="train",
        test_split="test",
        every=0,
        console=None,
        ops=None,
    ):
        self.every = int(every)
        self.console = console  # shows feature extraction's progress
        if isinstance(datasets, str):
            datasets = [datasets]
        if not isinstance(datasets, dict):
            datasets = {metric_name(name): name for name in datasets}
        if not datasets:
            raise linear_probe.FewShotError("few-shot evaluation needs at least one dataset")
        if int(seeds) < 1:
            raise linear_probe.FewShotError(f"--seeds must be at least 1, got {seeds}")
        self.specs = {key: data.get_spec(name, data_dir=data_dir) for key, name in datasets.items()}
        for spec in self.specs.values():
            # Refused here, before training starts, not at the first probe after hours of it.
            if spec.multi_label:
                raise linear_probe.FewShotError(
                    data.multi_label_refusal(spec, "a few-shot probe", "probe a single-label dataset")
                )
        self.image_size = image_size
        self.ops = ops  # the image ops of the features (a run's --pp_eval); None: resize to image_size
        self.batch_size = batch_size
        self.shots = parse_shots(shots)
        self.seeds = int(seeds)
        self.l2_reg = parse_l2_reg(l2_reg)
        self.strategy = strategy
        self.train_split, self.test_split = train_split, test_split
        self.stats = {}  # dataset key -> feature_dim, train_examples, test_examples
        self.l2_used = {}  # (dataset key, k) -> l2 of the last evaluate call (interesting under sweep)
        self._extractor, self._extractor_model = None, None
        self._pixel_cache = {}  # raw pixels never change, so their features outlive one call

    def _features(self, model, key, split):
        if isinstance(model, str) and (key, split) in self._pixel_cache:
            return self._pixel_cache[(key, split)]
        if self._extractor is None or self._extractor_model is not model:
            self._extractor = features.FeatureExtractor(model, self.strategy, self.console)
            self._extractor_model = model
        result = self._extractor(
            self.specs[key], split, image_size=self.image_size, batch_size=self.batch_size, ops=self.ops
        )
        if isinstance(model, str):
            self._pixel_cache[(key, split)] = result
        return result

    def run(self, model):
        results = {}
        for key, spec in self.specs.items():
            train_x, train_y = self._features(model, key, self.train_split)
            smallest = int(np.bincount(train_y, minlength=spec.num_classes).min())
            if smallest < max(self.shots):
                raise linear_probe.FewShotError(
                    f"{max(self.shots)}-shot needs {max(self.shots)} examples of every class, but the "
                    f"{self.train_split!r} split of {spec.name} has only {smallest} of its smallest class; "
                    f"use --shots no larger than {smallest}"
                )
            test_x, test_y = self._features(model, key, self.test_split)
            self.stats[key] = {
                "feature_dim": int(train_x.shape[1]),
                "train_examples": len(train_y),
                "test_examples": len(test_y),
            }
            probes = linear_probe.evaluate_probes(
                train_x, train_y, test_x, test_y, spec.num_classes, self.shots, self.seeds, self.l2_reg
            )
            for k, (mean, std, l2) in probes.items():
                results[f"fewshot/{key}/{k}shot_accuracy"] = mean
                results[f"fewshot/{key}/{k}shot_accuracy_std"] = std
                self.l2_used[(key, k)] = l2
        return results


# The --fewshot_* flag each key of a "fewshot" entry defaults to.
FLAGS = {
    "datasets": "fewshot_datasets",
    "every": "fewshot_every",
    "shots": "fewshot_shots",
    "seeds": "fewshot_seeds",
    "l2_reg": "fewshot_l2_reg",
    "batch_size": "fewshot_batch_size",
}


@registry.register("fewshot", flags=FLAGS)
def create(name, context, *, datasets, every, shots, seeds, l2_reg, batch_size):
    """evals entry: each key defaults to its --fewshot_* flag (datasets: comma-separated or a list)."""
    if isinstance(datasets, str):
        datasets = [d.strip() for d in datasets.split(",") if d.strip()]
    try:
        # Under the strategy's scope, as the probes' feature step will run.
        with context.strategy.scope():
            evaluator = FewShotEvaluator(
                datasets,
                data_dir=context.data_dir,
                image_size=context.image_size,
                batch_size=batch_size,
                shots=shots,
                seeds=seeds,
                l2_reg=l2_reg,
                strategy=context.strategy,
                every=registry.every(name, every),
                console=Console(engines.of(context.strategy).is_chief(context.strategy)),
                # The run's evaluation ops (--pp_eval's, or the resize) are how its model sees images.
                ops=context.eval_ops or None,
            )
    except FewShotError as e:
        raise UsageError(f"few-shot evaluation: {e}") from None
    evaluator.name = name  # its console label
    return evaluator
