"""Initialisers that start a model as the official Flax code does, with the same values on
every Keras backend.

Keras counts the fans of a kernel with more than two axes as a convolution (leading axes =
receptive field), and that convention has changed between Keras releases. Flax's
DenseGeneral instead reads a kernel as a matrix from its input axes to its output axes, so
a (D, heads, head_dim) attention kernel has fan_in = D and fan_out = heads * head_dim. The
initialisers here take the number of input axes explicitly and never use Keras' fan logic.

Keras' own random initialisers draw from each backend's generator, so one seed gives one model
on TensorFlow and another on JAX. The initialisers here draw with NumPy (a PCG64 Generator,
the same bits on every platform) and hand the values to the backend:
- unseeded, each instance takes an int seed from Python's `random` when it is constructed
  (as Keras' own do), so `keras.utils.set_random_seed` makes a build repeat, on every backend;
- inside `seeded(seed)`, each weight's values come from the seed and the weight's place in the
  model (its layer's path and its rank among that layer's random weights), not from how many
  draws came before: the trainers build their models so, and adding a layer moves no other
  layer's start.
An unseeded Keras 3 initialiser returns the same values at every call: one instance shared by
two weights makes them equal. `for_weight` gives each weight its own instance, and turns Keras'
RandomNormal, TruncatedNormal and RandomUniform into their NumPy-drawn equivalents here.
"""

import contextlib
import contextvars
import hashlib
import math
import random

import keras
import numpy as np
from keras.src.backend.common.name_scope import current_path  # Keras exports no public accessor

# The standard deviation of a unit normal truncated to [-2, 2]; dividing by it makes the
# truncated samples have the intended variance (as jax.nn.initializers.variance_scaling).
TRUNCATED_NORMAL_STDDEV = 0.87962566103423978
# The active seeded() scope: (seed, {layer path: random weights drawn there so far}).
_SCOPE = contextvars.ContextVar("keras_vit_initializer_seed", default=None)


@contextlib.contextmanager
def seeded(seed):
    """Within: every keras_vit initialiser without a seed of its own draws weight values from
    `seed` and the weight's place in the model, the same on every backend.

        with keras_vit.initializers.seeded(3):
            model = keras_vit.ViT(...)   # the same initial weights on TensorFlow, JAX and PyTorch
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}.")
    token = _SCOPE.set((seed, {}))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def weight_key(path, rank):
    """The 128 bits that, with the scope's seed, pick one weight's values: from the path of the
    layer that builds it and its rank among that layer's random weights (a Dense: kernel 0, bias 1)."""
    digest = hashlib.sha256(f"{path}#{rank}".encode()).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def scoped_generator(seed, path, rank):
    """The NumPy Generator of the weight at (`path`, `rank`) under seeded(`seed`)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *weight_key(path, rank)])))


class DrawnInitializer(keras.initializers.Initializer):
    """Base of the random initialisers here: NumPy draws from an int seed or the seeded() scope.

    Args:
        seed: an int for the same values at every call, in or out of seeded(); None draws one
            from Python's `random` now (so `keras.utils.set_random_seed` governs it), which
            seeded() replaces by the weight's own key.
    """

    def __init__(self, seed=None):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int or None, got {seed!r}.")
        self._config_seed = seed
        # As Keras' own unseeded initialisers, so that set_random_seed makes builds repeat.
        self.seed = seed if seed is not None else random.randint(1, int(1e9))

    def draw(self, generator, shape):
        """float NumPy values of `shape` from `generator`; each subclass's distribution."""
        raise NotImplementedError

    def __call__(self, shape, dtype=None):
        shape = tuple(int(size) for size in shape)
        values = np.asarray(self.draw(self._generator(), shape), np.float32)
        return keras.ops.cast(keras.ops.convert_to_tensor(values), dtype or keras.config.floatx())

    def _generator(self):
        scope = _SCOPE.get()
        if scope is None or self._config_seed is not None:
            return np.random.default_rng(self.seed)
        seed, ranks = scope
        # The path of the layer that builds the weight (e.g. "encoderblock_0/MlpBlock_3/Dense_0"),
        # which Keras also names the weight by: the same on every backend.
        path = current_path()
        rank = ranks.get(path, 0)
        ranks[path] = rank + 1
        return scoped_generator(seed, path, rank)

    def get_config(self):
        return {"seed": self._config_seed}


