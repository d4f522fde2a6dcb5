"""random_grayscale(p): with probability p, the image's colours replaced by their luma (kept 3-channel).

An image op in a file of its own, registered by the decorator; the one other line it needs is its
import in trainers/data/__init__.py, which registers it whenever the trainers' data side is loaded.
In a pp string: 'decode|inception_crop(0.05)|random_grayscale(0.2)|resize(224)|value_range(-1,1)'.
"""

import numbers

import tensorflow as tf

from trainers.data.ops import register


@register("random_grayscale", random=True)
def random_grayscale(p=0.2):
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"p must be a probability in [0, 1], got {p!r}")

    def op(image, seed):
        # ITU-R 601 luma, the weights of tf.image.rgb_to_grayscale, on any dtype (uint8 or float pixels).
        gray = tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(image))
        return tf.where(tf.random.stateless_uniform([], seed) < p, gray, image)

    return op
