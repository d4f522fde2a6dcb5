"""The evaluator registry: an `evals` config's entries, their errors, the flags' default evaluators
(the ones runs had before the field), a user's own type, and a run with two evaluators."""

import dataclasses
import json
import os
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
from fixtures import TINY_SHAPE, flags

from configs import finetune as finetune_config
from trainers import data, features, finetune, plan_pieces
from trainers.data import pp
from trainers.errors import UsageError
from trainers.evaluators import classification, from_config, registry
from trainers.evaluators.fewshot import FewShotEvaluator
from trainers.evaluators.topk import TopKEvaluator
from trainers.flags import parse_eval_splits


@pytest.fixture
def types_copy(monkeypatch):
    """A copy of the registry and a fresh import of the user's module, undone after the test."""
    monkeypatch.setattr(registry, "_TYPES", dict(registry._TYPES))
    monkeypatch.delitem(sys.modules, "user_evaluator", raising=False)


def _config(**values):
    config = finetune_config.get_config("digits")
    config.update(values)
    return config


def _context(config):
    spec = data.get_spec("digits")
    trainer = types.SimpleNamespace(metric_name="accuracy", model=None)
    requested = []

    def eval_input(split):
        requested.append(split)
        return data.make_input_fn(spec, split, image_size=8, global_batch_size=32, training=False)

    context = from_config.Context(
        strategy=tf.distribute.get_strategy(),
        spec=spec,
        trainer=trainer,
        eval_input=eval_input,
        eval_splits=parse_eval_splits(config.eval_splits),
        image_size=config.image_size,
        data_dir=None,
    )
    return context, requested


def _build(config, context):
    """The evaluators of `config`, built as a run builds them: from its plan's resolved entries."""
    return from_config.build(plan_pieces.eval_entries(config), context)


def _one_line(make):
    with pytest.raises(UsageError) as e:
        make()
    assert "\n" not in str(e.value)
    return str(e.value)


def test_the_builtin_types_and_their_keys():
    assert {"classification", "fewshot", "topk"} <= set(registry.known())
    assert registry.keys("classification") == ["split", "every"]
    assert registry.keys("topk") == ["split", "k", "every"]


def test_the_default_config_gives_the_evaluators_of_the_flags():
    config = _config(eval_splits="minival=train[90%:],test=test", eval_every=7)
    context, requested = _context(config)
    (evaluator,) = _build(config, context)
    # As trainers/training.py built it before `evals`: one classifier over every --eval_splits entry.
    assert type(evaluator) is classification.ClassificationEvaluator
    assert (evaluator.name, evaluator.every) == ("eval", 7)
    assert list(evaluator.datasets) == list(parse_eval_splits(config.eval_splits))
    assert requested == ["train[90%:]", "test"]


def test_fewshot_flags_add_the_fewshot_evaluator_they_always_did():
    config = _config(
        fewshot_datasets="digits:5-9",
        fewshot_every=3,
        fewshot_shots="1,2",
        fewshot_seeds=2,
        fewshot_l2_reg="sweep",
    )
    context, _ = _context(config)
    _, got = _build(config, context)
    expected = FewShotEvaluator(
        ["digits:5-9"],
        image_size=config.image_size,
        batch_size=config.fewshot_batch_size,
        shots=config.fewshot_shots,
        seeds=config.fewshot_seeds,
        l2_reg=config.fewshot_l2_reg,
        every=config.fewshot_every,
    )
    assert type(got) is FewShotEvaluator and got.name == "fewshot"
    for name in (
        "every",
        "image_size",
        "batch_size",
        "shots",
        "seeds",
        "l2_reg",
        "train_split",
        "test_split",
    ):
        assert getattr(got, name) == getattr(expected, name), name
    assert got.specs.keys() == expected.specs.keys()


def test_evals_entries_take_the_flags_values_for_the_keys_they_leave_out():
    evals = {
        "test": {"type": "classification", "split": "test[:20]", "every": 5},
        "top5": {"type": "topk", "split": "test[:20]"},
        "probe": {"type": "fewshot", "datasets": ["digits:0-4"], "shots": "1"},
    }
    config = _config(evals=json.dumps(evals), eval_every=11)
    context, requested = _context(config)
    test, top5, probe = _build(config, context)
    assert (list(test.datasets), test.every) == (["test"], 5)
    assert (type(top5), top5.k, top5.every, top5.name) == (TopKEvaluator, 5, 11, "top5")
    assert (probe.name, probe.shots, probe.every, list(probe.specs)) == ("probe", (1,), 0, ["digits_0-4"])
    assert requested == ["test[:20]", "test[:20]"]
    # A dict from a Python config is the same as its JSON text on the command line.
    assert from_config.entries(evals, "") == evals
    assert plan_pieces.eval_entries(_config(evals=evals)) == plan_pieces.eval_entries(
        _config(evals=json.dumps(evals))
    )


