"""The losses (trainers/numerics.py, shared by the engines) on Keras' JAX backend, on fixed
numbers, for tests/test_jax_engine_cli.py to compare with TensorFlow's; it runs in a child
(trainer_cli.run_in_one_child):

    ("jax_engine_losses", [OUT.npz])   ->   OUT.npz: the inputs and what the jax engine computed

mixup's soft targets, the sigmoid loss on multi-hot and on integer labels, masked patch prediction's
per-patch loss and hits for each target, the patches it replaces others by, and the global norm of
gradients (tests/test_numerics.py's) with optax's beside it.
"""

import numpy as np

LOSSES = [("softmax", "soft"), ("softmax", "integers"), ("sigmoid", "multi_hot"), ("sigmoid", "integers")]


def main(argv):
    # Imported here: the test process (TensorFlow's Keras) imports LOSSES, never JAX.
    from trainers import numerics

    rng = np.random.default_rng(0)
    saved = {"logits": rng.normal(size=(6, 5)).astype("float32")}
    saved["soft"] = rng.dirichlet(np.ones(5), 6).astype("float32")
    saved["multi_hot"] = (rng.uniform(size=(6, 5)) < 0.4).astype("float32")
    saved["integers"] = rng.integers(0, 5, 6).astype("int32")
    for loss, labels in LOSSES:
        per_example = numerics.per_example_loss(loss, saved[labels], saved["logits"])
        saved[f"{loss}_{labels}"] = np.asarray(per_example)
    patches = {
        "mean_color": (rng.normal(size=(2, 4, 512)), rng.integers(0, 512, (2, 4))),
        "downsampled": (rng.normal(size=(2, 4, 16 * 512)), rng.integers(0, 512, (2, 4, 16))),
        "l2": (rng.uniform(-1, 1, (2, 4, 48)), rng.uniform(-1, 1, (2, 4, 48))),
    }
    for target, (outputs, targets) in patches.items():
        saved[f"{target}_outputs"] = outputs.astype("float32")
        saved[f"{target}_targets"] = targets.astype("float32" if target == "l2" else "int32")
        pair = saved[f"{target}_outputs"], saved[f"{target}_targets"]
        loss, hits = numerics.masked_patch_per_patch(*pair, target, 3)
        saved[f"{target}_loss"], saved[f"{target}_hits"] = np.asarray(loss), np.asarray(hits)
    # Masked patch replacements of a step's global batch: 2 replicas of 3 rows, 4 patches each.
    saved["noise"] = rng.uniform(size=(6, 4)).astype("float32")
    saved["sources"] = np.asarray(numerics.replacement_sources(saved["noise"], replicas=2))
    # The global norm, compiled as the jax engine's step compiles it, and optax's.
    import jax
    import optax
    from test_numerics import gradients

    for seed in range(5):
        grads = [jax.numpy.asarray(g) for g in gradients(seed)]
        saved[f"global_norm_{seed}"] = np.asarray(jax.jit(numerics.global_norm)(grads))
        saved[f"optax_global_norm_{seed}"] = np.asarray(jax.jit(optax.global_norm)(grads))
    np.savez(argv[0], **saved)
    return 0
