"""Masked patch prediction: the paper's self-supervised pre-training (section 4.6, appendix B.1.2).

Half of each image's patch embeddings are corrupted, as BERT corrupts words: of the corrupted
ones, 80 % are replaced by a learned [mask] embedding, 10 % by the embedding of another, random
patch, and 10 % are kept as they are. From the encoder's output token of every corrupted patch a
per-token head predicts a target computed from the patch's own pixels:

* "mean_color": the patch's mean colour, each channel quantised to 3 bits (512 classes for RGB);
* "downsampled": the patch averaged down to 4 x 4 cells, each cell's colour quantised the same way
  (16 predictions of 512 classes per patch);
* "l2": the patch's pixels themselves, regressed with a squared error.

Counts are exact, not drawn: with N patches, round(rate * N) are corrupted; of those,
round(0.1 * corrupted) are replaced, round(0.1 * corrupted) kept, and the rest masked (rounding
half up). 16 patches: 8 corrupted = 6 masked + 1 replaced + 1 kept; 196 patches: 98 = 78 + 10 + 10.
Which patches play which role comes from uniform noise the caller draws, so a trainer can make it
a pure function of (seed, step) with stateless random ops.

Pure Keras 3 (keras.ops): works on every backend.
"""

import math

import keras
from keras import ops

from keras_vit import initializers

TARGETS = ("mean_color", "downsampled", "l2")
CORRUPTION_RATE = 0.5
REPLACED_FRACTION = 0.1
KEPT_FRACTION = 0.1
COLOR_BITS = 3
DOWNSAMPLED_CELLS = 4  # per side: 4 x 4 cells per patch

# Roles of a patch in corruption_plan's result.
CLEAN, MASKED, REPLACED, KEPT = 0, 1, 2, 3


def _round_half_up(value):
    return int(math.floor(value + 0.5))


def corruption_counts(num_patches, rate=CORRUPTION_RATE):
    """(corrupted, masked, replaced, kept) patches per image of `num_patches`."""
    corrupted = _round_half_up(rate * num_patches)
    replaced = _round_half_up(REPLACED_FRACTION * corrupted)
    kept = _round_half_up(KEPT_FRACTION * corrupted)
    return corrupted, corrupted - replaced - kept, replaced, kept


def corruption_plan(noise, rate=CORRUPTION_RATE):
    """int32 (B, N) roles (CLEAN, MASKED, REPLACED, KEPT) from uniform noise (B, N) in [0, 1).

    Each image's patches are ranked by their noise: the lowest ranks are masked, the next
    replaced, the next kept, the rest clean; so every image has exactly corruption_counts(N).
    """
    num_patches = noise.shape[-1]
    _, masked, replaced, kept = corruption_counts(num_patches, rate)
    rank = ops.argsort(ops.argsort(noise, axis=-1), axis=-1)
    roles = ops.where(rank < masked, MASKED, CLEAN)
    roles = ops.where((rank >= masked) & (rank < masked + replaced), REPLACED, roles)
    roles = ops.where((rank >= masked + replaced) & (rank < masked + replaced + kept), KEPT, roles)
    return ops.cast(roles, "int32")


def replacement_sources(noise):
    """int32 (B, N): for each patch, the flat index (in B * N) of another patch of the batch.

    Uniform over the batch's other B * N - 1 patches; `noise` is uniform in [0, 1), shape (B, N).
    """
    shape = ops.shape(noise)
    total = shape[0] * shape[1]
    own = ops.reshape(ops.arange(total, dtype="int32"), shape)
    offset = 1 + ops.cast(ops.floor(noise * ops.cast(total - 1, noise.dtype)), "int32")
    return (own + ops.minimum(offset, total - 1)) % total


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchCorruption(keras.layers.Layer):
    """Applies a corruption plan to patch embeddings (B, N, D): MASKED ones become the learned
    `mask_embedding`, REPLACED ones the embedding of their source patch, the rest stay."""

    def build(self, input_shape):
        self.mask_embedding = self.add_weight(
            name="mask_embedding",
            shape=(input_shape[-1],),
            # Drawn as the ViT's own weights: the same on every backend (keras_vit.initializers).
            initializer=initializers.TruncatedNormal(stddev=0.02),
        )

    def call(self, tokens, roles, sources):
        shape = ops.shape(tokens)
        flat = ops.reshape(tokens, (shape[0] * shape[1], shape[2]))
        replacement = ops.reshape(ops.take(flat, ops.reshape(sources, (-1,)), axis=0), shape)
        roles = ops.expand_dims(roles, -1)
        mask = ops.broadcast_to(ops.cast(self.mask_embedding, tokens.dtype), shape)
        tokens = ops.where(roles == REPLACED, replacement, tokens)
        return ops.where(roles == MASKED, mask, tokens)

    def compute_output_shape(self, input_shape, *args):
        return input_shape


def patches(images, patch_size):
    """(B, H, W, C) -> (B, N, P, P, C), patches in row-major order (PatchEmbedding's order)."""
    shape = ops.shape(images)
    rows, cols = shape[1] // patch_size, shape[2] // patch_size
    channels = images.shape[-1]
    x = ops.reshape(images, (shape[0], rows, patch_size, cols, patch_size, channels))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (shape[0], rows * cols, patch_size, patch_size, channels))