@pytest.mark.parametrize(
    "evals, expected",
    [
        ("{test:", "--evals is not JSON ("),
        ('["test"]', "--evals must map names to entries"),
        (
            {"a": {"split": "test"}},
            'evals.a must be a dict with a "type" (one of classification, fewshot, topk',
        ),
        (
            {"a": {"type": "confusion"}},
            "evals.a: unknown evaluator type 'confusion'; the known types are classification, fewshot, topk",
        ),
        (
            {"a": {"type": "classification", "splits": "test"}},
            "evals.a: classification takes no key 'splits'; its keys are split, every",
        ),
        ({"a": {"type": "topk", "k": 0}}, "evals.a.k must be an integer >= 1, got 0"),
        ({"a": {"type": "classification", "every": -1}}, "evals.a.every must be an integer >= 0"),
        (
            {"a": {"type": "no_such_module:x"}},
            "evals.a.type 'no_such_module:x': cannot import no_such_module",
        ),
        ({"a": {"type": "fewshot", "datasets": ""}}, "few-shot evaluation: "),
    ],
)
def test_a_bad_entry_is_one_line(evals, expected):
    config = _config(evals=evals)
    assert _one_line(lambda: _build(config, _context(config)[0])).startswith(expected)


def test_a_user_type_registers_from_its_own_module(types_copy):
    config = _config(evals={"mine": {"type": "user_evaluator:constant", "value": 3}})
    (evaluator,) = _build(config, _context(config)[0])
    assert evaluator.run(None) == {"mine/value": 3.0}
    assert "constant" in registry.known()  # registered on import, by the module itself
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("constant")(lambda name, context: None)


@pytest.mark.slow  # 16 s: a training run with two evaluators
def test_a_run_with_two_evaluators_and_pp_strings_writes_both_tags(tmp_path, capsys):
    workdir = tmp_path / "run"
    evals = {
        "test": {"type": "classification", "split": "test[:64]"},
        "top5": {"type": "topk", "split": "test[:64]", "k": 5},
    }
    argv = [
        "finetune",
        "--dataset=digits",
        *flags(TINY_SHAPE),
        "--batch_size=16",
        "--total_steps=4",
        "--warmup_steps=1",
        "--steps_per_loop=2",
        "--eval_every=2",
        "--checkpoint_every=0",
        "--eval_splits=test=test[:16]",
        f"--evals={json.dumps(evals)}",
        "--pp_train=decode|inception_crop(0.5)|random_grayscale(0.5)|resize(16)|value_range(-1,1)|mixup(0.5)",
        "--pp_eval=decode|resize(16)|value_range(-1,1)",
        f"--workdir={workdir}",
    ]
    assert finetune.main(argv) == 0
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert set(results["eval"]) == {"test"} and results["eval"]["test"]["examples"] == 64
    assert 0 <= results["eval"]["test"]["accuracy"] <= 1
    assert results["eval"]["test"]["accuracy"] <= results["top5/top5_accuracy"] <= 1
    out = capsys.readouterr().out
    assert "step 2  test: accuracy" in out and "step 2  top5: top5/top5_accuracy" in out
    # The banner names the split the classification evaluator reads, not --eval_splits'.
    (data_line,) = [line for line in out.splitlines() if line.startswith("data:")]
    assert data_line.endswith("eval test 64 (test[:64])"), data_line


def test_fewshot_features_see_images_through_the_runs_pp_eval():
    config = _config(evals={"probe": {"type": "fewshot", "datasets": "digits:0-4", "shots": "1", "seeds": 1}})
    plain, _ = _context(config)
    zero_to_one = dataclasses.replace(plain, eval_ops=tuple(pp.parse("decode|resize(16)|value_range(0,1)")))
    (default,) = _build(config, plain)
    (probe,) = _build(config, zero_to_one)
    pixels, _ = default._features(features.PIXELS, "digits_0-4", "train")
    seen, _ = probe._features(features.PIXELS, "digits_0-4", "train")
    assert pixels.min() == -1.0 and seen.min() == 0.0  # the flags' [-1, 1], the string's [0, 1]
    np.testing.assert_allclose(seen, (pixels + 1) / 2, atol=1e-6)
