"""A run's evaluators from its config: the `evals` field, or what the evaluation flags say.

    evals = {"test": {"type": "classification", "split": "test"},
             "top5": {"type": "topk", "split": "test", "k": 5}}

Each entry is built by its type's registered factory (trainers/evaluators/registry.py); the key
`every` and the keys an entry leaves out take the values of the flags they stand for
(--eval_every, --eval_splits, --fewshot_*), so the flags remain the short way to set them. They
are filled in once, into the run's plan (`resolve`, called by trainers/plan_pieces.py); `build`
makes the evaluators from those entries. On the command line the field is the entry dict's JSON
text.

evals empty (the default): the evaluators the flags give, as runs had them before the field:

    {"eval": {"type": "classification"}}                 # --eval_splits every --eval_every
    {"fewshot": {"type": "fewshot"}}                     # with --fewshot_datasets only
"""

import dataclasses
import json
import types
from collections.abc import Callable, Mapping

from trainers.errors import UsageError, first_line

# The evaluator types that come with the trainers: importing a module registers its type, so a
# new type is its file and its line here. (classification is also what results.json's "eval" reads.)
from trainers.evaluators import classification, fewshot, registry, topk  # noqa: F401


@dataclasses.dataclass(frozen=True)
class Context:
    """What evaluator factories build from (none of it the config: the entries carry its values)."""

    strategy: object
    spec: object  # the dataset's DatasetSpec
    trainer: object  # the engine's Trainer; trainer.model is the model evaluated
    eval_input: Callable  # split -> the evaluation InputFn of that split (--pp_eval, one pass, padded)
    eval_splits: Mapping  # name -> split of --eval_splits, parsed once (trainers/plan.py)
    image_size: int  # the run's --image_size: the few-shot probes' without --pp_eval
    data_dir: object  # --data_dir of the few-shot probes' datasets; None: TFDS's default
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


def entries(evals, fewshot_datasets):
    """{name: entry} of a run whose `evals` field is `evals`: its entries, or the flags' evaluators
    when it is empty (few-shot probes when `fewshot_datasets`, --fewshot_datasets, names any)."""
    evals = parse(evals)
    if evals:
        return evals
    evals = {"eval": {"type": "classification"}}
    if any(d.strip() for d in fewshot_datasets.split(",")):
        evals["fewshot"] = {"type": "fewshot"}
    return evals


def resolve(evals, fewshot_datasets, flag_value):
    """{name: registry.Entry} of the run, read-only, every key its flags stand for filled in with
    `flag_value(flag)`; a bad entry is one UsageError line."""
    named = entries(evals, fewshot_datasets)
    resolved = {name: registry.resolve(name, entry, flag_value) for name, entry in named.items()}
    return types.MappingProxyType(resolved)


def build(evals, context):
    """The run's evaluators, in the order of `evals` (resolve's); a bad value is one UsageError line."""
    return [registry.create(name, entry, context) for name, entry in evals.items()]
