"""trainers.optimizers: vit_jax's schedule and optax's trace momentum, through the real Trainer.

The reference is written out in NumPy (float64) from the definitions in optax (`trace`,
`scale_by_learning_rate`, `clip_by_global_norm`) and vit_jax (`create_learning_rate_schedule`),
so a Keras-SGD-style update (v = 0.9 v - lr g), a schedule shifted by one step, or clipping before
the all-reduce would each fail these tests. optax itself is the reference of
`test_sgd_equals_optax_itself`, float32 and bfloat16 traces, clipping binding or not.
"""

import math

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from trainers import distribute, loop, optimizers

FEATURES, CLASSES, BATCH = 6, 3, 8


def vit_jax_lr(step, base, total, warmup, decay_type, linear_end=1e-5):
    progress = min(max((step - warmup) / float(total - warmup), 0.0), 1.0)
    if decay_type == "linear":
        lr = linear_end + (base - linear_end) * (1.0 - progress)
    else:
        lr = base * 0.5 * (1.0 + math.cos(math.pi * progress))
    if warmup:
        lr *= min(1.0, step / warmup)
    return lr


def _batches(steps):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(steps, BATCH, FEATURES))
    y = rng.integers(0, CLASSES, size=(steps, BATCH))
    return x, y


def _numpy_grads(w, b, x, y):
    """Gradient of the mean softmax cross-entropy of logits = x w + b."""
    logits = x @ w + b
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    p /= len(y)
    return x.T @ p, p.sum(0)


def _reference(w, b, x, y, *, schedule, clip, momentum=0.9, trace_dtype=np.float64):
    """optax.chain(clip_by_global_norm(clip), sgd(schedule, momentum)) in NumPy."""
    params = [w.astype(np.float64), b.astype(np.float64)]
    traces = [np.zeros_like(p, dtype=trace_dtype) for p in params]
    for count in range(len(x)):
        grads = _numpy_grads(*params, x[count], y[count])
        norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
        grads = [g * min(1.0, clip / norm) for g in grads]
        lr = schedule(count)
        # optax's trace decays in the trace's own dtype (bfloat16 included), then adds the gradient.
        decayed = [(t * np.asarray(momentum, dtype=trace_dtype)).astype(trace_dtype) for t in traces]
        new_traces = [g + d.astype(np.float64) for g, d in zip(grads, decayed)]
        params = [p - lr * t for p, t in zip(params, new_traces)]
        traces = [t.astype(trace_dtype) for t in new_traces]
    return params


def _train(replicas, x, y, *, schedule, clip, momentum_dtype="float32", calls=None):
    strategy = distribute.create_strategy("cpu", cpu_devices=replicas)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        dense = keras.layers.Dense(CLASSES, bias_initializer="random_normal")
        model = keras.Sequential([keras.Input((FEATURES,)), dense])
        w0, b0 = (v.copy() for v in model.get_weights())
        optimizer = optimizers.make_optimizer("sgd", schedule, momentum_dtype=momentum_dtype)
        trainer = loop.TensorFlowTrainer(
            strategy=strategy, model=model, optimizer=optimizer, global_batch_size=BATCH, grad_norm_clip=clip
        )
    data = tf.data.Dataset.from_tensor_slices((x.astype("float32"), y.astype("int32")))
    iterator = iter(strategy.experimental_distribute_dataset(data.unbatch().batch(BATCH)))
    # Two loop calls: the schedule must follow the optimizer's iteration across calls.
    for steps in calls or (4, len(x) - 4):
        trainer.train(iterator, steps)
    return (w0, b0), model.get_weights(), optimizer


@pytest.mark.parametrize("replicas", [1, 2])
def test_ten_steps_equal_optax_trace_under_warmup_cosine(replicas):
    steps, base, warmup = 10, 0.5, 3
    schedule = optimizers.WarmupDecay(base, total_steps=steps, warmup_steps=warmup, decay_type="cosine")
    x, y = _batches(steps)
    (w0, b0), trained, _ = _train(replicas, x, y, schedule=schedule, clip=0.3)
    expected = _reference(
        w0, b0, x, y, clip=0.3, schedule=lambda n: vit_jax_lr(n, base, steps, warmup, "cosine")
    )
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    # The clip binds: an unclipped or per-replica-clipped run would have moved elsewhere.
    unclipped = _reference(
        w0, b0, x, y, clip=1e9, schedule=lambda n: vit_jax_lr(n, base, steps, warmup, "cosine")
    )
    assert np.abs(unclipped[0] - expected[0]).max() > 1e-3


def test_keras_sgd_velocity_would_differ():
    """The reference above is not blind to the momentum form: Keras' SGD lands elsewhere."""
    steps, base, warmup = 10, 0.5, 3
    x, y = _batches(steps)
    rng = np.random.default_rng(0)
    w0, b0 = rng.normal(size=(FEATURES, CLASSES)), rng.normal(size=CLASSES)
    lr = [vit_jax_lr(n, base, steps, warmup, "cosine") for n in range(steps)]
    params, velocity = [w0, b0], [np.zeros_like(w0), np.zeros_like(b0)]
    for n in range(steps):
        grads = _numpy_grads(*params, x[n], y[n])
        velocity = [0.9 * v - lr[n] * g for v, g in zip(velocity, grads)]
        params = [p + v for p, v in zip(params, velocity)]
    optax = _reference(w0, b0, x, y, clip=1e9, schedule=lambda n: lr[n])
    assert np.abs(params[0] - optax[0]).max() > 1e-3


