"""trainers.plan: the config's text fields parsed once, the hardware's decisions taken once, the
weights file's parameters carried from the command line to the model, and the pieces the parts
of a run are handed in place of the config."""

import dataclasses
import json
import types

import numpy as np
import pytest
import tensorflow as tf
from fixtures import tiny_vit

from configs import finetune as finetune_config
from configs.fields import DEFAULTS
from keras_vit import weights as weights_lib
from trainers import finetune, training
from trainers import flags as trainer_flags
from trainers import plan as plan_lib
from trainers.data import ops
from trainers.errors import UsageError
from trainers.evaluators import registry

ONE = tf.distribute.get_strategy()


def _config(**values):
    config = finetune_config.get_config("digits")
    config.update({"workdir": "/tmp/unused", "image_size": 16, "batch_size": 8, **values})
    return config


def test_the_text_fields_come_parsed_and_in_order():
    config = _config(
        accum_steps="2",
        eval_splits="val=train[:10%], test=test",
        pp_train="decode|resize(16)|value_range(-1,1)|mixup(0.5)",
        pp_eval="decode|resize(16)|value_range(-1,1)",
    )
    plan = plan_lib.resolve(config, ONE)
    assert plan.accum_steps == 2 and plan.replicas == 1 and plan.batch_size == 8
    assert list(plan.eval_splits.items()) == [("val", "train[:10%]"), ("test", "test")]
    assert [name for name, _ in plan.train_ops] == ["decode", "resize", "value_range"]
    assert plan.batch_ops == (("mixup", {"p": 0.5}),) and plan.mixes
    assert plan.eval_ops == plan.train_ops  # the same three image ops
    # A digits-sized step on a CPU: float32, and no XLA, with the banner's reason.
    assert (plan.precision, plan.jit) == ("none", False)
    assert plan.jit_note == "auto: on CPU XLA is measured from width 192"


def test_empty_pp_fields_give_the_flags_pipelines():
    config = _config(augreg="medium1", crop_min_area=0.5)
    plan = plan_lib.resolve(config, ONE)
    assert list(plan.train_ops) == ops.train_ops(config) and list(plan.eval_ops) == ops.eval_ops(16)
    assert plan.batch_ops == (("mixup", {"p": 0.2}),)  # medium1's Mixup


