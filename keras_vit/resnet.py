"""The BiT ResNet stem of the hybrid ViT variants (R+ViT-Ti/16, R26+ViT-S/32, R50+ViT-B/16, ...).

Weight-standardised convolutions and GroupNorm(32) as in the official hybrid models;
names follow the official checkpoint keys (conv_root, gn_root, block1/unit1/conv1, ...).
A stem has a root (7x7 conv, stride 2, then a 3x3 max pool, stride 2) and any number of
bottleneck stages, none included: R+ViT-Ti/16 is the root alone (vit_jax's
`resnet.num_layers = ()`), R26 has (2, 2, 2, 2) units, R50 (3, 4, 6, 3) or, for the /16
variants, (3, 4, 9).
"""

import keras
from keras import ops

from keras_vit import initializers

GROUP_NORM_GROUPS = 32
GROUP_NORM_EPSILON = 1e-6
# The official StdConv standardises its kernel with this epsilon (not the GroupNorm one).
WEIGHT_STANDARDIZATION_EPSILON = 1e-5


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Layer):
    """A bias-free 2D convolution whose kernel is standardised per output channel.

    The kernel starts as the official StdConv's (Flax's nn.Conv default: LeCun truncated
    normal, fan_in = k * k * C).
    """

    def __init__(self, filters, kernel_size, strides=1, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.filters = filters
        self.kernel_size = kernel_size
        self.strides = strides
        self.kernel_initializer = keras.initializers.get(kernel_initializer or initializers.LecunNormal())

    def build(self, input_shape):
        size = (self.kernel_size, self.kernel_size)
        self.kernel = self.add_weight(
            name="kernel",
            shape=(*size, input_shape[-1], self.filters),
            initializer=initializers.for_weight(self.kernel_initializer, num_input_axes=3),
        )

    def call(self, inputs):
        kernel = ops.cast(self.kernel, "float32")
        centred = kernel - ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        # As the official weight_standardize: epsilon added to the std, not to the variance.
        std = ops.std(centred, axis=(0, 1, 2), keepdims=True)
        kernel = centred / (std + WEIGHT_STANDARDIZATION_EPSILON)
        return ops.conv(inputs, ops.cast(kernel, inputs.dtype), strides=self.strides, padding="same")

    def compute_output_shape(self, input_shape):
        def out(size):
            return None if size is None else -(-size // self.strides)

        return (input_shape[0], out(input_shape[1]), out(input_shape[2]), self.filters)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


def _group_norm(name, policy, zero_init=False):
    return keras.layers.GroupNormalization(
        groups=GROUP_NORM_GROUPS,
        epsilon=GROUP_NORM_EPSILON,
        name=name,
        dtype=policy,
        gamma_initializer="zeros" if zero_init else "ones",
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class ResidualUnit(keras.layers.Layer):
    """A bottleneck unit: 1x1 (features) - 3x3 (features, strided) - 1x1 (4 * features)."""

    def __init__(self, features, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.features = features
        self.strides = strides

    def build(self, input_shape):
        policy = self.dtype_policy
        out = 4 * self.features
        self.needs_projection = input_shape[-1] != out or self.strides != 1
        if self.needs_projection:
            self.conv_proj = StdConv2D(out, 1, self.strides, name="conv_proj", dtype=policy)
            self.gn_proj = _group_norm("gn_proj", policy)
        self.conv1 = StdConv2D(self.features, 1, name="conv1", dtype=policy)
        self.gn1 = _group_norm("gn1", policy)
        self.conv2 = StdConv2D(self.features, 3, self.strides, name="conv2", dtype=policy)
        self.gn2 = _group_norm("gn2", policy)
        self.conv3 = StdConv2D(out, 1, name="conv3", dtype=policy)
        # The last norm starts at zero so that each unit starts as the identity.
        self.gn3 = _group_norm("gn3", policy, zero_init=True)
        strided = self.conv2.compute_output_shape(input_shape)
        if self.needs_projection:
            self.conv_proj.build(input_shape)
            self.gn_proj.build(strided[:-1] + (out,))
        self.conv1.build(input_shape)
        self.gn1.build(input_shape[:-1] + (self.features,))
        self.conv2.build(input_shape[:-1] + (self.features,))
        self.gn2.build(strided[:-1] + (self.features,))
        self.conv3.build(strided[:-1] + (self.features,))
        self.gn3.build(strided[:-1] + (out,))

    def call(self, inputs):
        residual = inputs
        if self.needs_projection:
            residual = self.gn_proj(self.conv_proj(inputs))
        x = ops.relu(self.gn1(self.conv1(inputs)))
        x = ops.relu(self.gn2(self.conv2(x)))
        x = self.gn3(self.conv3(x))
        return ops.relu(residual + x)

    def compute_output_shape(self, input_shape):
        shape = StdConv2D(1, 3, self.strides).compute_output_shape(input_shape)
        return shape[:-1] + (4 * self.features,)

    def get_config(self):
        config = super().get_config()
        config.update({"features": self.features, "strides": self.strides})
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStage(keras.layers.Layer):
    """`num_units` residual units; the first one strides and projects."""

    def __init__(self, num_units, features, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.num_units = num_units
        self.features = features
        self.strides = strides

    def build(self, input_shape):
        self.units = []
        shape = tuple(input_shape)
        for index in range(self.num_units):
            unit = ResidualUnit(
                self.features,
                self.strides if index == 0 else 1,
                name=f"unit{index + 1}",
                dtype=self.dtype_policy,
            )
            unit.build(shape)
            shape = unit.compute_output_shape(shape)
            self.units.append(unit)

    def call(self, inputs):
        x = inputs
        for unit in self.units:
            x = unit(x)
        return x

    def compute_output_shape(self, input_shape):
        shape = StdConv2D(1, 3, self.strides).compute_output_shape(input_shape)
        return shape[:-1] + (4 * self.features,)

    def get_config(self):
        config = super().get_config()
        config.update({"num_units": self.num_units, "features": self.features, "strides": self.strides})
        return config


def downsamplings(layers):
    """How many times a stem with `layers` units per stage halves the image (rounding up).

    The root conv and the max pool halve it; so does the first unit of every stage after the
    first. The root alone (no stages) halves it twice too.
    """
    return 2 + max(len(layers) - 1, 0)


def output_stride(layers):
    """Image pixels per position of the stem's feature map (for sizes it divides)."""
    return 2 ** downsamplings(layers)


def resnet_stem(x, layers, width=1, dtype=None):
    """Applies the BiT root and stages to a functional tensor; `layers` may be empty (root only)."""
    base = int(64 * width)
    x = StdConv2D(base, 7, 2, name="conv_root", dtype=dtype)(x)
    x = _group_norm("gn_root", dtype)(x)
    x = keras.layers.Activation("relu", name="root_relu", dtype=dtype)(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="root_pool", dtype=dtype)(x)
    for index, units in enumerate(layers):
        x = ResNetStage(
            units, base * 2**index, strides=1 if index == 0 else 2, name=f"block{index + 1}", dtype=dtype
        )(x)
    return x
