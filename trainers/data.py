"""Input pipelines for the trainers: per-replica batches for `strategy.distribute_datasets_from_function`.

Everything an example goes through is a function of (seed, epoch, example index): each epoch is a
seeded permutation of the split, and the augmentation of an example is seeded from the same three
numbers with stateless ops. Two consequences the trainers rely on:

- exact resume: the pipeline built with `start_step=s` yields what a fresh one yields after s global
  batches; the skip happens on indices or encoded records, before any image is decoded;
- replica and host invariance: every input pipeline walks the same global stream and keeps, of each
  global batch, its own contiguous slice [i * b_host, (i + 1) * b_host) (element-level sharding before
  decoding), so the global batch at step t holds the same images in the same order whether it is fed
  by one pipeline to 1 or 2 replicas, or by 2 worker processes.

Labels are int32 class indices (b,), or, for a multi-label dataset (`spec.multi_label`), float32 multi-hot
vectors (b, num_classes); the records carry class-index rows until then, which are far smaller.
"""
import math

import numpy as np
import tensorflow as tf

from trainers import augment
from trainers.datasets import (  # noqa: F401
    NO_LABEL,
    DatasetError,
    DatasetSpec,
    Records,
    examples_per_class_subset,
    get_spec,
)

# Records per shuffle window of a streamed TFDS split (encoded, ~110 kB each for ImageNet). Splits up
# to this size are shuffled uniformly; in-memory splits always are.
SHUFFLE_BUFFER = 50_000
_FOREVER = 2 ** 62


