"""Command-line flags, generated from the field schema (trainers/fields.py) of a trainer's preset.

Every field of the preset is a flag of the same name whose type, allowed values and help come from
its declaration. Flags default to "not given"; the preset is chosen by the given flags that its
`get_config` takes (--dataset; for pre-training also --recipe and --model), then every given flag
overrides it, and the result is locked: a misspelt field is an error, not a new field.
"""

import collections
import difflib
import inspect
import json
import os
import textwrap

import ml_collections
from absl import flags

from trainers.errors import UsageError
from trainers.fields import FIELDS, GROUPS
from trainers.model_builder import architecture_from_weights, describes_itself

# Model-shape overrides of a preset: 0 means "the variant's own".
ARCHITECTURE_OVERRIDES = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


def program_name(argv):
    return os.path.basename(argv[0]).replace(".py", "") if argv else "trainer"


# A parsed command line: the resolved, locked ConfigDict, and the parameters of the --weights file
# it read to learn the model's shape (None where it read none), which the run's plan carries on
# to the model builder, so that a large (or remote) file is read once.
Command = collections.namedtuple("Command", "config weights_params")


def parse_flags(argv, get_config, help_overrides=None, about=None):
    """argv -> the resolved, locked ConfigDict: the preset, then every given flag (parse_command's)."""
    return parse_command(argv, get_config, help_overrides, about).config


def parse_command(argv, get_config, help_overrides=None, about=None):
    """argv -> Command: the resolved, locked ConfigDict (the preset, then every given flag) and the
    --weights file's parameters where it was read.

    `help_overrides` replaces the declared help of fields whose meaning differs in one trainer;
    `about` is the trainer's docstring, whose first line and first two example commands open
    `--help`.
    """
    defaults = get_config()
    help_overrides = help_overrides or {}
    values = _define(defaults, help_overrides)
    program = program_name(argv)
    usage = f"usage: python -m trainers.{program} --dataset=NAME --workdir=DIR [flags]"
    if not read_argv(values, argv, usage, lambda: grouped_help(program, get_config, help_overrides, about)):
        raise SystemExit(0)
    preset_args = {
        name: values[name].value
        for name in inspect.signature(get_config).parameters
        if name in defaults and values[name].value is not None
    }
    config = get_config(**preset_args) if preset_args else defaults
    if values["model"].value is not None:
        # A preset's shape overrides (the digits presets' small model) belong to its own model:
        # --model=ViT-S_16 means that variant's shape, unless a shape flag is given too.
        for name in ARCHITECTURE_OVERRIDES:
            if name in config:
                config[name] = 0
    weights = values["weights"].value if "weights" in defaults else None
    weights_params = None
    if values["model"].value is None and describes_itself(weights):
        # --weights=FILE alone: the file says what it is (its shape), so no shape flags are needed.
        fields, weights_params = architecture_from_weights(weights)
        for name, value in fields.items():
            if name in config:
                config[name] = value
    for name in defaults:
        if values[name].value is not None:
            config[name] = values[name].value
    config.lock()
    return Command(config, weights_params)


def read_argv(values, argv, usage, help_text=None):
    """Parses argv into absl `values`; False when it asked for --help (printed with `usage`, then
    `help_text()`, or absl's list of the flags without it).

    A bad or misspelt flag, or a stray argument, is a one-line UsageError.
    """
    if any(a in ("--help", "-h", "--helpfull") for a in argv[1:]):
        print(f"{usage}\n")
        print(help_text() if help_text else values.get_help())
        return False
    try:
        rest = values(argv)
    except flags.Error as e:
        raise UsageError(str(e)) from None
    if len(rest) > 1:
        raise UsageError(f"unexpected arguments {rest[1:]}; flags look like --name=value.")
    return True