def test_first_update_of_a_warmed_up_run_has_zero_learning_rate():
    """vit_jax evaluates the schedule at the update's 0-based count: lr(0) = 0 under warm-up."""
    schedule = optimizers.WarmupDecay(1.0, total_steps=10, warmup_steps=5)
    x, y = _batches(1)
    (w0, b0), (w1, b1), optimizer = _train(1, x, y, schedule=schedule, clip=0, calls=(1,))
    np.testing.assert_array_equal(w1, w0)
    np.testing.assert_array_equal(b1, b0)
    # ... but the gradient already went into the trace, as optax's does.
    expected_trace = _numpy_grads(w0.astype(np.float64), b0.astype(np.float64), x[0], y[0])[0]
    np.testing.assert_allclose(optimizer.traces[0].numpy(), expected_trace, atol=1e-6)
    assert int(optimizer.iterations.numpy()) == 1


def test_bfloat16_trace_is_stored_in_bfloat16_and_matches_optax():
    steps, base = 6, 0.3
    schedule = optimizers.WarmupDecay(base, total_steps=steps, warmup_steps=0, decay_type="linear")
    x, y = _batches(steps)
    (w0, b0), trained, optimizer = _train(1, x, y, schedule=schedule, clip=0, momentum_dtype="bfloat16")
    assert all(t.dtype == "bfloat16" for t in optimizer.traces)
    lr = lambda n: vit_jax_lr(n, base, steps, 0, "linear")  # noqa: E731
    expected = _reference(w0, b0, x, y, clip=1e9, schedule=lr, trace_dtype=ml_dtypes.bfloat16)
    full = _reference(w0, b0, x, y, clip=1e9, schedule=lr)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)
    # bfloat16 storage is visible: the float32-trace answer is measurably elsewhere.
    assert np.abs(full[0] - expected[0]).max() > 1e-4


def test_warmup_then_cosine_and_linear_match_vit_jax():
    for decay in ("cosine", "linear"):
        schedule = optimizers.WarmupDecay(0.03, total_steps=500, warmup_steps=100, decay_type=decay)
        for step in (0, 1, 50, 99, 100, 101, 250, 499, 500, 600):
            expected = vit_jax_lr(step, 0.03, 500, 100, decay)
            assert float(schedule(step)) == pytest.approx(expected, rel=1e-6, abs=1e-9)
    restored = optimizers.WarmupDecay.from_config(schedule.get_config())
    assert float(restored(321)) == pytest.approx(float(schedule(321)))


def test_trace_sgd_round_trips_its_config():
    optimizer = optimizers.TraceSGD(0.1, momentum=0.8, momentum_dtype="bfloat16")
    restored = optimizers.TraceSGD.from_config(optimizer.get_config())
    assert (restored.momentum, restored.momentum_dtype) == (0.8, "bfloat16")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(decay_type="step"), "decay_type"),
    ],
)
def test_schedule_rejects_unknown_decay(kwargs, match):
    with pytest.raises(ValueError, match=match):
        optimizers.WarmupDecay(1.0, 10, **kwargs)


def test_unknown_optimizer_and_momentum_dtype_are_refused():
    with pytest.raises(ValueError, match="optimizer must be one of sgd, adam"):
        optimizers.make_optimizer("lamb", 0.1)
    with pytest.raises(ValueError, match="momentum_dtype"):
        optimizers.make_optimizer("sgd", 0.1, momentum_dtype="float16")


def _optax_run(w0, b0, x, y, *, lrs, clip, accumulator_dtype):
    """optax.chain(clip_by_global_norm(clip), sgd(lrs[count], momentum=0.9)) on the same model in JAX."""
    import jax
    import jax.numpy as jnp
    import optax

    def loss(params, xb, yb):
        logits = xb @ params[0] + params[1]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(yb)), yb])

    schedule = jnp.asarray(lrs, jnp.float32)
    sgd = optax.sgd(lambda count: schedule[count], momentum=0.9, accumulator_dtype=accumulator_dtype)
    transform = optax.chain(optax.clip_by_global_norm(clip), sgd)
    params = [jnp.asarray(w0, jnp.float32), jnp.asarray(b0, jnp.float32)]
    state = transform.init(params)
    for n in range(len(x)):
        grads = jax.grad(loss)(params, jnp.asarray(x[n], jnp.float32), jnp.asarray(y[n]))
        updates, state = transform.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return [np.asarray(p) for p in params], state


@pytest.mark.parametrize("momentum_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("clip", [0.3, 1e6], ids=["clip_binds", "clip_idle"])
def test_sgd_equals_optax_itself(momentum_dtype, clip):
    steps, base, warmup = 8, 0.3, 2
    schedule = optimizers.WarmupDecay(base, total_steps=steps, warmup_steps=warmup, decay_type="cosine")
    lrs = [float(schedule(n)) for n in range(steps)]
    x, y = _batches(steps)
    (w0, b0), trained, optimizer = _train(
        1, x, y, schedule=schedule, clip=clip, momentum_dtype=momentum_dtype, calls=(3, steps - 3)
    )
    expected, state = _optax_run(w0, b0, x, y, lrs=lrs, clip=clip, accumulator_dtype=momentum_dtype)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The traces themselves, stored in the same dtype, agree too.
    optax_traces = state[1][0].trace
    for ours, theirs in zip(optimizer.traces, optax_traces):
        assert str(theirs.dtype) == momentum_dtype
        np.testing.assert_allclose(
            np.asarray(ours.numpy(), np.float32), np.asarray(theirs, np.float32), rtol=1e-5, atol=1e-6
        )
