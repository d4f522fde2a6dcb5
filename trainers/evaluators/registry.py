"""The evaluator registry: evaluator types by name, each a factory of one config entry.

A run's `evals` field names its evaluators, big_vision-style:

    evals = {"test": {"type": "classification", "split": "test", "every": 500},
             "top5": {"type": "topk", "split": "test", "k": 5}}

A type is registered by decorating its factory, `factory(name, context, **keys) -> Evaluator`,
with `register(type_name)`; the factory's keyword-only parameters are the keys the entry may
hold (beside "type"), so a misspelt key is refused before training starts. `context`
(trainers/evaluators/from_config.py: Context) holds what evaluators are built from: the config,
the strategy, the dataset, the Trainer and its evaluation input.

A type registered outside the trainers is named "MODULE:TYPE" in the config: MODULE is imported
(it registers its types as it loads), then TYPE is looked up.
"""

import importlib
import inspect

from trainers.errors import UsageError

_TYPES = {}


def register(type_name):
    """Registers the decorated factory under `type_name`."""

    def add(factory):
        if type_name in _TYPES:
            raise ValueError(f"evaluator type {type_name!r} is registered twice")
        _TYPES[type_name] = factory
        return factory

    return add


def known():
    """The registered type names, sorted."""
    return sorted(_TYPES)


def keys(type_name):
    """The keys an entry of `type_name` may hold beside "type" (its factory's keyword-only parameters)."""
    parameters = inspect.signature(_TYPES[type_name]).parameters.values()
    return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]


def create(name, entry, context):
    """The evaluator of the `evals` entry {"type": ..., key: value, ...} called `name`."""
    if not isinstance(entry, dict) or "type" not in entry:
        raise UsageError(
            f'evals.{name} must be a dict with a "type" (one of {", ".join(known())}), got {entry!r}'
        )
    type_name = _lookup(name, entry["type"])
    allowed = keys(type_name)
    unknown = sorted(set(entry) - {"type"} - set(allowed))
    if unknown:
        raise UsageError(
            f"evals.{name}: {type_name} takes no key {', '.join(map(repr, unknown))}; "
            f"its keys are {', '.join(allowed)}"
        )
    values = {key: value for key, value in entry.items() if key != "type"}
    return _TYPES[type_name](name, context, **values)


def every(name, value, default):
    """An entry's `every` (steps between runs, 0 = only at the end), or `default` (its flag's) for None."""
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"evals.{name}.every must be an integer >= 0 (0 = only at the end), got {value!r}")
    return value


def _lookup(name, type_name):
    """The registered name of an entry's type, importing MODULE of a "MODULE:TYPE" first."""
    if not isinstance(type_name, str):
        raise UsageError(f"evals.{name}.type must be a string, got {type_name!r}")
    module, _, short = type_name.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise UsageError(f"evals.{name}.type {type_name!r}: cannot import {module} ({e})") from None
        type_name = short
    if type_name not in _TYPES:
        raise UsageError(
            f"evals.{name}: unknown evaluator type {type_name!r}; the known types are {', '.join(known())} "
            "(or MODULE:TYPE for one registered in MODULE)"
        )
    return type_name
