"""AugReg levels (`--augreg`): RandAugment and Mixup as in "How to train your ViT?" (Steiner et al., 2021).

The levels are the official ones, RANDAUG_DEF and MIXUP_DEF of big_vision/configs/vit_i1k.py and
vit_i21k.py (the same in both), the configs of the paper's runs; the checkpoints that
google-research/vision_transformer's README recommends name theirs (aug_...) in the file name:

    level     RandAugment (N, M)   Mixup p
    none      -                    0
    light1    2, 0                 0
    light2    2, 10                0.2
    medium1   2, 15                0.2
    medium2   2, 15                0.5
    strong1   2, 20                0.5
    strong2   2, 20                0.8

A level sets --randaug and --mixup; either flag given explicitly (anything but "level") replaces
the level's value for that one knob, the other still comes from the level. Dropout and stochastic
depth are not part of a level: the official configs keep them apart (the paper's "regularisation"
axis, 0.0 or 0.1 for both, the do_... and sd_... of the checkpoint names), so they are set with
--dropout_rate and --stochastic_depth.

Mixup follows big_vision's utils.mixup with fold_in=None: one mixing weight per step, drawn from
Beta(p, p) and taken as the larger of (w, 1 - w) so that each image stays the dominant one. It is
drawn statelessly from (run seed, step), so every replica and host uses the same weight and a
resumed run the same as the original. Where big_vision rolls each device's batch by one, examples
here are mixed in fixed pairs (2i, 2i + 1) of the global batch: the pairs do not depend on how
the batch is split over replicas and hosts (the per-replica batch only has to be even).
keras.layers.MixUp is not used: it draws a weight per example and a random permutation from a
stateful keras.random.SeedGenerator, which cannot be made a function of (seed, step).
"""

import dataclasses

import tensorflow as tf

from trainers.errors import UsageError

SEED_ALG = "philox"
# Mixes the stream the mixing weights are drawn from apart from the run's other seeds.
_MIXUP_STREAM = 0x313C

# big_vision/configs/vit_i1k.py RANDAUG_DEF and MIXUP_DEF (vit_i21k.py defines the same values).
LEVELS = {
    "none": (None, 0.0),
    "light1": ((2, 0), 0.0),
    "light2": ((2, 10), 0.2),
    "medium1": ((2, 15), 0.2),
    "medium2": ((2, 15), 0.5),
    "strong1": ((2, 20), 0.5),
    "strong2": ((2, 20), 0.8),
}
# --augreg's values (trainers/fields.py offers these as the flag's values).
AUGREG_LEVELS = tuple(LEVELS)
FROM_LEVEL = "level"


@dataclasses.dataclass(frozen=True)
class AugReg:
    """The resolved knobs: randaug = (num_ops, magnitude) or None; mixup = Beta concentration p (0: off)."""

    randaug: tuple | None
    mixup: float


def resolve(config):
    """The AugReg of a config: its --augreg level, then --randaug / --mixup where not "level"."""
    level = config.augreg
    if level not in LEVELS:
        raise UsageError(f"--augreg must be one of {', '.join(LEVELS)}, got {level!r}.")
    randaug, mixup = LEVELS[level]
    randaug_flag = str(config.randaug).strip().lower()
    if randaug_flag != FROM_LEVEL:
        randaug = parse_randaug(randaug_flag)
    mixup_flag = config.mixup
    if str(mixup_flag).strip().lower() != FROM_LEVEL:
        mixup = parse_mixup(mixup_flag)
    return AugReg(randaug, mixup)


def parse_randaug(text):
    """'N,M' -> (N, M); 'none' (or '0,M') -> None."""
    if text in ("none", ""):
        return None
    parts = text.split(",")
    try:
        num_ops, magnitude = (int(p) for p in parts)
    except ValueError:
        num_ops = magnitude = -1
    if len(parts) != 2 or num_ops < 0 or not 0 <= magnitude <= 30:
        raise UsageError(
            f"--randaug={text}: give N,M (N ops per image, magnitude M in 0..30, e.g. 2,15), none or level."
        )
    return (num_ops, magnitude) if num_ops else None


def parse_mixup(value):
    """A Mixup concentration p >= 0 (0 turns Mixup off)."""
    try:
        p = float(value)
    except (TypeError, ValueError):
        p = -1.0
    if not p >= 0 or p == float("inf"):
        raise UsageError(f"--mixup={value}: give the Beta concentration p >= 0 (e.g. 0.5; 0 = off) or level.")
    return p


def randaug_op(config):
    """The ("randaug", kwargs) image op of a config, or None."""
    randaug = resolve(config).randaug
    return ("randaug", {"num_ops": randaug[0], "magnitude": randaug[1]}) if randaug else None


def mixup_weight(seed, step, concentration):
    """float32 scalar in [0.5, 1]: the weight of each image's own content at `step` (Beta(p, p))."""
    base = tf.stack([tf.cast(seed, tf.int64), tf.constant(_MIXUP_STREAM, tf.int64)])
    step_seed = tf.random.experimental.stateless_fold_in(base, tf.cast(step, tf.int64), alg=SEED_ALG)
    gammas = tf.random.stateless_gamma([2], step_seed, alpha=float(concentration), dtype=tf.float32)
    total = gammas[0] + gammas[1]
    # Both draws can underflow to 0 for a tiny p: then the images stay unmixed.
    weight = tf.where(total > 0, gammas[0] / tf.maximum(total, 1e-30), 1.0)
    return tf.maximum(weight, 1.0 - weight)


def mix_pairs(images, targets, weight):
    """Mixes examples 2i and 2i + 1 of the batch with each other: w * own + (1 - w) * partner.

    images (b, ...) and float targets (b, classes); b must be even.
    """

    def partner(x):
        pairs = tf.reshape(x, tf.concat([[-1, 2], tf.shape(x)[1:]], 0))
        return tf.reshape(tf.reverse(pairs, axis=[1]), tf.shape(x))

    weight = tf.cast(weight, tf.float32)
    mixed_images = weight * images + (1.0 - weight) * partner(images)
    mixed_targets = weight * targets + (1.0 - weight) * partner(targets)
    return mixed_images, mixed_targets
