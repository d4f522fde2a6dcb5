"""The evaluator registry: evaluator types by name, each a factory of one config entry.

A run's `evals` field names its evaluators, big_vision-style:

    evals = {"test": {"type": "classification", "split": "test", "every": 500},
             "top5": {"type": "topk", "split": "test", "k": 5}}

A type is registered by decorating its factory, `factory(name, context, **keys) -> Evaluator`,
with `register(type_name, flags)`; the factory's keyword-only parameters are the keys the entry
may hold (beside "type"), so a misspelt key is refused before training starts, and `flags` names
the flag each key that stands for one defaults to ({"every": "eval_every"}). `resolve` fills
those keys in once, when the run's plan is made (trainers/plan_pieces.py): a factory is handed
every key and never sees the config. `context` (trainers/evaluators/from_config.py: Context)
holds what evaluators are built from: the strategy, the dataset, the Trainer and its evaluation
input.

A type registered outside the trainers is named "MODULE:TYPE" in the config: MODULE is imported
(it registers its types as it loads), then TYPE is looked up.
"""

import dataclasses
import importlib
import inspect
import types

from trainers.errors import UsageError

_TYPES = {}
_FLAGS = {}  # type name -> {key: the flag whose value the key takes when an entry leaves it out}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One evaluator of a run, resolved: its registered type and its keys, the flags' values
    filled in for the keys the config left out."""

    type: str
    keys: types.MappingProxyType


def register(type_name, flags=None):
    """Registers the decorated factory under `type_name`; `flags`: {key: flag name} of the keys
    that default to a flag's value."""

    def add(factory):
        if type_name in _TYPES:
            raise ValueError(f"evaluator type {type_name!r} is registered twice")
        _TYPES[type_name] = factory
        _FLAGS[type_name] = dict(flags or {})
        return factory

    return add


def known():
    """The registered type names, sorted."""
    return sorted(_TYPES)


def keys(type_name):
    """The keys an entry of `type_name` may hold beside "type" (its factory's keyword-only parameters)."""
    parameters = inspect.signature(_TYPES[type_name]).parameters.values()
    return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]


def resolve(name, entry, flag_value):
    """The Entry of the `evals` entry {"type": ..., key: value, ...} called `name`; a key it leaves
    out that stands for a flag takes `flag_value(flag)`."""
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
    for key, flag in _FLAGS[type_name].items():
        if values.get(key) is None:
            values[key] = flag_value(flag)
    return Entry(type_name, types.MappingProxyType(values))


def create(name, entry, context):
    """The evaluator of the resolved `entry` (an Entry) called `name`."""
    return _TYPES[entry.type](name, context, **entry.keys)


def every(name, value):
    """An entry's `every` (steps between runs, 0 = only at the end), checked."""
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
