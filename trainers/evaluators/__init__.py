"""Evaluators: small objects behind one interface, run during training and at its end.

An evaluator has a `name` (its console label), `every` (steps between runs; 0 = only at the
end) and `run(model) -> {tag: value}`; the controller logs the tags to TensorBoard
(WORKDIR/eval) and the console, and the final run's tags go into results.json. A config selects
them for any trainer by name, in its `evals` field (registry.py: the types; from_config.py: the
default, classification on --eval_splits always and few-shot probes when --fewshot_datasets is
set). A new type is its own file, registered there, and its import line in from_config.py.
"""

import abc


class Evaluator(abc.ABC):
    name = "eval"
    every = 0

    @abc.abstractmethod
    def run(self, model):
        """{tag: float} for the model as it is now."""
