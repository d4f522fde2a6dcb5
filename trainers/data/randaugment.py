"""RandAugment (Cubuk et al., arXiv:1909.13719) as big_vision's `randaug(N, M)`, seeded per example.

Each of the N layers picks one of the 16 ops below uniformly and applies it at magnitude M (M = 10 is
the reference strength; the AugReg levels use 0 to 20). The ops and their magnitude scales follow
big_vision/pp/autoaugment.py (`distort_image_with_randaugment`): rotations up to 30 degrees, shears
up to 0.3, enhancement factors 0.1 + 1.8 M / 10, posterize to int(4 M / 10) bits, solarize below
int(256 M / 10), solarize-add of int(110 M / 10), geometric ops filling with grey 128 and a random
sign. Two deliberate differences: translations and the cutout square are a fraction of the image
(100 / 224 and 40 / 224 of its side at M = 10, the official pixel counts at 224 px), so that small
images are not shifted out of view; and the ops run on float pixels in [0, 255] (posterize and
equalize round to integers first) instead of uint8.

Why not keras.layers.RandAugment: its random choices come from a keras.random.SeedGenerator, a
stateful variable, and Keras' random ops take only an int or a SeedGenerator as seed, not a seed
tensor. Inside tf.data the draws would then depend on the order in which the parallel map ran,
not on the example, and a resumed run or another replica count would augment the same example
differently. Here every draw is a stateless op of the example seed, so the same (run seed, epoch,
example index) always gives the same image, eagerly and inside tf.data.
"""

import functools
import math

import tensorflow as tf

SEED_ALG = "philox"
MAX_LEVEL = 10.0
GREY = 128.0
TRANSLATE_FRACTION = 100.0 / 224.0
CUTOUT_FRACTION = 40.0 / 224.0


# Plain TensorFlow ops, no Python control flow on tensors: AutoGraph has nothing to convert, and
# skipping it keeps the 16 x N branches quick to trace inside tf.data.
@tf.autograph.experimental.do_not_convert
def randaugment(image, seed, num_ops, magnitude):
    """float32 (h, w, 3) in [0, 255] -> the same shape, after `num_ops` random ops of `magnitude`."""
    image = tf.convert_to_tensor(image, tf.float32)
    branches = [clipped(op, float(magnitude)) for op in OPS]
    for layer in range(int(num_ops)):
        layer_seed = tf.random.experimental.stateless_fold_in(seed, layer, alg=SEED_ALG)
        choice = tf.random.stateless_uniform(
            [], layer_seed, minval=0, maxval=len(OPS), dtype=tf.int32, alg=SEED_ALG
        )
        op_seed = tf.random.experimental.stateless_fold_in(layer_seed, 1, alg=SEED_ALG)
        # partial, not lambdas: AutoGraph cannot read several lambdas on one line and would warn.
        image = tf.switch_case(choice, [functools.partial(op, image, op_seed) for op in branches])
    return image


def clipped(op, magnitude):
    """op at `magnitude` as a function of (image, seed), its pixels clipped to [0, 255]."""

    def apply(current, seed):
        return tf.clip_by_value(op(current, magnitude, seed), 0.0, 255.0)

    return apply


def _sign(seed):
    """+1 or -1 with probability 1/2 each."""
    draw = tf.random.stateless_uniform([], seed, alg=SEED_ALG)
    return tf.where(draw < 0.5, -1.0, 1.0)


# -------------------------------------------------------------------------------------------- colour


def auto_contrast(image, magnitude, seed):
    """Stretches each channel to the full [0, 255] range (a flat channel is kept)."""
    low = tf.reduce_min(image, axis=[0, 1], keepdims=True)
    high = tf.reduce_max(image, axis=[0, 1], keepdims=True)
    stretched = (image - low) * (255.0 / tf.maximum(high - low, 1e-6))
    return tf.where(high > low, stretched, image)


def equalize(image, magnitude, seed):
    """Histogram equalisation of each channel (PIL's ImageOps.equalize, as the reference does it)."""
    pixels = tf.cast(tf.round(tf.clip_by_value(image, 0.0, 255.0)), tf.int32)
    return tf.stack([_equalize_channel(pixels[..., c]) for c in range(3)], axis=-1)