class InputFn:
    """Callable `(input_context | None) -> tf.data.Dataset` of per-replica batches (see make_input_fn)."""

    def __init__(self, spec, split, records, image_size, global_batch_size, training, seed, start_step,
                 crop_min_area=augment.CROP_AREA_RANGE[0], random_flip=True):
        self.spec = spec
        self.split = split
        self.records = records
        self.image_size = image_size
        self.global_batch_size = global_batch_size
        self.training = training
        self.seed = seed
        self.start_step = start_step
        self.crop_min_area = crop_min_area
        self.random_flip = random_flip
        self.num_examples = records.count
        # Evaluation: global batches in one pass (the last one padded).
        self.num_batches = None if training else math.ceil(records.count / global_batch_size)

    def __call__(self, input_context=None):
        pipelines = input_context.num_input_pipelines if input_context else 1
        pipeline_id = input_context.input_pipeline_id if input_context else 0
        replicas = input_context.num_replicas_in_sync if input_context else 1
        batch = self.global_batch_size
        if batch % replicas or replicas % pipelines:
            raise DatasetError(f"batch size {batch} does not split evenly over {replicas} replicas "
                               f"({pipelines} input pipelines): use a multiple of {replicas}")
        shard = _HostShard(batch, batch // pipelines, pipeline_id)
        if self.training:
            ds = self._train(shard, batch // replicas)
        else:
            ds = self._eval(shard, batch // replicas)
        options = tf.data.Options()
        options.deterministic = True
        # The sharding is done above, per element; tf.data must not shard again.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return ds.with_options(options)

    def _load(self, payload):
        return augment.decode(tf.io.read_file(payload) if self.records.payload_is_path else payload)

    def _target(self, label):
        return multi_hot(label, self.spec.num_classes) if self.spec.multi_label else label

    def _ordered_stream(self):
        """The global training stream of (epoch, index, payload, label) from the resume position on."""
        records, seed, count = self.records, self.seed, self.records.count
        first_epoch, offset = divmod(self.start_step * self.global_batch_size, count)
        epochs = tf.data.Dataset.range(first_epoch, _FOREVER)
        if records.payloads is not None:
            payloads = tf.constant(list(records.payloads), tf.string)
            labels = tf.constant(records.labels, tf.int32)

            def epoch(e):
                order = tf.random.experimental.stateless_shuffle(
                    tf.range(count, dtype=tf.int64), seed=_epoch_seed(seed, e), alg="philox")
                return tf.data.Dataset.from_tensor_slices(order).map(lambda i: (e, i))

            stream = epochs.flat_map(epoch).skip(offset)
            return stream, lambda e, i: (e, i, tf.gather(payloads, i), tf.gather(labels, i))
        # A streamed split is permuted window by window: each window of SHUFFLE_BUFFER consecutive records
        # (all of them when the split is smaller) is put in a stateless random order seeded by
        # (seed, epoch, window). Unlike Dataset.shuffle, that does not depend on TensorFlow's global seed.
        window = min(count, SHUFFLE_BUFFER)
        base = records.stream().enumerate()
        if self.spec.multi_label:  # class-index vectors of different lengths: padded to the window's longest
            base = base.padded_batch(window, padding_values=(tf.constant(0, tf.int64), (
                tf.constant(b""), tf.constant(NO_LABEL, tf.int32))))
        else:
            base = base.batch(window)

        def epoch(e):
            def permute(w, block):
                index, (payload, label) = block
                order = tf.random.experimental.stateless_shuffle(
                    tf.range(tf.shape(index)[0]), seed=_window_seed(seed, e, w), alg="philox")
                return tf.fill(tf.shape(index), e), tf.gather(index, order), tf.gather(payload, order), \
                    tf.gather(label, order)
            # prefetch: the next window is read while this one is consumed, so training does not stall.
            windows = base.enumerate().map(permute).prefetch(1)
            return windows.flat_map(lambda *block: tf.data.Dataset.from_tensor_slices(block))

        return epochs.flat_map(epoch).skip(offset), None

    def _train(self, shard, per_replica):
        stream, fetch = self._ordered_stream()
        stream = shard.keep(stream)
        if fetch is not None:
            stream = stream.map(fetch)
        image_size, seed = self.image_size, self.seed

        def prepare(epoch, index, payload, label):
            image_seed = augment.example_seed(seed, epoch, index)
            image = augment.train_image(self._load(payload), image_seed, image_size, self.crop_min_area,
                                        self.random_flip)
            return image, self._target(label)

        stream = stream.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return stream.batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def _eval(self, shard, per_replica):
        records, image_size = self.records, self.image_size
        if records.payloads is not None:
            stream = tf.data.Dataset.from_tensor_slices((list(records.payloads), records.labels))
        else:
            stream = records.stream()
        real = shard.keep(stream.enumerate()).map(
            lambda i, example: (augment.eval_image(self._load(example[0]), image_size),
                                self._target(example[1]), tf.constant(1.0, tf.float32)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        # Pad the pass to whole global batches: every replica then runs the same number of steps with the
        # same static shape (TPU), and weight 0 keeps the padding out of the metrics.
        total = self.num_batches * self.global_batch_size
        pad = shard.count_in(records.count, total)
        no_label = tf.zeros([self.spec.num_classes], tf.float32) if self.spec.multi_label else \
            tf.constant(0, tf.int32)
        padding = tf.data.Dataset.from_tensors(
            (tf.zeros([image_size, image_size, 3], tf.float32), no_label, tf.constant(0.0, tf.float32))
        ).repeat(pad)
        return real.concatenate(padding).batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


class _HostShard:
    """Which positions of the global stream an input pipeline keeps: its slice of every global batch."""

    def __init__(self, global_batch, host_batch, pipeline_id):
        self.global_batch, self.host_batch, self.pipeline_id = global_batch, host_batch, pipeline_id

    def mine(self, position):
        return (position % self.global_batch) // self.host_batch == self.pipeline_id

    def keep(self, ds):
        if self.host_batch == self.global_batch:
            return ds
        return ds.enumerate().filter(lambda p, element: self.mine(p)).map(lambda p, element: element)

    def count_in(self, start, stop):
        return int(sum(1 for p in range(start, stop) if self.mine(p)))


def multi_hot(class_indices, num_classes):
    """int class indices (NO_LABEL pads) -> float32 (num_classes,) with 1 at every listed class."""
    return tf.minimum(tf.reduce_sum(tf.one_hot(class_indices, num_classes, dtype=tf.float32), axis=0), 1.0)


def _epoch_seed(seed, epoch):
    return tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])


def _window_seed(seed, epoch, window):
    return tf.random.experimental.stateless_fold_in(_epoch_seed(seed, epoch), window, alg="philox")


def make_input_fn(spec: DatasetSpec, split: str, *, image_size: int, global_batch_size: int, training: bool,
                  seed: int = 0, start_step: int = 0, examples_per_class: int | None = None,
                  crop_min_area: float = augment.CROP_AREA_RANGE[0], random_flip: bool = True) -> InputFn:
    """An input function for `distribute(strategy, input_fn)` or direct use (`input_fn(None)`).

    training=True: an endless stream of (images float32 (b, S, S, 3) in [-1, 1], labels int32 (b,)) with
    inception crop + flip, starting `start_step` global batches in. training=False: one pass in natural
    order, resize only, as (images, labels, weights), padded to whole global batches with weight 0.
    b is the per-replica batch. Labels of a multi-label dataset are float32 multi-hot (b, num_classes).
    examples_per_class=k: a fixed subset (seeded by `seed`) of exactly k examples of every class
    (single-label datasets only). crop_min_area (default 0.05, the paper's) and random_flip shape the
    training augmentation.
    """
    for name, value, low in (("image_size", image_size, 1), ("global_batch_size", global_batch_size, 1),
                             ("start_step", start_step, 0)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
            raise DatasetError(f"{name} must be an integer >= {low}, got {value!r}")
    records = spec.records(split)
    if examples_per_class is not None:
        if not isinstance(examples_per_class, (int, np.integer)) or examples_per_class < 1:
            raise DatasetError(f"examples_per_class must be a positive integer, got {examples_per_class!r}")
        if spec.multi_label:
            raise DatasetError(multi_label_refusal(spec, "--examples_per_class",
                                                   "leave it at 0 (train on every example)"))
        records = examples_per_class_subset(records, int(examples_per_class), seed, spec.num_classes,
                                            spec.name, split)
    if not 0.0 < crop_min_area <= 1.0:
        raise DatasetError(f"crop_min_area must be in (0, 1], got {crop_min_area!r}")
    if records.count == 0:
        raise DatasetError(f"split {split!r} of {spec.name} has no examples: choose a non-empty split")
    return InputFn(spec, split, records, int(image_size), int(global_batch_size), bool(training), int(seed),
                   int(start_step), float(crop_min_area), bool(random_flip))


def multi_label_refusal(spec, what, fix):
    """The one-line error for something that needs exactly one label per image."""
    return f"{what} needs one label per image, but {spec.name} has images with several labels: {fix}"


def distribute(strategy, input_fn):
    """Per-replica batches on every replica; each host builds its own pipeline (input_pipeline_id)."""
    return strategy.distribute_datasets_from_function(input_fn)
