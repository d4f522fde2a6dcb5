"""Evaluators: small objects behind one interface, run during training and at its end.

An evaluator has a `name` (its console label), `every` (steps between runs; 0 = only at the
end) and `run(model) -> {tag: value}`; the controller logs the tags to TensorBoard
(WORKDIR/eval) and the console, and at the end of a run `results(tags)` turns the final run's
tags into the evaluator's section of results.json (by default the tags themselves; a
classifier's is the "eval" section) and `final_lines(section)` into its last console lines. A config selects
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

    def results(self, tags):
        """This evaluator's section of results.json from its final `tags`: {key: value}. A dict
        value is merged one level deep with the same key of other sections (several classifiers
        share "eval")."""
        return dict(tags)

    def final_lines(self, section):
        """The console lines of this evaluator's `section` at the end of a run (its evaluation's
        own line has shown the tags already: none by default)."""
        return []
