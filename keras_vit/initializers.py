"""Initialisers that start a model as the official Flax code does.

Keras counts the fans of a kernel with more than two axes as a convolution (leading axes =
receptive field), and that convention has changed between Keras releases. Flax's
DenseGeneral instead reads a kernel as a matrix from its input axes to its output axes, so
a (D, heads, head_dim) attention kernel has fan_in = D and fan_out = heads * head_dim. The
initialisers here take the number of input axes explicitly and never use Keras' fan logic.

An unseeded Keras initialiser draws its seed once, from Python's `random`, when it is
constructed, and then returns the same values at every call: one instance shared by two
weights makes them equal. `for_weight` gives each weight its own instance, drawn when the
weight is built, so `keras.utils.set_random_seed` still makes a model reproducible.
"""

import math
import random

import keras

# The standard deviation of a unit normal truncated to [-2, 2]; dividing by it makes the
# truncated samples have the intended variance (as jax.nn.initializers.variance_scaling).
TRUNCATED_NORMAL_STDDEV = 0.87962566103423978


def kernel_fans(shape, num_input_axes=None):
    """(fan_in, fan_out) of a kernel read as a matrix from its first `num_input_axes` axes
    to the others; None means all axes but the last."""
    shape = tuple(int(size) for size in shape)
    if num_input_axes is None:
        num_input_axes = len(shape) - 1
    if not 0 < num_input_axes < len(shape):
        raise ValueError(
            f"A kernel of shape {shape} cannot have {num_input_axes} input axes; "
            "pass num_input_axes between 1 and its rank - 1."
        )
    return math.prod(shape[:num_input_axes]), math.prod(shape[num_input_axes:])


class KernelInitializer(keras.initializers.Initializer):
    """Base of the kernel initialisers here: explicit input axes and a seed.

    Args:
        num_input_axes: how many leading axes of the kernel are contracted with the input
            (1 for a (D, heads, head_dim) projection, 2 for (heads, head_dim, D), 3 for a
            (P, P, C, D) convolution); None: all axes but the last. Layers of keras_vit set
            it for each of their kernels.
        seed: an int for the same values at every call; None draws one from Python's
            `random` now (so `keras.utils.set_random_seed` governs it).
    """

    def __init__(self, num_input_axes=None, seed=None):
        if seed is not None and not isinstance(seed, int):
            raise ValueError(f"seed must be an int or None, got {seed!r}.")
        self.num_input_axes = num_input_axes
        self._config_seed = seed
        # As Keras' own unseeded initialisers, so that set_random_seed makes builds repeat.
        self.seed = seed if seed is not None else random.randint(1, int(1e9))

    def get_config(self):
        return {"num_input_axes": self.num_input_axes, "seed": self._config_seed}


@keras.saving.register_keras_serializable(package="keras_vit")
class XavierUniform(KernelInitializer):
    """Uniform on +-sqrt(6 / (fan_in + fan_out)): variance 2 / (fan_in + fan_out)."""

    def __call__(self, shape, dtype=None):
        fan_in, fan_out = kernel_fans(shape, self.num_input_axes)
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        return keras.random.uniform(shape, minval=-limit, maxval=limit, dtype=dtype, seed=self.seed)


@keras.saving.register_keras_serializable(package="keras_vit")
class LecunNormal(KernelInitializer):
    """Normal truncated at two standard deviations, scaled to variance 1 / fan_in."""

    def __call__(self, shape, dtype=None):
        fan_in, _ = kernel_fans(shape, self.num_input_axes)
        stddev = math.sqrt(1.0 / fan_in) / TRUNCATED_NORMAL_STDDEV
        return keras.random.truncated_normal(shape, stddev=stddev, dtype=dtype, seed=self.seed)


def for_weight(initializer, num_input_axes=None):
    """A new instance of `initializer` (an instance, name or config) for one weight.

    An unseeded initialiser gets a fresh seed, so no two weights share values; a
    KernelInitializer is told the kernel's `num_input_axes`. An int-seeded one keeps its
    seed: the caller asked for those exact values.
    """
    initializer = keras.initializers.get(initializer)
    config = initializer.get_config()
    if isinstance(initializer, KernelInitializer) and num_input_axes is not None:
        config["num_input_axes"] = num_input_axes
    return type(initializer).from_config(config)