def color_classes(values, bits=COLOR_BITS):
    """int32 (...,) colour class of (..., C) values in [-1, 1] (pixels / 127.5 - 1).

    Each channel value v in [0, 255] is quantised to level floor(2^bits * v / 255), the top one
    clipped (3 bits: integer values 0-31 -> 0, 32-63 -> 1, ..., 224-255 -> 7); the class is the
    levels read as base-2^bits digits, the first channel most significant:
    (255, 0, 128) -> 7 * 64 + 0 * 8 + 4 = 452.
    """
    levels = 2**bits
    quantised = ops.clip(ops.floor((values + 1.0) * 0.5 * levels), 0, levels - 1)
    channels = values.shape[-1]
    weights = ops.convert_to_tensor([levels ** (channels - 1 - c) for c in range(channels)], values.dtype)
    return ops.cast(ops.sum(quantised * weights, axis=-1), "int32")


def num_colors(channels, bits=COLOR_BITS):
    return (2**bits) ** channels


def targets(images, patch_size, target):
    """Per-patch targets of (B, H, W, C) images in [-1, 1].

    mean_color: int32 (B, N); downsampled: int32 (B, N, 16); l2: float (B, N, P * P * C).
    """
    x = ops.cast(patches(images, patch_size), "float32")
    if target == "mean_color":
        return color_classes(ops.mean(x, axis=(2, 3)))
    if target == "downsampled":
        if patch_size % DOWNSAMPLED_CELLS:
            raise ValueError(
                f"the downsampled target averages each patch to {DOWNSAMPLED_CELLS}x{DOWNSAMPLED_CELLS} "
                f"cells; patch size {patch_size} is not a multiple of {DOWNSAMPLED_CELLS}."
            )
        cell = patch_size // DOWNSAMPLED_CELLS
        shape = ops.shape(x)
        channels = x.shape[-1]
        x = ops.reshape(x, (shape[0], shape[1], DOWNSAMPLED_CELLS, cell, DOWNSAMPLED_CELLS, cell, channels))
        cells = ops.mean(x, axis=(3, 5))
        return ops.reshape(color_classes(cells), (shape[0], shape[1], DOWNSAMPLED_CELLS**2))
    if target == "l2":
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1], patch_size * patch_size * x.shape[-1]))
    raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}.")


def head_size(target, patch_size, channels):
    """Outputs per patch token of the prediction head for `target`."""
    if target == "mean_color":
        return num_colors(channels)
    if target == "downsampled":
        return DOWNSAMPLED_CELLS**2 * num_colors(channels)
    if target == "l2":
        return patch_size * patch_size * channels
    raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}.")


class MaskedPatchPredictor:
    """The pre-training network: a ViT's own layers (shared, so training it trains the ViT) with a
    PatchCorruption layer after "embedding" (before the class token and position embeddings) and
    a per-token Dense head ("masked_patch_head", zero-initialised like the official head).

    `vit` is a keras_vit.ViT without a ResNet stem, taking images in [-1, 1]
    (include_preprocessing=False): the targets are cut from what the patches are cut from.
    Only `corruption` and `head` are new variables; the ViT keeps its own.
    """

    def __init__(self, vit, target="mean_color"):
        if target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}.")
        if vit.get_config().get("resnet_layers"):
            raise ValueError("masked patch prediction needs a ViT without a ResNet stem (not a hybrid).")
        if any(layer.name == "rescaling" for layer in vit.layers):
            raise ValueError("masked patch prediction takes a ViT built with include_preprocessing=False.")
        self.vit, self.target = vit, target
        self.patch_size = vit.patch_size if isinstance(vit.patch_size, int) else vit.patch_size[0]
        if target == "downsampled" and self.patch_size % DOWNSAMPLED_CELLS:
            raise ValueError(
                f"the downsampled target averages each patch to {DOWNSAMPLED_CELLS}x{DOWNSAMPLED_CELLS} "
                f"cells; patch size {self.patch_size} is not a multiple of {DOWNSAMPLED_CELLS}."
            )
        self.channels = channels = vit.input.shape[-1]
        hidden = vit.hidden_size
        self.prefix = 1 if any(layer.name == "cls" for layer in vit.layers) else 0
        # The ViT's graph from its patch embeddings to its final LayerNorm, its own layers: the
        # class token, the position information (whichever kind), the blocks. The image stays an
        # input for the layers that read the patch grid off it (any-size models).
        self.encoder = keras.Model(
            [vit.input, vit.get_layer("embedding").output],
            vit.get_layer("encoder_norm").output,
            name=f"{vit.name}_from_patch_embeddings",
        )
        self.corruption = PatchCorruption(name="patch_corruption")
        self.corruption.build((None, None, hidden))
        self.head = keras.layers.Dense(
            head_size(target, self.patch_size, channels),
            kernel_initializer="zeros",
            name="masked_patch_head",
            dtype="float32",
        )
        self.head.build((None, None, hidden))

    @property
    def trainable_variables(self):
        return [*self.corruption.trainable_variables, *self.head.trainable_variables]

    def targets(self, images):
        # The channel count made static: an input pipeline may leave it unknown.
        images = ops.reshape(images, (*ops.shape(images)[:3], self.channels))
        return targets(images, self.patch_size, self.target)

    def __call__(self, images, roles, sources, training=False):
        """Head outputs (B, N, head_size) at every patch token, float32."""
        images = ops.convert_to_tensor(images)
        tokens = self.corruption(self.vit.get_layer("embedding")(images), roles, sources)
        encoded = self.encoder([images, tokens], training=training)
        return self.head(encoded[:, self.prefix :])
