"""Accuracy (or precision@1) and loss of the trained classifier on each --eval_splits entry."""

from trainers import data
from trainers.errors import UsageError
from trainers.evaluators import Evaluator, registry
from trainers.flags import parse_eval_splits


class ClassificationEvaluator(Evaluator):
    """run(model) -> {"<split>/<metric>": ..., "<split>/loss": ..., "<split>/examples": ...}.

    Uses the Trainer's compiled, distributed evaluation step (padding rows weigh 0), so `model`
    must be the Trainer's model. `metric` is "accuracy" (softmax) or "prec@1" (sigmoid).
    """

    name = "eval"

    def __init__(self, trainer, datasets, every, splits=None):
        self.trainer = trainer
        self.datasets = datasets  # split name -> distributed (images, labels, weights) dataset
        self.splits = dict(splits or {})  # split name -> the split it reads ("test", "train[90%:]")
        self.every = every
        self.metric = trainer.metric_name

    def run(self, model):
        if model is not self.trainer.model:
            raise ValueError("ClassificationEvaluator evaluates its Trainer's model only.")
        tags = {}
        for name, dataset in self.datasets.items():
            metrics = self.trainer.evaluate(dataset)
            for key in (self.metric, "loss", "examples"):  # the console's order
                tags[f"{name}/{key}"] = metrics[key]
        return tags

    def by_split(self, tags):
        """{"test/accuracy": a, "test/loss": l, ...} -> {"test": {"accuracy": a, "loss": l, ...}}."""
        splits = {}
        for tag, value in tags.items():
            name, _, key = tag.rpartition("/")
            if name in self.datasets:
                splits.setdefault(name, {})[key] = value
        return splits

    def results(self, tags):
        """results.json's "eval" section: {split name: {metric, "loss", "examples"}}."""
        splits = self.by_split(tags)
        return {"eval": {name: {**m, "examples": int(m["examples"])} for name, m in splits.items()}}

    def final_lines(self, section):
        """'final test: accuracy 0.9000  loss 0.3000  (360 images)', a line per split."""
        metric = self.metric
        return [
            f"final {name}: {metric} {m[metric]:.4f}  loss {m['loss']:.4f}  ({m['examples']} images)"
            for name, m in section["eval"].items()
        ]


@registry.register("classification", flags={"every": "eval_every"})
def create(name, context, *, split=None, every):
    """evals entry: `split` a split (tags NAME/accuracy, ...) or name=split pairs as --eval_splits
    takes (tags per name; None: the run's --eval_splits, parsed in its plan); `every` steps
    (default: --eval_every)."""
    if split is None:
        splits = dict(context.eval_splits)
    elif not isinstance(split, str) or not split.strip():
        raise UsageError(
            f"evals.{name}.split must be a split such as 'test' or name=split pairs, got {split!r}"
        )
    else:
        splits = parse_eval_splits(split) if "=" in split else {name: split.strip()}
    datasets = {
        key: data.distribute(context.strategy, context.eval_input(value)) for key, value in splits.items()
    }
    return ClassificationEvaluator(
        context.trainer, datasets, every=registry.every(name, every), splits=splits
    )


def splits_of(evaluators):
    """{name: split} of every split the run's classification evaluators read (the start banner's)."""
    found = [e for e in evaluators if isinstance(e, ClassificationEvaluator)]
    return {key: value for e in found for key, value in e.splits.items()}