def test_the_plan_cannot_be_changed_after_it_is_resolved():
    plan = plan_lib.resolve(_config(), ONE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.batch_size = 16
    with pytest.raises(TypeError):
        plan.eval_splits["extra"] = "train"


@pytest.mark.parametrize(
    "values, replicas, message",
    [
        (dict(accum_steps="3"), 1, "--batch_size 8 is not divisible by --accum_steps 3; use a multiple of 3"),
        (dict(batch_size=12, accum_steps="4"), 2, "--batch_size 12 is not divisible by 2 replicas x"),
        (dict(eval_splits=" , "), 1, "--eval_splits is empty"),
        (dict(pp_eval="decode|resize(0)"), 1, "image op resize(size=0)"),
    ],
)
def test_a_bad_combination_is_one_line(values, replicas, message):
    strategy = ONE if replicas == 1 else tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with pytest.raises(Exception) as error:
        plan_lib.resolve(_config(**values), strategy)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert isinstance(error.value, (UsageError, ValueError))


def test_the_weights_file_is_read_once_from_the_command_line_to_the_model(tmp_path, monkeypatch):
    source = tiny_vit(num_classes=10)
    path = str(tmp_path / "tiny.npz")
    weights_lib.save_npz(source, path)
    reads = []
    read_params = weights_lib.read_params
    monkeypatch.setattr(weights_lib, "read_params", lambda p, *a: reads.append(p) or read_params(p, *a))
    config, weights_params = trainer_flags.parse_command(
        ["finetune", "--dataset=digits", f"--weights={path}", "--image_size=32", "--batch_size=8"],
        finetune.get_config,
    )
    plan = plan_lib.resolve(config, ONE, weights_params)
    assert reads == [path] and plan.params is weights_params
    built = training.build_trainer(config, ONE, type("Spec", (), {"num_classes": 10}), plan)
    assert reads == [path]  # the model was loaded from the plan's parameters
    loaded = built.trainer.model.get_layer("embedding").kernel.numpy()
    np.testing.assert_array_equal(loaded, source.get_layer("embedding").kernel.numpy())


def _pretrain_config(**values):
    from configs import pretrain as pretrain_config

    config = pretrain_config.get_config("digits")
    config.update({"workdir": "/tmp/unused", "objective": "masked_patch", **values})
    return config


def test_masked_patch_prediction_gets_its_draw_at_the_models_patch_size():
    plan = plan_lib.resolve(_pretrain_config(), ONE)
    assert plan.batch_ops[-1] == ("mask_patches", {"patch_size": 4})  # the digits preset's patches
    plan = plan_lib.resolve(_pretrain_config(patch_size=8), ONE)
    assert plan.batch_ops[-1] == ("mask_patches", {"patch_size": 8})
    # A pp string names the draw itself, and is taken as it is.
    pp = "decode|resize(16)|value_range(-1,1)|mask_patches(4)"
    assert plan_lib.resolve(_pretrain_config(pp_train=pp), ONE).batch_ops == (
        ("mask_patches", {"patch_size": 4}),
    )
    # Classification has no draw.
    assert plan_lib.resolve(_pretrain_config(objective="classification"), ONE).batch_ops == ()


@pytest.mark.parametrize(
    "values, message",
    [
        (
            dict(pp_train="decode|resize(16)|value_range(-1,1)"),
            "--objective=masked_patch corrupts the patches each batch's draw chooses: end --pp_train "
            "with mask_patches(4)",
        ),
        (
            dict(pp_train="decode|resize(16)|value_range(-1,1)|mask_patches(8)"),
            "--pp_train: mask_patches(8) draws for 8 px patches, but the model's are 4 px: "
            "use mask_patches(4)",
        ),
        (
            dict(objective="classification", pp_train="decode|resize(16)|value_range(-1,1)|mask_patches(4)"),
            "--pp_train: mask_patches draws the corruption of masked patch prediction: drop it",
        ),
    ],
)
def test_a_draw_that_does_not_fit_the_objective_is_one_line(values, message):
    with pytest.raises(UsageError) as error:
        plan_lib.resolve(_pretrain_config(**values), ONE)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_each_piece_is_read_from_the_config_once_and_frozen():
    config = _config(
        weights="none", loss="sigmoid", new_head=True, device_memory_gb=3.5, cpu_threads=2, eval_every=7
    )
    plan = plan_lib.resolve(config, ONE)
    assert (plan.model.variant, plan.model.weights, plan.model.new_head, plan.model.sigmoid_head) == (
        config.model,
        None,
        True,
        True,
    )
    assert plan.model.kwargs["image_size"] == 16 and "num_classes" not in plan.model.kwargs
    assert (plan.memory.batch_size, plan.memory.image_size, plan.memory.device_memory_gb) == (8, 16, 3.5)
    assert (plan.banner.weights, plan.banner.cpu_threads, plan.banner.eval_every) == (None, 2, 7)
    assert plan.banner.workdir == "/tmp/unused"
    for piece in (plan.model, plan.memory, plan.banner, plan.evals["eval"]):
        field = dataclasses.fields(piece)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(piece, field, None)
    for mapping in (plan.model.kwargs, plan.evals, plan.evals["eval"].keys):
        with pytest.raises(TypeError):
            mapping["extra"] = 1
    # The config changed afterwards changes no piece: they hold values, not the config.
    config.update(image_size=32, eval_every=1)
    assert plan.model.kwargs["image_size"] == 16 and plan.evals["eval"].keys["every"] == 7


def test_the_evaluator_entries_carry_the_flags_values_for_what_they_leave_out():
    config = _config(eval_every=7, fewshot_datasets="digits:0-4", fewshot_every=3, fewshot_shots="1,2")
    plan = plan_lib.resolve(config, ONE)
    assert list(plan.evals) == ["eval", "fewshot"]
    assert plan.evals["eval"] == registry.Entry("classification", types.MappingProxyType({"every": 7}))
    assert dict(plan.evals["fewshot"].keys) == {
        "datasets": "digits:0-4",
        "every": 3,
        "shots": "1,2",
        "seeds": DEFAULTS["fewshot_seeds"],
        "l2_reg": DEFAULTS["fewshot_l2_reg"],
        "batch_size": DEFAULTS["fewshot_batch_size"],
    }
    # An entry's own values win; the keys it leaves out still take the flags'.
    evals = {"test": {"type": "topk", "split": "test", "every": 0}, "probe": {"type": "fewshot", "seeds": 2}}
    plan = plan_lib.resolve(_config(evals=json.dumps(evals), eval_every=7, fewshot_datasets="digits"), ONE)
    assert dict(plan.evals["test"].keys) == {"split": "test", "every": 0}
    assert plan.evals["probe"].keys["seeds"] == 2 and plan.evals["probe"].keys["datasets"] == "digits"


def test_a_bad_evaluator_entry_is_refused_when_the_plan_is_made():
    with pytest.raises(UsageError, match=r"^evals.a: classification takes no key 'splits'"):
        plan_lib.resolve(_config(evals={"a": {"type": "classification", "splits": "test"}}), ONE)
