"""What the tests of the documentation's code blocks share (tests/test_docs_*.py, one file per
page): the fetchers of a block by its mark's name, the runners of a block's Python or commands,
and the local stand-ins for what this machine lacks.

A test module fetches a block with `block(NAME)`, `unrunnable(NAME, REASON)` or `region(NAME)`,
imported from here and called by that bare name with the name written out, so that
tests/test_docs_marks.py can read every claim from the test files' syntax trees (see
tests/readme_blocks.py). `fresh_keras` clears Keras' session after each test of a module that
imports it. The session stand-ins `registry_cache` and `tfds_dir` are exposed by tests/conftest.py,
so that the modules that use them share one of each per session.
"""

import ast
import importlib
import os
import re

import keras
import numpy as np
import pytest
import readme_blocks
import synthetic_checkpoints as synth
from readme_blocks import split_command
from trainer_cli import TINY_MODEL, make_fake_tfds

import keras_vit
from keras_vit import checkpoints

# A trainer run reduced to seconds: two steps of a one-block ViT at 32 px.
SHORT = ["--total_steps=2", "--warmup_steps=1", "--batch_size=8", "--steps_per_loop=1", "--eval_every=0"]
SHORT_TINY = TINY_MODEL + SHORT

BLOCKS = readme_blocks.read()


def block(name):
    """The block marked `<!-- runnable: NAME -->` or `<!-- sample: NAME -->`."""
    return readme_blocks.named(BLOCKS, name, "block")


def unrunnable(name, reason):
    """The block marked `<!-- unrunnable: NAME -->`; `reason` says why it cannot run here."""
    assert reason, f"say why {name!r} cannot run here"
    return readme_blocks.named(BLOCKS, name, "unrunnable")


def region(name):
    """The blocks of the generated region `<!-- NAME:begin ...`, in order."""
    found = [b for b in BLOCKS if b.region == name]
    assert found, f"the docs have no generated region {name!r} with code blocks"
    return found


def replaced(text, replacements, strict=True):
    """text with each placeholder replaced; strict: a placeholder the text lacks is an error (drift)."""
    for old, new in replacements.items():
        assert old in text or not strict, f"{old!r} is no longer in the docs' text {text[:80]!r}"
        text = text.replace(old, new)
    return text


def run_python(python_block, namespace=None, replacements=None):
    """Runs a Python block of the docs as a notebook cell: (namespace, value of its last expression)."""
    source = replaced(python_block.text, replacements or {})
    tree = ast.parse(source)
    namespace = {} if namespace is None else namespace
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, python_block.where, "exec"), namespace)
    value = None
    if last is not None:
        value = eval(compile(ast.Expression(last.value), python_block.where, "eval"), namespace)
    return namespace, value


def pixels(*shape):
    return np.random.default_rng(0).uniform(0, 255, shape).astype("float32")


def run_command(command, capsys, replacements=None, extra=()):
    """Runs a `python -m MODULE ...` command of the docs in-process: (exit code, stdout, stderr)."""
    env, argv = split_command(replaced(command, replacements or {}, strict=False))
    assert not env and argv[:2] == ["python", "-m"], command
    module = importlib.import_module(argv[2])
    args = [a for a in argv[3:] if a != "..."] + list(extra)
    if argv[2].startswith("trainers."):  # absl-style: argv[0] is the program
        args = [argv[2].rsplit(".", 1)[1], *args]
    capsys.readouterr()
    code = module.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def trainer_config(command, replacements=None):
    """The config a trainer command resolves, through the trainer's own flag parser."""
    from trainers import flags

    _, argv = split_command(replaced(command, replacements or {}, strict=False))
    module = importlib.import_module(argv[2])
    program = argv[2].rsplit(".", 1)[1]
    return flags.parse_flags([program, *[a for a in argv[3:] if a != "..."]], module.get_config)


def console_pattern(sample_line):
    """A sample console line with every number free: the format, not the values, must match."""
    parts = re.split(r"(\d+(?:\.\d+)?)", sample_line)
    return "".join(r"\d+(?:\.\d+)?" if i % 2 else re.escape(p) for i, p in enumerate(parts))


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def registry_cache(tmp_path_factory):
    """KERAS_HOME whose cache holds synthetic files of registry entries, written when asked for."""
    home = tmp_path_factory.mktemp("keras_home")
    os.makedirs(home / "models")

    def put(name, variant):
        entry = checkpoints.lookup(name, variant)
        path = home / "models" / entry.file_name
        if not path.exists():
            params = synth.vit_jax_params(
                0,
                image_size=entry.image_size,
                num_classes=entry.num_classes,
                representation_size=entry.representation_size,
                **keras_vit.VARIANTS[variant],
            )
            synth.save(path, params)
        return str(home)

    return put


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory):
    """A TFDS data_dir with oxford_iiit_pet (10 per class) and cifar10 (25 per class)."""
    data_dir = tmp_path_factory.mktemp("tfds")
    make_fake_tfds(data_dir, "oxford_iiit_pet", per_class=10, test_per_class=1)
    make_fake_tfds(data_dir, "cifar10", per_class=25, test_per_class=2)
    return str(data_dir)


@pytest.fixture
def default_tfds(monkeypatch, tfds_dir):
    """TFDS's default data_dir (what commands without --data_dir read) is the stand-in one."""
    import tensorflow_datasets as tfds

    monkeypatch.setenv("TFDS_DATA_DIR", tfds_dir)
    monkeypatch.setattr(tfds.core.constants, "DATA_DIR", tfds_dir)
    return tfds_dir


@pytest.fixture(autouse=True)
def fresh_keras():
    yield
    keras.backend.clear_session()
