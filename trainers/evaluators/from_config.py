"""A run's evaluators from its config: the `evals` field, or what the evaluation flags say.

    evals = {"test": {"type": "classification", "split": "test"},
             "top5": {"type": "topk", "split": "test", "k": 5}}

Each entry is built by its type's registered factory (trainers/evaluators/registry.py); the key
`every` and the keys an entry leaves out take the values of the flags they stand for
(--eval_every, --eval_splits, --fewshot_*), so the flags remain the short way to set them. On the
command line the field is the entry dict's JSON text.

evals empty (the default): the evaluators the flags give, as runs had them before the field:

    {"eval": {"type": "classification"}}                 # --eval_splits every --eval_every
    {"fewshot": {"type": "fewshot"}}                     # with --fewshot_datasets only
"""

import dataclasses
import json
from collections.abc import Callable, Mapping

from trainers.errors import UsageError, first_line

# The evaluator types that come with the trainers: importing a module registers its type, so a
# new type is its file and its line here. (classification is also what results.json's "eval" reads.)
from trainers.evaluators import classification, fewshot, registry, topk  # noqa: F401


@dataclasses.dataclass(frozen=True)
class Context:
    """What evaluator factories build from."""

    config: object  # the run's resolved config
    strategy: object
    spec: object  # the dataset's DatasetSpec
    trainer: object  # the engine's Trainer; trainer.model is the model evaluated
    eval_input: Callable  # split -> the evaluation InputFn of that split (--pp_eval, one pass, padded)
    eval_splits: Mapping  # name -> split of --eval_splits, parsed once (trainers/plan.py)
    eval_ops: tuple = ()  # the run's evaluation image ops (--pp_eval's, or the flags' resize); (): resize


def parse(value):
    """The `evals` field (a dict, its JSON text, or '' / None) -> a dict of entries."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise UsageError(
                f'--evals is not JSON ({first_line(e)}): give {{"NAME": {{"type": TYPE, ...}}, ...}}'
            ) from None
    if hasattr(value, "to_dict"):  # a ConfigDict, from a Python config
        value = value.to_dict()
    if not isinstance(value, dict):
        raise UsageError(
            f'--evals must map names to entries {{"NAME": {{"type": TYPE, ...}}}}, got {value!r}'
        )
    return value


def entries(config):
    """{name: entry} of the run: `evals`, or the flags' evaluators when it is empty."""
    evals = parse(getattr(config, "evals", ""))
    if evals:
        return evals
    evals = {"eval": {"type": "classification"}}
    if any(d.strip() for d in config.fewshot_datasets.split(",")):
        evals["fewshot"] = {"type": "fewshot"}
    return evals


def build(config, context):
    """The run's evaluators, in the order of its entries; a bad entry is one UsageError line."""
    return [registry.create(name, entry, context) for name, entry in entries(config).items()]
