"""trainers.loop: the compiled distributed step, schedules and optimizers (in-process)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers import distribute, loop, optimizers

GLOBAL_BATCH = 8


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0).astype("int32")
    return x, y


def _run(
    replicas=1,
    accum_steps=1,
    clip=0.05,
    precision="float32",
    base_lr=0.1,
    optimizer="sgd",
    weight_decay=0.0,
    steps=(2, 2, 2),
    loss="softmax",
    jit_compile=False,
):
    """Trains a small MLP; returns (per-call outputs, eval metrics, final weights, step).

    loss="sigmoid" trains on multi-hot labels (which of the first three inputs are positive).
    """
    strategy = distribute.create_strategy("cpu", cpu_devices=replicas)
    keras.utils.set_random_seed(0)
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        with strategy.scope():
            inputs = keras.Input((8,))
            hidden = keras.layers.Dense(16, activation="relu")(inputs)
            model = keras.Model(inputs, keras.layers.Dense(3, dtype="float32")(hidden))
            schedule = optimizers.WarmupDecay(base_lr, total_steps=sum(steps), warmup_steps=2)
            opt = optimizers.make_optimizer(
                optimizer, schedule, weight_decay=weight_decay, loss_scaling=precision == "mixed_float16"
            )
            trainer = loop.TensorFlowTrainer(
                strategy=strategy,
                model=model,
                optimizer=opt,
                global_batch_size=GLOBAL_BATCH,
                accum_steps=accum_steps,
                grad_norm_clip=clip,
                loss=loss,
                jit_compile=jit_compile,
            )
    finally:
        keras.mixed_precision.set_global_policy(previous)
    x, y = _data()
    if loss == "sigmoid":
        y = (x[:, :3] > 0).astype("float32")
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(train))
    outs = [trainer.train(iterator, n) for n in steps]
    weights = np.ones(len(x), "float32")
    weights[-5:] = 0.0  # padding rows must not count
    evaluation = tf.data.Dataset.from_tensor_slices((x, y, weights)).batch(GLOBAL_BATCH)
    metrics = trainer.evaluate(strategy.experimental_distribute_dataset(evaluation))
    return outs, metrics, [w.copy() for w in model.get_weights()], int(trainer.step.numpy())


def test_two_replicas_match_one_with_binding_clip():
    one = _run(replicas=1)
    two = _run(replicas=2)
    # The clip (0.05) is below every gradient norm, so a per-replica clip would differ.
    assert all(o["grad_norm"] > 0.05 for o in one[0])
    for a, b in zip(one[0], two[0]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
    for a, b in zip(one[2], two[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert one[3] == two[3] == 6
    assert one[1]["examples"] == two[1]["examples"] == 59


@pytest.mark.parametrize("replicas, accum_steps", [(1, 1), (2, 2)])
def test_xla_trains_as_one_replica_without(replicas, accum_steps):
    """On one device the whole replica step is one XLA function, which MirroredStrategy must be
    handed as the tf.function itself: wrapped in anything else, its all-reduce failed as it was
    traced (merge_call while defining a graph). Over two logical CPUs, compiling the whole step
    fails in TF 2.21 (one XLA cluster reaching both devices' variables); the Trainer compiles
    each replica's gradients instead (here inside the accumulation loop)."""
    plain = _run(replicas=1)
    compiled = _run(replicas=replicas, accum_steps=accum_steps, jit_compile=True)
    for a, b in zip(plain[0], compiled[0]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    for a, b in zip(plain[2], compiled[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sigmoid_on_multi_hot_labels_is_the_same_over_replicas_and_accumulation():
    one = _run(loss="sigmoid")
    accumulated = _run(replicas=2, accum_steps=2, loss="sigmoid")
    for a, b in zip(one[0], accumulated[0]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    for a, b in zip(one[2], accumulated[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert one[1].keys() == {"loss", "prec@1", "examples"} and one[1]["examples"] == 59
    assert one[1]["prec@1"] == pytest.approx(accumulated[1]["prec@1"])
    assert 0.0 <= one[1]["prec@1"] <= 1.0 and one[1]["loss"] > 0


def test_unknown_loss_is_refused():
    strategy = distribute.create_strategy("cpu", cpu_devices=1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
        with pytest.raises(ValueError, match="loss must be one of softmax, sigmoid"):
            loop.TensorFlowTrainer(
                strategy=strategy,
                model=model,
                optimizer=optimizers.make_optimizer("sgd", 0.1),
                global_batch_size=2,
                loss="hinge",
            )


def test_clipping_changes_the_update():
    clipped = _run(clip=0.05)[2]
    unclipped = _run(clip=0)[2]
    assert not np.allclose(clipped[0], unclipped[0])


def test_gradient_accumulation_equals_the_full_batch():
    full = _run(replicas=2)
    accumulated = _run(replicas=2, accum_steps=2)
    for a, b in zip(full[2], accumulated[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert full[0][-1]["loss"] == pytest.approx(accumulated[0][-1]["loss"], rel=1e-5)


def test_eval_ignores_padding_weights():
    _, metrics, _, _ = _run()
    assert metrics["examples"] == 59
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["loss"] > 0


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_trains_close_to_float32(precision):
    reference = _run(replicas=2)
    mixed = _run(replicas=2, precision=precision)
    assert all(o["finite"] for o in mixed[0])
    assert mixed[0][-1]["loss"] == pytest.approx(reference[0][-1]["loss"], rel=0.02)


def test_adamw_decays_weights():
    plain = _run(optimizer="adam", base_lr=0.01, clip=0)[2]
    decayed = _run(optimizer="adam", base_lr=0.01, clip=0, weight_decay=0.5)[2]
    assert np.abs(decayed[0]).sum() < np.abs(plain[0]).sum()


def test_huge_learning_rate_is_reported_as_non_finite():
    outs = _run(base_lr=1e38, clip=0, steps=(2, 2, 2))[0]
    assert not all(o["finite"] for o in outs)


def test_batch_not_divisible_is_refused():
    strategy = distribute.create_strategy("cpu", cpu_devices=2)
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
        opt = optimizers.make_optimizer("sgd", 0.1)
        with pytest.raises(ValueError, match="not divisible"):
            loop.TensorFlowTrainer(
                strategy=strategy, model=model, optimizer=opt, global_batch_size=6, accum_steps=2
            )
