"""Image ops: the steps an image goes through in training and evaluation, registered by name.

A pipeline's ops are a list of (op name, kwargs), applied in order by `Chain`. `train_ops(config)`
builds the training list from the run's config, `eval_ops(image_size)` the evaluation one:

    train: decode, inception_crop(min_area), resize(size), flip_lr (with --random_flip),
           randaug(num_ops, magnitude) (with --augreg / --randaug), value_range(-1, 1)
    eval:  decode, resize(size), value_range(-1, 1)

An op is registered as a factory: `factory(**kwargs)` checks its arguments and returns the op, a
function of the image, or of (image, seed) for a random op. Every random choice is a stateless op,
and the k-th random op of a list (counting from 1) is seeded with fold_in(example seed, k), the
example seed being a function of (run seed, epoch, example index) only: an example's augmentation
is then the same in a resumed run and on any number of replicas or hosts. A deterministic op added
anywhere, or a random op added after the others, leaves every other op's seed as it was.

A batch op (registered with batch=True) works on whole per-replica batches after the image ops:
`factory(**kwargs)` returns a function of (images, labels, BatchContext) -> (images, labels). Mixup is
one. Its randomness comes from (run seed, global step) (BatchContext), so every replica and host
draws the same numbers for a step, and a resumed run the same as the original. A batch op registered
with evaluation=True is applied to evaluation batches too (BatchContext.training False): masked
patch prediction's draw (trainers/data/mask_patches.py) is one.

A config names ops in a pp string (trainers/data/pp.py: --pp_train, --pp_eval). A new op is one
file that registers it (trainers/data/grayscale.py is the example) and one import line in
trainers/data/__init__.py. A new augmentation knob of the flags: also add its line to `train_ops`,
and declare the config field it reads (its default in configs/fields.py, its help in
trainers/fields.py).
"""

import dataclasses
import inspect
import math
import numbers
from collections.abc import Callable

import tensorflow as tf

from trainers.data import augreg
from trainers.data.randaugment import randaugment
from trainers.errors import DatasetError, first_line

# The paper's fine-tuning crop (the official input pipeline): a random box covering 5%-100% of the
# image with an aspect ratio between 3/4 and 4/3.
CROP_MIN_AREA = 0.05
CROP_ASPECT_RATIO_RANGE = (3.0 / 4.0, 4.0 / 3.0)
# The value range the ViT checkpoints were trained on.
UNIT_RANGE = (-1.0, 1.0)
# Philox is pinned so that the derived seeds do not depend on the device TensorFlow would pick.
SEED_ALG = "philox"


@dataclasses.dataclass(frozen=True)
class _Registered:
    factory: Callable
    random: bool
    batch: bool
    evaluation: bool


_REGISTRY: dict[str, _Registered] = {}


def register(name, *, random=False, batch=False, evaluation=False):
    """Registers the decorated op factory under `name`; random=True: its op takes (image, seed);
    batch=True: a batch op, taking (images, labels, BatchContext); evaluation=True: a batch op that
    evaluation batches go through too."""
    if random and batch:
        raise ValueError("a batch op draws from its BatchContext: register it without random=True")
    if evaluation and not batch:
        raise ValueError(
            "image ops of evaluation are named in its own list: evaluation=True is for batch ops"
        )

    def add(factory):
        if name in _REGISTRY:
            raise ValueError(f"image op {name!r} is registered twice")
        _REGISTRY[name] = _Registered(factory, random, batch, evaluation)
        return factory

    return add


def registered():
    """The names of the registered ops, sorted."""
    return sorted(_REGISTRY)


def is_batch_op(name):
    return _REGISTRY[name].batch


def signature(name):
    """The parameters of op `name`'s factory: what a pp string's arguments bind to."""
    return inspect.signature(_REGISTRY[name].factory)


def in_evaluation(name):
    """Whether batch op `name` also goes over evaluation batches."""
    return _REGISTRY[name].evaluation


@dataclasses.dataclass(frozen=True)
class BatchContext:
    """What a batch op may read beside the batch: the run seed, the global step, the class count,
    which replica the batch feeds, and how many micro-batches that replica splits it into."""

    seed: int
    step: object  # int64 scalar tensor: the global step the batch is trained at
    num_classes: int
    replica: object = 0  # int64 scalar tensor: the replica's index among all replicas in sync
    micro_batches: int = 1  # gradient accumulation's micro-batches per replica batch
    training: bool = True  # False: an evaluation batch (ops registered with evaluation=True)


class Chain:
    """A list of (op name, kwargs) as one function of (value, seed); DatasetError for a bad list."""

    def __init__(self, ops):
        self.ops = [_checked(op, batch=False) for op in ops]
        self._steps = [(_make(name, kwargs), _REGISTRY[name].random) for name, kwargs in self.ops]
        self.random_ops = [name for name, _ in self.ops if _REGISTRY[name].random]

    def __call__(self, value, seed=None):
        draws = 0
        for op, random in self._steps:
            if random:
                draws += 1
                value = op(value, tf.random.experimental.stateless_fold_in(seed, draws, alg=SEED_ALG))
            else:
                value = op(value)
        return value


class BatchChain:
    """A list of batch ops (name, kwargs) as one function of (images, labels, BatchContext)."""

    def __init__(self, ops):
        self.ops = [_checked(op, batch=True) for op in ops]
        self.names = [name for name, _ in self.ops]
        self._steps = [_make(name, kwargs) for name, kwargs in self.ops]

    def __bool__(self):
        return bool(self._steps)

    def for_evaluation(self):
        """The chain of the ops that evaluation batches go through too (register(evaluation=True))."""
        return BatchChain([op for op in self.ops if in_evaluation(op[0])])

    def __call__(self, images, labels, context):
        for op in self._steps:
            images, labels = op(images, labels, context)
        return images, labels


