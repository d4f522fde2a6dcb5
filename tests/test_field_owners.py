"""A flag's allowed values are its owner's: the module that acts on a value declares the values it
takes, and trainers/fields.py offers exactly those, to the command line and to validation alike."""

import ast
import inspect
import re

import pytest

from configs.fields import DEFAULTS
from configs.recipes import RECIPES
from keras_vit import masked_patches, models, position_embeddings
from trainers import distribute, engines, finetune, numerics, objectives, optimizers, precision, pretrain
from trainers.data import augreg
from trainers.errors import UsageError
from trainers.fields import FIELDS, Field
from trainers.flags import parse_flags
from trainers.validation import validate_common

OWNERS = {
    "loss": numerics.LOSSES,
    "optimizer": optimizers.OPTIMIZERS,
    "decay_type": optimizers.DECAY_TYPES,
    "momentum_dtype": optimizers.MOMENTUM_DTYPES,
    "strategy": distribute.STRATEGIES,
    "engine": engines.ENGINES,
    "mixed_precision": precision.PRECISIONS,
    "objective": objectives.OBJECTIVES,
    "recipe": tuple(RECIPES),
    "posemb": position_embeddings.POSEMB_TYPES,
    "masked_target": masked_patches.TARGETS,
    "classifier": models.CLASSIFIERS,
    "augreg": tuple(augreg.LEVELS),
    "jit_compile": engines.JIT_COMPILE,
}


def _trainer(name):
    """The trainer whose preset has the field (pre-training has every one these tests name)."""
    return pretrain if name in pretrain.get_config() else finetune


def test_every_field_with_allowed_values_has_an_owner():
    with_choices = {name for name, field in FIELDS.items() if field.choices}
    assert with_choices == set(OWNERS)


def test_every_declared_field_has_a_default_and_every_default_a_declaration():
    assert set(FIELDS) == set(DEFAULTS)
    assert all(FIELDS[name].default == DEFAULTS[name] for name in FIELDS)


def test_the_schema_declares_no_allowed_values_of_its_own():
    """A copy of an owner's values in trainers/fields.py would drift from it unnoticed."""
    with open(inspect.getsourcefile(Field), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    tuples = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
        for target in node.targets
    }
    assert not tuples
    inline = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "Field"
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Tuple)
    ]
    assert not inline, f"allowed values written out in trainers/fields.py, lines {inline}"


@pytest.mark.parametrize("name", sorted(OWNERS))
def test_the_flag_takes_exactly_its_owners_values(name):
    owner = OWNERS[name]
    assert FIELDS[name].choices == owner
    assert FIELDS[name].default in owner
    trainer = _trainer(name)
    for value in owner:
        assert parse_flags([trainer.__name__, f"--{name}={value}"], trainer.get_config)[name] == value
    with pytest.raises(UsageError, match=re.escape(f"value should be one of <{'|'.join(owner)}>")):
        parse_flags([trainer.__name__, f"--{name}=nope"], trainer.get_config)


@pytest.mark.parametrize("name", sorted(OWNERS))
def test_validation_refuses_what_the_owner_does_not_take(name, tmp_path):
    config = _trainer(name).get_config("digits")
    config.workdir = str(tmp_path)
    config[name] = "nope"
    refusal = f"--{name} must be one of {', '.join(OWNERS[name])}, got 'nope'"
    with pytest.raises(UsageError, match=re.escape(refusal)):
        validate_common(config)
