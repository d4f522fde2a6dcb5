"""Accuracy (or precision@1) and loss of the trained classifier on each --eval_splits entry."""

from trainers.evaluators import Evaluator


class ClassificationEvaluator(Evaluator):
    """run(model) -> {"<split>/<metric>": ..., "<split>/loss": ..., "<split>/examples": ...}.

    Uses the Trainer's compiled, distributed evaluation step (padding rows weigh 0), so `model`
    must be the Trainer's model. `metric` is "accuracy" (softmax) or "prec@1" (sigmoid).
    """

    name = "eval"

    def __init__(self, trainer, datasets, every):
        self.trainer = trainer
        self.datasets = datasets  # split name -> distributed (images, labels, weights) dataset
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
