"""Below the plan nothing reads the config: the model builder, the memory estimate, the banner,
the objectives and the evaluator factories run on the plan's pieces alone (trainers/plan_pieces.py,
trainers/plan.py)."""

import ast
import glob
import os
import types

import ml_collections
import pytest
import tensorflow as tf
from fixtures import TINY_SHAPE

from configs import finetune as finetune_config
from trainers import banner, data, memory, model_builder
from trainers import plan as plan_lib
from trainers.evaluators import from_config
from trainers.evaluators.classification import ClassificationEvaluator
from trainers.evaluators.fewshot import FewShotEvaluator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The modules handed plan pieces instead of the config.
BELOW_THE_PLAN = [
    "trainers/model_builder.py",
    "trainers/memory.py",
    "trainers/banner.py",
    "trainers/objectives.py",
    "trainers/data/mask_patches.py",
] + sorted(
    os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "trainers", "evaluators", "*.py"))
)


def _config_readers(source):
    """(line, what) of each place `source` reaches for a config: a name, parameter or attribute
    called `config`, or a `.get(name, FIELDS[...]...)` fallback to a declared default."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id == "config":
            found.append((node.lineno, "name config"))
        elif isinstance(node, ast.arg) and node.arg == "config":
            found.append((node.lineno, "parameter config"))
        elif isinstance(node, ast.Attribute) and node.attr == "config":
            found.append((node.lineno, "attribute .config"))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get":
            names = {n.id for arg in node.args for n in ast.walk(arg) if isinstance(n, ast.Name)}
            if names & {"FIELDS", "DEFAULTS"}:
                found.append((node.lineno, ".get(..., FIELDS[...])"))
    return found


def test_the_check_finds_each_way_of_reading_a_config():
    source = (
        "def f(config):\n"
        "    a = context.config.eval_every\n"
        "    b = settings.get('loss', FIELDS['loss'].default)\n"
        "    return config\n"
    )
    assert sorted(what for _, what in _config_readers(source)) == [
        ".get(..., FIELDS[...])",
        "attribute .config",
        "name config",
        "parameter config",
    ]


@pytest.mark.parametrize("path", BELOW_THE_PLAN)
def test_no_module_below_the_plan_reads_a_config(path):
    with open(os.path.join(ROOT, path)) as f:
        assert _config_readers(f.read()) == [], path


def _tiny_plan(strategy):
    """The plan of a tiny digits fine-tuning run with few-shot probes, and the digits spec."""
    config = finetune_config.get_config("digits")
    config.update(
        dict(
            TINY_SHAPE,
            workdir="/tmp/unused",
            weights="none",
            image_size=16,
            batch_size=16,
            eval_every=9,
            device_memory_gb=100.0,
            fewshot_datasets="digits:0-4",
            fewshot_every=4,
            fewshot_shots="1,2",
        )
    )
    return plan_lib.resolve(config, strategy), data.get_spec("digits")


def _refuse_config_reads(patch):
    """Makes reading any ConfigDict an AssertionError while `patch` (a MonkeyPatch) is in place."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("a ConfigDict was read below the plan")

    for name in ("__getattr__", "__getitem__", "__contains__", "get", "items", "to_dict"):
        patch.setattr(ml_collections.ConfigDict, name, refuse)


def test_the_parts_of_a_run_are_built_from_the_plan_alone():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])  # one that names its device, for the banner
    plan, spec = _tiny_plan(strategy)
    with pytest.MonkeyPatch.context() as patch:
        _refuse_config_reads(patch)
        model = model_builder.build_model(plan.model, spec.num_classes, params=plan.params)
        accum, note = memory.resolve_accum_steps(plan.memory, strategy, model, plan.accum_steps)
        lines = banner.lines(
            settings=plan.banner,
            spec=spec,
            strategy=strategy,
            model=model,
            eval_splits=dict(plan.eval_splits),
            accum_steps=accum,
            memory_note=note,
            precision_note="float32",
            jit=False,
            start_step=0,
        )
        context = from_config.Context(
            strategy=strategy,
            spec=spec,
            trainer=types.SimpleNamespace(metric_name="accuracy", model=model),
            eval_input=lambda split: data.make_input_fn(
                spec, split, image_size=16, global_batch_size=16, training=False
            ),
            eval_splits=plan.eval_splits,
            image_size=16,
            data_dir=None,
            eval_ops=plan.eval_ops,
        )
        evaluators = from_config.build(plan.evals, context)
    assert model.hidden_size == TINY_SHAPE["hidden_size"] and accum == 1
    assert lines[-1] == "workdir:  /tmp/unused" and "eval every 9" in lines[4]
    assert [type(e) for e in evaluators] == [ClassificationEvaluator, FewShotEvaluator]
    assert (evaluators[0].every, evaluators[1].every, evaluators[1].shots) == (9, 4, (1, 2))


def test_the_tripwire_catches_a_config_read():
    config = finetune_config.get_config("digits")
    with pytest.MonkeyPatch.context() as patch:
        _refuse_config_reads(patch)
        with pytest.raises(AssertionError, match="read below the plan"):
            config.get("eval_every")
    assert config.eval_every == finetune_config.get_config("digits").eval_every  # undone afterwards


def test_a_piece_reads_each_field_from_the_config_field_of_its_name():
    """plan_pieces.same_named: a field read from a neighbour (total_steps from warmup_steps) or
    a field the config lacks would give a wrong plan or none."""
    from trainers import plan_pieces

    config = finetune_config.get_config("digits")
    config.unlock()
    config.update(total_steps=123, warmup_steps=7, steps_per_loop=5, eval_every=11, keep_checkpoints=2)
    loop = plan_pieces.loop_settings(config)
    assert (loop.total_steps, loop.steps_per_loop, loop.eval_every, loop.keep_checkpoints) == (123, 5, 11, 2)
    assert plan_pieces.optimizer_settings(config).warmup_steps == 7
    assert plan_pieces.memory_settings(config).variant == config.model  # the one renamed field
    del config["keep_checkpoints"]
    with pytest.raises(KeyError, match="keep_checkpoints"):
        plan_pieces.loop_settings(config)