def grouped_help(program, get_config, help_overrides=None, about=None, width=100):
    """A trainer's `--help` after its usage line: what it does, two example commands, what a
    preset is, then its flags under the topics of trainers/fields.py's GROUPS, each with its
    allowed values and the default preset's value."""
    defaults = get_config()
    lines = []
    about = inspect.cleandoc(about or "")
    if about:
        lines += [about.splitlines()[0], ""]
    examples = [line.strip() for line in about.splitlines() if line.strip().startswith("python -m ")]
    if examples:
        lines += ["Examples:", *(f"  {example}" for example in examples[:2]), ""]
    choosers = [name for name in inspect.signature(get_config).parameters if name in defaults]
    lines += textwrap.wrap(
        f"A preset is a recipe's values for every flag below (configs/{program}.py's get_config), "
        f"chosen by {_listed([f'--{name}' for name in choosers])}; a flag you give overrides "
        f"its preset's value. The 'preset default' of each flag is its value in the preset of "
        f"--{choosers[0]}={defaults[choosers[0]]}.",
        width,
    )
    for group, title in GROUPS.items():
        # In declaration order: the field a user sets first (--dataset, --model) comes first.
        names = [name for name in FIELDS if name in defaults and FIELDS[name].group == group]
        if not names:
            continue
        lines += ["", f"{title}:"]
        for name in names:
            text = (
                f"{(help_overrides or {}).get(name, FIELDS[name].help)} (preset default: {defaults[name]!r})"
            )
            lines.append(f"  {_flag_form(name, defaults[name])}")
            lines += textwrap.wrap(text, width, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def _listed(words):
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _flag_form(name, default):
    """How a flag is written: --name=<a|b> for a choice, --[no]name for a switch, else its type."""
    if FIELDS[name].choices:
        return f"--{name}=<{'|'.join(FIELDS[name].choices)}>"
    if isinstance(default, bool):
        return f"--[no]{name}"
    kind = {int: "INT", float: "NUMBER", str: "TEXT"}.get(type(default), "VALUE")
    return f"--{name}={kind}"


def _define(defaults, help_overrides):
    values = flags.FlagValues()
    for name, default in defaults.items():
        field = FIELDS[name]
        # The flags themselves default to "not given" (the preset decides), so --help shows the
        # default preset's value.
        help_text = f"{help_overrides.get(name, field.help)} (preset default: {default!r})"
        if name == "base_lr":
            # A number; "sweep" too where the preset has the grid to sweep (fine-tuning).
            parser = _LearningRateParser(sweepable="sweep_lrs" in defaults)
            flags.DEFINE(parser, name, None, help_text, flag_values=values)
        elif name == "accum_steps":
            flags.DEFINE(_AccumStepsParser(), name, None, help_text, flag_values=values)
        elif field.choices:
            flags.DEFINE_enum(name, None, field.choices, help_text, flag_values=values)
        elif isinstance(default, bool):
            flags.DEFINE_bool(name, None, help_text, flag_values=values)
        elif isinstance(default, int):
            flags.DEFINE_integer(name, None, help_text, flag_values=values)
        elif isinstance(default, float):
            flags.DEFINE_float(name, None, help_text, flag_values=values)
        else:
            flags.DEFINE_string(name, None, help_text, flag_values=values)
    return values


def check_known_fields(config, known):
    """A config built in Python (a notebook) may hold a misspelt field: one line naming the closest."""
    for name in config:
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known fields: {', '.join(sorted(known))}"
            raise UsageError(f"unknown config field {name!r}{hint}")


def parse_eval_splits(text):
    """'minival=train[90%:],test=test' -> {'minival': 'train[90%:]', 'test': 'test'}."""
    splits = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, split = item.partition("=")
        if not sep or not name or not split:
            raise UsageError(f"--eval_splits entry {item!r} is not name=split (e.g. test=test).")
        if name in splits:
            raise UsageError(f"--eval_splits names {name!r} twice.")
        splits[name.strip()] = split.strip()
    return splits


def parse_base_lr(value, sweepable=True):
    """--base_lr as given (a flag's text or a config value) -> a float, or "sweep" where allowed."""
    try:
        return _read_base_lr(value, sweepable)
    except ValueError as e:
        raise UsageError(f"--base_lr={value}: {e}.") from None


def _read_base_lr(value, sweepable):
    if isinstance(value, str) and value.strip().lower() == "sweep":
        if not sweepable:
            raise ValueError("sweep is a fine-tuning option (python -m trainers.finetune); give a number")
        return "sweep"
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError("must be a number or 'sweep'" if sweepable else "must be a number") from None


class _LearningRateParser(flags.ArgumentParser):
    """absl parser of --base_lr; a bad value reads "flag --base_lr=VALUE: must be a number or 'sweep'"."""

    def __init__(self, sweepable):
        self.sweepable = sweepable

    def parse(self, argument):
        return _read_base_lr(argument, self.sweepable)


def parse_accum_steps(value):
    """--accum_steps as given (a flag's text or a config value) -> "auto" or a positive int."""
    try:
        return _read_accum_steps(value)
    except ValueError as e:
        raise UsageError(f"--accum_steps={value}: {e}.") from None


def _read_accum_steps(value):
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        steps = int(value)
    except (TypeError, ValueError):
        steps = 0
    if isinstance(value, float) and value != steps or steps < 1:
        raise ValueError("must be a positive integer or auto")
    return steps


class _AccumStepsParser(flags.ArgumentParser):
    """absl parser of --accum_steps; a bad value reads "flag --accum_steps=0: must be ..."."""

    def parse(self, argument):
        return _read_accum_steps(argument)


def config_to_json(config):
    """The config as the workdir's config.json holds it (sorted keys, indented)."""
    fields = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
    return json.dumps(fields, indent=2, sort_keys=True)
