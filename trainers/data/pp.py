"""Preprocessing named in the config: big_vision-style pp strings, parsed into the registered ops.

    --pp_train='decode|inception_crop(0.05)|resize(224)|flip_lr|value_range(-1,1)|mixup(0.5)'
    --pp_eval='decode|resize(224)|value_range(-1,1)'

Ops are separated by "|"; each is NAME or NAME(ARGS), ARGS Python literals, positional or
key=value, bound to the parameters of the op's factory (trainers/data/ops.py). In place of the
string, a config may give a list of the same op texts, or of (NAME, {kwargs}) pairs. The image ops
come first, then the batch ops (mixup(p)), which work on whole batches; evaluation takes image ops
only, none of them random. The ops must end at --image_size (a resize), the model's input size.

'' (the default): the ops the flags build, the pipelines of runs from before these fields, op for
op: `ops.train_ops(config)` and Mixup of --augreg / --mixup in training, `ops.eval_ops(--image_size)`
in evaluation. A --pp_train string names every training op, so --augreg, --randaug and --mixup
are refused beside it, and --crop_min_area and --random_flip are not read.
"""

import ast

from configs.fields import DEFAULTS
from trainers.data import augreg, ops
from trainers.errors import UsageError, first_line

# The flags whose ops a --pp_train string would silently replace.
_AUGMENTATION_FLAGS = ("augreg", "randaug", "mixup")


def parse(pp, field="pp"):
    """A pp string or list -> [(op name, kwargs)]; `field` names the config field in errors."""
    items = pp.split("|") if isinstance(pp, str) else list(pp)
    parsed = [_op(item, field) for item in items if not (isinstance(item, str) and not item.strip())]
    if not parsed:
        raise UsageError(f"--{field} names no op: give e.g. 'decode|resize(224)|value_range(-1,1)'")
    return parsed


def split_batch_ops(parsed, field):
    """[(name, kwargs)] -> (image ops, batch ops); a batch op before an image op is refused."""
    kinds = [ops.is_batch_op(name) for name, _ in parsed]
    first = kinds.index(True) if True in kinds else len(kinds)
    if not all(kinds[first:]):
        raise UsageError(
            f"--{field}: batch op {parsed[first][0]} comes before image op "
            f"{parsed[kinds.index(False, first)][0]}; batch ops work on whole batches, after the image ops"
        )
    return parsed[:first], parsed[first:]


def train_pipeline(config):
    """(image ops, batch ops) of training: --pp_train's, or the ones the augmentation flags build."""
    pp = config.pp_train
    if not pp:
        mixup = augreg.resolve(config).mixup
        return ops.train_ops(config), [("mixup", {"p": mixup})] if mixup else []
    given = [name for name in _AUGMENTATION_FLAGS if _given(config, name)]
    if given:
        raise UsageError(
            f"--pp_train names every training op: put RandAugment and Mixup in it (randaug(2,15), "
            f"mixup(0.5)) instead of {', '.join('--' + name for name in given)}"
        )
    return split_batch_ops(parse(pp, "pp_train"), "pp_train")


def eval_pipeline(config):
    """The image ops of evaluation: --pp_eval's, or resize to --image_size."""
    pp = config.pp_eval
    if not pp:
        return ops.eval_ops(config.image_size)
    image_ops, batch_ops = split_batch_ops(parse(pp, "pp_eval"), "pp_eval")
    if batch_ops:
        raise UsageError(f"--pp_eval: {batch_ops[0][0]} is a batch op; evaluation sees every image as it is")
    return image_ops


def check(train_ops, batch_ops, eval_ops):
    """Builds the pipelines' ops once, so that a bad op argument is one line before training."""
    ops.Chain(train_ops)
    ops.BatchChain(batch_ops)
    ops.Chain(eval_ops)


def _given(config, name):
    return str(config[name]) != str(DEFAULTS[name])


def _op(item, field):
    """One op text ("resize(224)") or (name, kwargs) pair -> (name, kwargs by parameter name)."""
    if not isinstance(item, str):
        if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], dict):
            return _known(str(item[0]), field), dict(item[1])
        raise UsageError(
            f"--{field}: an op is a text like 'resize(224)' or a pair (name, kwargs), got {item!r}"
        )
    text = item.strip()
    try:
        call = ast.parse(text, mode="eval").body
        if isinstance(call, ast.Name):
            name, args, kwargs = call.id, [], {}
        elif isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
            if any(keyword.arg is None for keyword in call.keywords):
                raise ValueError("** is not an argument")
            name = call.func.id
            args = [_literal(arg) for arg in call.args]
            kwargs = {keyword.arg: _literal(keyword.value) for keyword in call.keywords}
        else:
            raise ValueError("not NAME or NAME(ARGS)")
    except (SyntaxError, ValueError) as e:
        raise UsageError(
            f"--{field}: cannot read op {text!r} ({first_line(e)}): write NAME or NAME(ARGS), "
            "ARGS literals such as 224, -1, 0.5 or size=224"
        ) from None
    name = _known(name, field)
    try:
        bound = ops.signature(name).bind(*args, **kwargs)
    except TypeError as e:
        raise UsageError(
            f"--{field}: op {text!r}: {first_line(e)} (its parameters: {ops.signature(name)})"
        ) from None
    return name, dict(bound.arguments)


def _known(name, field):
    if name not in ops.registered():
        raise UsageError(
            f"--{field}: unknown op {name!r}; the registered ops are {', '.join(ops.registered())}"
        )
    return name


def _literal(node):
    """An op's argument: a Python literal, else a ValueError quoting it (ast's own message names
    the node's object: "malformed node or string on line 1: <ast.Name object at 0x...>")."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{ast.unparse(node)!r} is not a literal; quote a text") from None