def truncated_unit_normal(generator, shape):
    """A unit normal truncated to [-2, 2]: samples outside are drawn again (as Keras' and jax's
    truncated normals, whose standard deviation is that of the untruncated normal)."""
    values = generator.standard_normal(shape, dtype=np.float32)
    outside = np.abs(values) > 2
    while outside.any():
        values[outside] = generator.standard_normal(int(outside.sum()), dtype=np.float32)
        outside = np.abs(values) > 2
    return values


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


class KernelInitializer(DrawnInitializer):
    """Base of the kernel initialisers here: explicit input axes and a seed.

    Args:
        num_input_axes: how many leading axes of the kernel are contracted with the input
            (1 for a (D, heads, head_dim) projection, 2 for (heads, head_dim, D), 3 for a
            (P, P, C, D) convolution); None: all axes but the last. Layers of keras_vit set
            it for each of their kernels.
        seed: as DrawnInitializer's.
    """

    def __init__(self, num_input_axes=None, seed=None):
        super().__init__(seed)
        self.num_input_axes = num_input_axes

    def get_config(self):
        return {"num_input_axes": self.num_input_axes, "seed": self._config_seed}


@keras.saving.register_keras_serializable(package="keras_vit")
class XavierUniform(KernelInitializer):
    """Uniform on +-sqrt(6 / (fan_in + fan_out)): variance 2 / (fan_in + fan_out)."""

    def draw(self, generator, shape):
        fan_in, fan_out = kernel_fans(shape, self.num_input_axes)
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        return generator.uniform(-limit, limit, shape)


@keras.saving.register_keras_serializable(package="keras_vit")
class LecunNormal(KernelInitializer):
    """Normal truncated at two standard deviations, scaled to variance 1 / fan_in."""

    def draw(self, generator, shape):
        fan_in, _ = kernel_fans(shape, self.num_input_axes)
        stddev = math.sqrt(1.0 / fan_in) / TRUNCATED_NORMAL_STDDEV
        return truncated_unit_normal(generator, shape) * np.float32(stddev)


@keras.saving.register_keras_serializable(package="keras_vit")
class RandomNormal(DrawnInitializer):
    """keras.initializers.RandomNormal, drawn as the others here."""

    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        super().__init__(seed)
        self.mean, self.stddev = mean, stddev

    def draw(self, generator, shape):
        return generator.standard_normal(shape, dtype=np.float32) * np.float32(self.stddev) + np.float32(
            self.mean
        )

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self._config_seed}


@keras.saving.register_keras_serializable(package="keras_vit")
class TruncatedNormal(RandomNormal):
    """keras.initializers.TruncatedNormal (redrawn beyond two standard deviations of the mean)."""

    def draw(self, generator, shape):
        return truncated_unit_normal(generator, shape) * np.float32(self.stddev) + np.float32(self.mean)


@keras.saving.register_keras_serializable(package="keras_vit")
class RandomUniform(DrawnInitializer):
    """keras.initializers.RandomUniform, drawn as the others here."""

    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        super().__init__(seed)
        self.minval, self.maxval = minval, maxval

    def draw(self, generator, shape):
        return generator.uniform(self.minval, self.maxval, shape)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self._config_seed}


# Keras' random initialisers and their NumPy-drawn equivalents (the same config).
_DRAWN_EQUIVALENTS = {
    keras.initializers.RandomNormal: RandomNormal,
    keras.initializers.TruncatedNormal: TruncatedNormal,
    keras.initializers.RandomUniform: RandomUniform,
}


def for_weight(initializer, num_input_axes=None):
    """A new instance of `initializer` (an instance, name or config) for one weight.

    An unseeded initialiser gets a fresh seed, so no two weights share values; a
    KernelInitializer is told the kernel's `num_input_axes`. An int-seeded one keeps its
    seed: the caller asked for those exact values. Keras' RandomNormal, TruncatedNormal and
    RandomUniform become the equivalents here, which draw the same on every backend; another
    random initialiser draws from its backend's generator.
    """
    initializer = keras.initializers.get(initializer)
    config = initializer.get_config()
    if isinstance(initializer, KernelInitializer) and num_input_axes is not None:
        config["num_input_axes"] = num_input_axes
    cls = _DRAWN_EQUIVALENTS.get(type(initializer), type(initializer))
    if cls is not type(initializer) and not isinstance(config.get("seed"), (int, type(None))):
        cls = type(initializer)  # a SeedGenerator seed: the backend's own stream
    return cls.from_config(config)