def _equalize_channel(channel):
    histogram = tf.math.bincount(channel, minlength=256, maxlength=256)
    nonzero = tf.boolean_mask(histogram, histogram > 0)
    step = (tf.reduce_sum(nonzero) - nonzero[-1]) // 255
    safe_step = tf.maximum(step, 1)
    table = (tf.cumsum(histogram) + safe_step // 2) // safe_step
    table = tf.clip_by_value(tf.concat([[0], table[:-1]], 0), 0, 255)
    equalized = tf.cast(tf.gather(table, channel), tf.float32)
    return tf.where(step == 0, tf.cast(channel, tf.float32), equalized)


def invert(image, magnitude, seed):
    return 255.0 - image


def posterize(image, magnitude, seed):
    """Keeps the top int(4 M / 10) bits. Shifts are clamped to 0..7 as TensorFlow's bit shifts of
    uint8 are, so M = 0 (AugReg light1) keeps one bit, not none: "randaug(2,0)" is not a no-op."""
    shift = min(max(8 - int(magnitude / MAX_LEVEL * 4), 0), 7)
    pixels = tf.cast(tf.round(tf.clip_by_value(image, 0.0, 255.0)), tf.int32)
    return tf.cast(tf.bitwise.left_shift(tf.bitwise.right_shift(pixels, shift), shift), tf.float32)


def solarize(image, magnitude, seed):
    threshold = float(int(magnitude / MAX_LEVEL * 256))
    return tf.where(image < threshold, image, 255.0 - image)


def solarize_add(image, magnitude, seed):
    addition = float(int(magnitude / MAX_LEVEL * 110))
    return tf.where(image < 128.0, tf.minimum(image + addition, 255.0), image)


def _enhance_factor(magnitude):
    return magnitude / MAX_LEVEL * 1.8 + 0.1


def _blend(degenerate, image, factor):
    return degenerate + factor * (image - degenerate)


def _grey(image):
    return tf.image.rgb_to_grayscale(image)


def color(image, magnitude, seed):
    return _blend(tf.tile(_grey(image), [1, 1, 3]), image, _enhance_factor(magnitude))


def contrast(image, magnitude, seed):
    mean = tf.reduce_mean(_grey(image))
    return _blend(tf.fill(tf.shape(image), mean), image, _enhance_factor(magnitude))


def brightness(image, magnitude, seed):
    return _blend(tf.zeros_like(image), image, _enhance_factor(magnitude))


def sharpness(image, magnitude, seed):
    """Blends with PIL's SMOOTH-filtered image; the one-pixel border keeps its original values."""
    kernel = tf.constant([[1.0, 1, 1], [1, 5, 1], [1, 1, 1]]) / 13.0
    kernel = tf.tile(kernel[:, :, None, None], [1, 1, 3, 1])
    smooth = tf.nn.depthwise_conv2d(image[None], kernel, [1, 1, 1, 1], "VALID")[0]
    smooth = tf.pad(smooth, [[1, 1], [1, 1], [0, 0]])
    interior = tf.pad(tf.ones(tf.shape(smooth)[:2] - 2), [[1, 1], [1, 1]])[..., None] > 0
    return _blend(tf.where(interior, smooth, image), image, _enhance_factor(magnitude))


# ----------------------------------------------------------------------------------------- geometry


def _transform(image, matrix):
    """Output pixel (x, y) takes the input at [a0 x + a1 y + a2, b0 x + b1 y + b2], grey outside."""
    transforms = tf.reshape(tf.concat([tf.cast(matrix, tf.float32), tf.zeros([2])], 0), [1, 8])
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None],
        transforms=transforms,
        output_shape=tf.shape(image)[:2],
        fill_value=GREY,
        interpolation="NEAREST",
        fill_mode="CONSTANT",
    )[0]


def rotate(image, magnitude, seed):
    """Rotation about the centre by up to 30 degrees (at M = 10), either way."""
    radians = _sign(seed) * (magnitude / MAX_LEVEL * 30.0) * math.pi / 180.0
    height, width = (tf.cast(n, tf.float32) - 1.0 for n in tf.unstack(tf.shape(image)[:2]))
    cos, sin = tf.cos(radians), tf.sin(radians)
    x_offset = (width - (cos * width - sin * height)) / 2.0
    y_offset = (height - (sin * width + cos * height)) / 2.0
    return _transform(image, tf.stack([cos, -sin, x_offset, sin, cos, y_offset]))


def shear_x(image, magnitude, seed):
    level = _sign(seed) * magnitude / MAX_LEVEL * 0.3
    return _transform(image, tf.stack([1.0, level, 0.0, 0.0, 1.0, 0.0]))


def shear_y(image, magnitude, seed):
    level = _sign(seed) * magnitude / MAX_LEVEL * 0.3
    return _transform(image, tf.stack([1.0, 0.0, 0.0, level, 1.0, 0.0]))


def _shift(image, magnitude, seed, axis):
    side = tf.cast(tf.shape(image)[1 - axis], tf.float32)
    pixels = _sign(seed) * magnitude / MAX_LEVEL * TRANSLATE_FRACTION * side
    row = [1.0, 0.0, -pixels, 0.0, 1.0, 0.0] if axis == 0 else [1.0, 0.0, 0.0, 0.0, 1.0, -pixels]
    return _transform(image, tf.stack(row))


def translate_x(image, magnitude, seed):
    return _shift(image, magnitude, seed, axis=0)


def translate_y(image, magnitude, seed):
    return _shift(image, magnitude, seed, axis=1)


def cutout(image, magnitude, seed):
    """A grey square of side 2 x pad (pad = M / 10 x 40 / 224 of the image side) at a random centre."""
    shape = tf.shape(image)
    side = tf.cast(tf.minimum(shape[0], shape[1]), tf.float32)
    pad = tf.cast(magnitude / MAX_LEVEL * CUTOUT_FRACTION * side, tf.int32)
    centre = tf.random.stateless_uniform([2], seed, minval=0, maxval=2**30, dtype=tf.int32, alg=SEED_ALG)
    centre = centre % shape[:2]
    rows = tf.range(shape[0])[:, None]
    cols = tf.range(shape[1])[None, :]
    inside = _within(rows - centre[0], pad) & _within(cols - centre[1], pad)
    return tf.where(inside[..., None], GREY, image)


def _within(offset, pad):
    return (offset >= -pad) & (offset < pad)


# The reference's list, in its order: an op's index is what a layer draws.
OPS = (
    auto_contrast,
    equalize,
    invert,
    rotate,
    posterize,
    solarize,
    color,
    contrast,
    brightness,
    sharpness,
    shear_x,
    shear_y,
    translate_x,
    translate_y,
    cutout,
    solarize_add,
)