def _checked(op, batch):
    if not (isinstance(op, (tuple, list)) and len(op) == 2 and isinstance(op[1], dict)):
        raise DatasetError(f"an image op is a pair (op name, kwargs dict), got {op!r}")
    name, kwargs = op
    if name not in _REGISTRY:
        raise DatasetError(f"unknown image op {name!r}: the registered ops are {', '.join(registered())}")
    if _REGISTRY[name].batch != batch:
        where = "after the image ops (batch_ops)" if _REGISTRY[name].batch else "among the image ops (ops)"
        kind = "a batch op" if _REGISTRY[name].batch else "an image op"
        raise DatasetError(f"{name} is {kind}: it goes {where}")
    return name, dict(kwargs)


def _make(name, kwargs):
    try:
        return _REGISTRY[name].factory(**kwargs)
    except (TypeError, ValueError) as e:  # an unknown keyword, a value out of range
        arguments = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
        raise DatasetError(f"image op {name}({arguments}): {first_line(e)}") from None


def train_ops(config):
    """The training ops from the run's config (a ConfigDict, or any object with its image_size,
    crop_min_area, random_flip, augreg, randaug and mixup fields)."""
    ops = [
        ("decode", {}),
        ("inception_crop", {"min_area": config.crop_min_area}),
        ("resize", {"size": config.image_size}),
        ("flip_lr", {}) if config.random_flip else None,
        augreg.randaug_op(config),
        ("value_range", {"low": UNIT_RANGE[0], "high": UNIT_RANGE[1]}),
    ]
    return [op for op in ops if op is not None]


def eval_ops(image_size):
    """The evaluation ops: the paper's, resize only."""
    return [
        ("decode", {}),
        ("resize", {"size": image_size}),
        ("value_range", {"low": UNIT_RANGE[0], "high": UNIT_RANGE[1]}),
    ]


# ------------------------------------------------------------------------------------------------- ops


def decode_image(encoded):
    """Encoded JPEG/PNG/GIF/BMP bytes -> uint8 (h, w, 3); grayscale and RGBA become RGB.

    JPEG with the accurate integer IDCT, the pixels Pillow gives (keras_vit.predict, the
    exported SavedModel): TensorFlow's default fast IDCT is off by up to a few levels per pixel.
    """
    image = tf.cond(
        tf.io.is_jpeg(encoded),
        lambda: tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE"),
        lambda: tf.io.decode_image(encoded, channels=3, expand_animations=False),
    )
    image.set_shape([None, None, 3])
    return image


@register("decode")
def decode():
    return decode_image


@register("inception_crop", random=True)
def inception_crop(min_area=CROP_MIN_AREA):
    """A random crop covering min_area-100% of the image, aspect ratio 3/4-4/3 (the whole image when
    no such box is found in 10 attempts)."""
    if not 0.0 < min_area <= 1.0:
        raise ValueError(f"min_area must be in (0, 1], got {min_area!r}")

    def crop(image, seed):
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image),
            bounding_boxes=tf.zeros([0, 0, 4], tf.float32),
            seed=seed,
            min_object_covered=0.0,
            area_range=(min_area, 1.0),
            aspect_ratio_range=CROP_ASPECT_RATIO_RANGE,
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        return tf.slice(image, begin, size)

    return crop


@register("resize")
def resize(size, method="bilinear"):
    """(h, w, 3) -> float32 (size, size, 3), pixel values kept (0-255)."""
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise ValueError(f"size must be an integer >= 1, got {size!r}")

    def resized(image):
        return tf.image.resize(tf.cast(image, tf.float32), [int(size), int(size)], method=method)

    return resized


@register("flip_lr", random=True)
def flip_lr():
    """A left-right mirror with probability 1/2."""
    return tf.image.stateless_random_flip_left_right


@register("randaug", random=True)
def randaug(num_ops, magnitude):
    """RandAugment: `num_ops` ops of `magnitude` on float pixels in [0, 255] (data/randaugment.py)."""
    for name, value, high in (("num_ops", num_ops, None), ("magnitude", magnitude, 30)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if high is not None and value > high:
            raise ValueError(f"{name} must be at most {high}, got {value!r}")

    def augmented(image, seed):
        return randaugment(image, seed, int(num_ops), int(magnitude))

    return augmented


@register("value_range")
def value_range(low=UNIT_RANGE[0], high=UNIT_RANGE[1]):
    """float pixels in [0, 255] -> [low, high], clipped."""
    if not low < high:
        raise ValueError(f"low must be below high, got {low!r} and {high!r}")
    # For (-1, 1) this is x / 127.5 - 1, exactly: 255 / 2 and adding -1 are exact in floating point.
    scale = 255.0 / (high - low)

    def scaled(image):
        return tf.clip_by_value(image / scale + low, low, high)

    return scaled


@register("mixup", batch=True)
def mixup(p):
    """Mixup with Beta(p, p) weights (trainers/data/augreg.py): pairs (2i, 2i + 1) of the batch mixed
    with one weight per step; the labels become float32 soft targets (b, num_classes)."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 < p < math.inf:
        raise ValueError(f"p must be a number > 0 (leave mixup out to turn it off), got {p!r}")

    def mixed(images, labels, context):
        targets = (
            labels if labels.shape.rank == 2 else tf.one_hot(labels, context.num_classes, dtype=tf.float32)
        )
        return augreg.mix_pairs(images, targets, augreg.mixup_weight(context.seed, context.step, p))

    return mixed
