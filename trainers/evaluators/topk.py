"""Top-k accuracy: how often the label is among the model's k highest-scoring classes.

An evaluator in a file of its own, registered by the decorator; the one other line it needs is its
import in trainers/evaluators/from_config.py. In a config:

    evals = {"top5": {"type": "topk", "split": "test", "k": 5, "every": 500}}

gives the tag "top5/top5_accuracy" (NAME/top{k}_accuracy). It runs the model eagerly on the
evaluation batches, one host, no padding rows counted: simple rather than fast, which suits the
splits of a few thousand images it is meant for.
"""

import keras
import numpy as np

from trainers.errors import UsageError
from trainers.evaluators import Evaluator, registry


class TopKEvaluator(Evaluator):
    """run(model) -> {"<name>/top<k>_accuracy": ...}; a multi-label image counts as a hit when any
    of its labels is among the k."""

    def __init__(self, name, input_fn, k, every):
        self.name, self.input_fn, self.k, self.every = name, input_fn, k, every

    def run(self, model):
        hits = seen = 0.0
        for images, labels, weights in self.input_fn(None):
            logits = np.asarray(keras.ops.convert_to_numpy(model(images.numpy(), training=False)), np.float32)
            top = np.argsort(-logits, axis=-1)[:, : self.k]
            labels, weights = labels.numpy(), weights.numpy()
            if labels.ndim == 2:  # multi-hot
                hit = np.take_along_axis(labels, top, axis=-1).max(axis=-1) > 0
            else:
                hit = (top == labels[:, None]).any(axis=-1)
            hits += float(np.sum(hit * weights))
            seen += float(np.sum(weights))
        return {f"{self.name}/top{self.k}_accuracy": hits / max(seen, 1.0)}


@registry.register("topk", flags={"every": "eval_every"})
def create(name, context, *, split="test", k=5, every):
    """evals entry: `split` (default "test"), `k` (default 5), `every` steps (default: --eval_every)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UsageError(f"evals.{name}.k must be an integer >= 1, got {k!r}")
    every = registry.every(name, every)
    return TopKEvaluator(name, context.eval_input(split), k, every)
