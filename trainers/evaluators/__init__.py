"""Evaluators: small objects behind one interface, run during training and at its end.

An evaluator has a `name` (its console label), `every` (steps between runs; 0 = only at the
end) and `run(model) -> {tag: value}`; the controller logs the tags to TensorBoard
(WORKDIR/eval) and the console, and the final run's tags go into results.json. A config selects
them for any trainer: classification on --eval_splits always, few-shot probes when
--fewshot_datasets is set.
"""

import abc


class Evaluator(abc.ABC):
    name = "eval"
    every = 0

    @abc.abstractmethod
    def run(self, model):
        """{tag: float} for the model as it is now."""
