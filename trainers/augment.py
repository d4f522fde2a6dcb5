"""Image preprocessing for training and evaluation: decode, inception crop, flip, resize, scale to [-1, 1].

Every random choice is a stateless op whose seed the caller derives from (seed, epoch, example index),
so an example's augmentation is a pure function of those three numbers. That is what lets a resumed
run, or a run with a different number of replicas or hosts, see exactly the same images.
"""
import tensorflow as tf

# The paper's fine-tuning crop (the official input pipeline): a random box covering 5%-100% of the
# image with an aspect ratio between 3/4 and 4/3.
CROP_AREA_RANGE = (0.05, 1.0)
CROP_ASPECT_RATIO_RANGE = (3.0 / 4.0, 4.0 / 3.0)

# Philox is pinned so that the derived seeds do not depend on the device TensorFlow would pick.
_ALG = "philox"


def decode(encoded):
    """Encoded JPEG/PNG/GIF/BMP bytes -> uint8 (h, w, 3); grayscale and RGBA become RGB."""
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def example_seed(seed, epoch, index):
    """A stateless seed (shape [2], int64) that depends only on the run seed, the epoch and the index."""
    base = tf.stack([tf.cast(seed, tf.int64), tf.constant(0x5EED, tf.int64)])
    per_epoch = tf.random.experimental.stateless_fold_in(base, tf.cast(epoch, tf.int64), alg=_ALG)
    return tf.random.experimental.stateless_fold_in(per_epoch, tf.cast(index, tf.int64), alg=_ALG)


def _to_unit_range(image):
    """float pixels in [0, 255] -> [-1, 1], the range the ViT checkpoints were trained on."""
    return tf.clip_by_value(image / 127.5 - 1.0, -1.0, 1.0)


def inception_crop(image, seed, min_area=CROP_AREA_RANGE[0]):
    """A random crop of `image` (h, w, c) covering min_area-100% of it, aspect ratio as in the paper."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=tf.zeros([0, 0, 4], tf.float32), seed=seed,
        min_object_covered=0.0, area_range=(min_area, CROP_AREA_RANGE[1]),
        aspect_ratio_range=CROP_ASPECT_RATIO_RANGE,
        max_attempts=10, use_image_if_no_bounding_boxes=True)
    return tf.slice(image, begin, size)


def train_image(image, seed, image_size, crop_min_area=CROP_AREA_RANGE[0], flip=True):
    """uint8 (h, w, 3) -> float32 (image_size, image_size, 3) in [-1, 1]: crop, resize, flip.

    crop_min_area and flip exist for images the paper's policy does not suit: on 8 x 8 digits a
    5% crop is 2 x 2 pixels, and a mirrored digit is another shape.
    """
    crop_seed = tf.random.experimental.stateless_fold_in(seed, 1, alg=_ALG)
    flip_seed = tf.random.experimental.stateless_fold_in(seed, 2, alg=_ALG)
    image = inception_crop(image, crop_seed, crop_min_area)
    image = tf.image.resize(tf.cast(image, tf.float32), [image_size, image_size], method="bilinear")
    if flip:
        image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return _to_unit_range(image)


def eval_image(image, image_size):
    """uint8 (h, w, 3) -> float32 (image_size, image_size, 3) in [-1, 1]: resize only (the paper's eval)."""
    image = tf.image.resize(tf.cast(image, tf.float32), [image_size, image_size], method="bilinear")
    return _to_unit_range(image)
