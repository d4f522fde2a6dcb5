"""Input pipelines for the trainers: per-replica batches for `strategy.distribute_datasets_from_function`.

Everything an example goes through is a function of (seed, epoch, example index): each epoch is a
seeded permutation of the split, and the image ops of an example are seeded from the same three
numbers with stateless ops. Two consequences the trainers rely on:

- exact resume: the pipeline built with `start_step=s` yields what a fresh one yields after s global
  batches; the skip happens on indices or encoded records, before any image is decoded;
- replica and host invariance: every input pipeline walks the same global stream and keeps, of each
  global batch, its own contiguous slice [i * b_host, (i + 1) * b_host) (element-level sharding before
  decoding), so the global batch at step t holds the same images in the same order whether it is fed
  by one pipeline to 1 or 2 replicas, or by 2 worker processes.

Labels are int32 class indices (b,), or, for a multi-label dataset (`spec.multi_label`), float32 multi-hot
vectors (b, num_classes); the records carry class-index rows until then, which are far smaller. Batch
ops (`batch_ops`) then work on whole per-replica batches, knowing the global step and the replica of
each: with Mixup (`mixup=p > 0`, the batch op mixup(p), training only) the training labels are float32
soft targets (b, num_classes), pairs of examples of each batch mixed with a weight drawn from (seed,
step) (trainers/data/augreg.py); with mask_patches(patch_size) (trainers/data/mask_patches.py, in
training and evaluation) the labels' place holds masked patch prediction's random draw.
"""

import math

import numpy as np
import tensorflow as tf

from configs.fields import TRAINING, fields
from trainers.data.ops import SEED_ALG, BatchChain, BatchContext, Chain, eval_ops, train_ops
from trainers.data.spec import NO_LABEL, DatasetSpec, multi_label_refusal
from trainers.data.subsets import examples_per_class_subset
from trainers.errors import DatasetError
from trainers.graph_functions import as_written

# Records per shuffle window of a streamed TFDS split (encoded, ~110 kB each for ImageNet). Splits up
# to this size are shuffled uniformly; in-memory splits always are.
SHUFFLE_BUFFER = 50_000
# Batches made ahead of the step. A fixed number, not tf.data.AUTOTUNE: while a long step runs
# (an accumulated batch on a CPU takes minutes), autotuning keeps filling the buffer, up to half
# the machine's RAM, which then no longer holds the step. trainers/memory.py counts these.
PREFETCH_BATCHES = 1
_FOREVER = 2**62


class InputFn:
    """Callable `(input_context | None) -> tf.data.Dataset` of per-replica batches (see make_input_fn).

    `ops`: the image ops as [(op name, kwargs)] (see trainers.data.ops), or a Chain of them; they must
    not be random when training=False. `batch_ops`: the batch ops, likewise (a BatchChain).
    """

    def __init__(
        self,
        spec,
        split,
        records,
        *,
        ops,
        global_batch_size,
        training,
        seed=0,
        start_step=0,
        batch_ops=(),
        micro_batches=1,
    ):
        self.spec = spec
        self.split = split
        self.records = records
        self.image_ops = ops if isinstance(ops, Chain) else Chain(ops)
        self.global_batch_size = global_batch_size
        self.training = training
        self.seed = seed
        self.start_step = start_step
        # Evaluation keeps the images and hard labels as they are (Mixup is training's alone); only
        # ops registered for evaluation too (masked patch prediction's draw) go over its batches.
        chain = batch_ops if isinstance(batch_ops, BatchChain) else BatchChain(batch_ops)
        self.batch_ops = chain if training else chain.for_evaluation()
        # The micro-batches each replica splits a training batch into (the batch ops' context).
        self.micro_batches = int(micro_batches) if training else 1
        self.num_examples = records.count
        # Evaluation: global batches in one pass (the last one padded).
        self.num_batches = None if training else math.ceil(records.count / global_batch_size)
        if not training and self.image_ops.random_ops:
            raise DatasetError(
                f"evaluation sees every image once as it is, but its ops include random "
                f"{', '.join(self.image_ops.random_ops)}: keep random ops to training"
            )

    def __call__(self, input_context=None):
        pipelines = input_context.num_input_pipelines if input_context else 1
        pipeline_id = input_context.input_pipeline_id if input_context else 0
        replicas = input_context.num_replicas_in_sync if input_context else 1
        batch = self.global_batch_size
        if batch % replicas or replicas % pipelines:
            raise DatasetError(
                f"batch size {batch} does not split evenly over {replicas} replicas "
                f"({pipelines} input pipelines): use a multiple of {replicas}"
            )
        if "mixup" in self.batch_ops.names and (batch // replicas) % 2:
            raise DatasetError(
                f"Mixup mixes pairs of examples, but the per-replica batch ({batch} / {replicas} replicas) "
                f"is odd: use a batch size that is a multiple of {2 * replicas}"
            )
        if (batch // replicas) % self.micro_batches:
            raise DatasetError(
                f"the per-replica batch ({batch} / {replicas} replicas) does not split into "
                f"{self.micro_batches} micro-batches: use a batch size that is a multiple of "
                f"{replicas * self.micro_batches}"
            )
        shard = _HostShard(batch, batch // pipelines, pipeline_id)
        feeds = _Feeds(pipeline_id, replicas // pipelines)
        if self.training:
            ds = self._train(shard, batch // replicas, feeds)
        else:
            ds = self._eval(shard, batch // replicas, feeds)
        options = tf.data.Options()
        options.deterministic = True
        # The sharding is done above, per element; tf.data must not shard again.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        # No prefetch buffers beyond PREFETCH_BATCHES: tf.data would otherwise add its own.
        options.experimental_optimization.inject_prefetch = False
        return ds.with_options(options)

    def _encoded(self, payload):
        return tf.io.read_file(payload) if self.records.payload_is_path else payload

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

            @as_written
            def epoch(e):
                order = tf.random.experimental.stateless_shuffle(
                    tf.range(count, dtype=tf.int64), seed=_epoch_seed(seed, e), alg=SEED_ALG
                )
                return tf.data.Dataset.from_tensor_slices(order).map(lambda i: (e, i))

            stream = epochs.flat_map(epoch).skip(offset)
            return stream, lambda e, i: (e, i, tf.gather(payloads, i), tf.gather(labels, i))
        # A streamed split is permuted window by window: each window of SHUFFLE_BUFFER consecutive records
        # (all of them when the split is smaller) is put in a stateless random order seeded by
        # (seed, epoch, window). Unlike Dataset.shuffle, that does not depend on TensorFlow's global seed.
        window = min(count, SHUFFLE_BUFFER)
        base = records.stream().enumerate()
        if self.spec.multi_label:  # class-index vectors of different lengths: padded to the window's longest
            base = base.padded_batch(
                window,
                padding_values=(
                    tf.constant(0, tf.int64),
                    (tf.constant(b""), tf.constant(NO_LABEL, tf.int32)),
                ),
            )
        else:
            base = base.batch(window)

        @as_written
        def epoch(e):
            def permute(w, block):
                index, (payload, label) = block
                order = tf.random.experimental.stateless_shuffle(
                    tf.range(tf.shape(index)[0]), seed=_window_seed(seed, e, w), alg=SEED_ALG
                )
                return (
                    tf.fill(tf.shape(index), e),
                    tf.gather(index, order),
                    tf.gather(payload, order),
                    tf.gather(label, order),
                )

            # prefetch: the next window is read while this one is consumed, so training does not stall.
            windows = base.enumerate().map(permute).prefetch(1)
            return windows.flat_map(lambda *block: tf.data.Dataset.from_tensor_slices(block))

        return epochs.flat_map(epoch).skip(offset), None

    def _train(self, shard, per_replica, feeds):
        stream, fetch = self._ordered_stream()
        stream = shard.keep(stream)
        if fetch is not None:
            stream = stream.map(as_written(fetch))
        seed = self.seed

        @as_written
        def prepare(epoch, index, payload, label):
            image = self.image_ops(self._encoded(payload), example_seed(seed, epoch, index))
            return image, self._target(label)

        stream = stream.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        batches = stream.batch(per_replica, drop_remainder=True)
        if self.batch_ops:
            batches = batches.enumerate().map(self._batch_step(feeds))
        return batches.prefetch(PREFETCH_BATCHES)

    def _batch_step(self, feeds):
        """The batch ops on the k-th per-replica batch of this pipeline: (k, (images, labels[, weights]))
        -> the batch with its images and labels through the ops; weights are evaluation's, kept."""
        chain, seed, start_step, training = self.batch_ops, self.seed, self.start_step, self.training
        num_classes, micro_batches = self.spec.num_classes, self.micro_batches

        # Not converted by AutoGraph (trainers/graph_functions.py): an op's ValueError (a batch it
        # cannot work on) then also reaches the user as its own one line.
        @as_written
        def apply(k, batch):
            images, labels, *weights = batch
            context = BatchContext(
                seed,
                start_step + feeds.step(k),
                num_classes,
                replica=feeds.replica(k),
                micro_batches=micro_batches,
                training=training,
            )
            return (*chain(images, labels, context), *weights)

        return apply

    def _eval(self, shard, per_replica, feeds):
        records = self.records
        if records.payloads is not None:
            stream = tf.data.Dataset.from_tensor_slices((list(records.payloads), records.labels))
        else:
            stream = records.stream()

        @as_written
        def prepare(index, example):
            payload, label = example
            return self.image_ops(self._encoded(payload)), self._target(label), tf.constant(1.0, tf.float32)

        real = shard.keep(stream.enumerate()).map(
            prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        image = real.element_spec[0]
        if not image.shape.is_fully_defined():
            raise DatasetError(
                f"evaluation images must all have one size, but the ops give {image.shape}: "
                f"end them with a resize"
            )
        # Pad the pass to whole global batches: every replica then runs the same number of steps with the
        # same static shape (TPU), and weight 0 keeps the padding out of the metrics.
        total = self.num_batches * self.global_batch_size
        pad = shard.count_in(records.count, total)
        no_label = (
            tf.zeros([self.spec.num_classes], tf.float32)
            if self.spec.multi_label
            else tf.constant(0, tf.int32)
        )
        padding = tf.data.Dataset.from_tensors(
            (tf.zeros(image.shape, image.dtype), no_label, tf.constant(0.0, tf.float32))
        ).repeat(pad)
        batches = real.concatenate(padding).batch(per_replica, drop_remainder=True)
        if self.batch_ops:
            batches = batches.enumerate().map(self._batch_step(feeds))
        return batches.prefetch(PREFETCH_BATCHES)


class _Feeds:
    """Which replica, and which step, the k-th per-replica batch of an input pipeline feeds: the
    strategy hands a pipeline's batches to its replicas in turn (MirroredStrategy's
    multi-device iterator; the jax engine's feed does the same), pipeline i feeding the replicas
    i * replicas_per_pipeline onwards."""

    def __init__(self, pipeline_id, replicas_per_pipeline):
        self.first, self.count = pipeline_id * replicas_per_pipeline, replicas_per_pipeline

    def step(self, k):
        return k // self.count

    def replica(self, k):
        return self.first + k % self.count


class _HostShard:
    """Which positions of the global stream an input pipeline keeps: its slice of every global batch."""

    def __init__(self, global_batch, host_batch, pipeline_id):
        self.global_batch, self.host_batch, self.pipeline_id = global_batch, host_batch, pipeline_id

    def mine(self, position):
        return (position % self.global_batch) // self.host_batch == self.pipeline_id

    def keep(self, ds):
        if self.host_batch == self.global_batch:
            return ds

        @as_written
        def is_mine(position, element):
            return self.mine(position)

        @as_written
        def drop_position(position, element):
            return element

        return ds.enumerate().filter(is_mine).map(drop_position)

    def count_in(self, start, stop):
        return int(sum(1 for p in range(start, stop) if self.mine(p)))


def multi_hot(class_indices, num_classes):
    """int class indices (NO_LABEL pads) -> float32 (num_classes,) with 1 at every listed class."""
    return tf.minimum(tf.reduce_sum(tf.one_hot(class_indices, num_classes, dtype=tf.float32), axis=0), 1.0)


def example_seed(seed, epoch, index):
    """A stateless seed (shape [2], int64) that depends only on the run seed, the epoch and the index."""
    base = tf.stack([tf.cast(seed, tf.int64), tf.constant(0x5EED, tf.int64)])
    per_epoch = tf.random.experimental.stateless_fold_in(base, tf.cast(epoch, tf.int64), alg=SEED_ALG)
    return tf.random.experimental.stateless_fold_in(per_epoch, tf.cast(index, tf.int64), alg=SEED_ALG)


def _epoch_seed(seed, epoch):
    return tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])


def _window_seed(seed, epoch, window):
    return tf.random.experimental.stateless_fold_in(_epoch_seed(seed, epoch), window, alg=SEED_ALG)


def check_split(spec, split):
    """DatasetError unless `split` names examples of the dataset: an unknown split, a bad slice,
    or one with no examples (train[:0])."""
    if spec.num_examples[split] == 0:
        raise empty_split_error(spec, split)


def empty_split_error(spec, split):
    return DatasetError(f"split {split!r} of {spec.name} has no examples: choose a non-empty split")


def make_input_fn(
    spec: DatasetSpec,
    split: str,
    *,
    global_batch_size: int,
    training: bool,
    image_size: int | None = None,
    seed: int = 0,
    start_step: int = 0,
    examples_per_class: int | None = None,
    ops: list | None = None,
    crop_min_area: float | None = None,
    random_flip: bool | None = None,
    mixup: float = 0.0,
    batch_ops: list | None = None,
    micro_batches: int = 1,
) -> InputFn:
    """An input function for `distribute(strategy, input_fn)` or direct use (`input_fn(None)`).

    training=True: an endless stream of (images float32 (b, S, S, 3) in [-1, 1], labels int32 (b,)),
    starting `start_step` global batches in. training=False: one pass in natural order, as (images,
    labels, weights), padded to whole global batches with weight 0. b is the per-replica batch.
    Labels of a multi-label dataset are float32 multi-hot (b, num_classes).
    mixup=p > 0 (training): Mixup with Beta(p, p) weights, labels float32 soft targets (b, num_classes);
    the same as batch_ops=[("mixup", {"p": p})].
    batch_ops: the batch ops, [(op name, kwargs)] (trainers.data.ops), after the image ops; evaluation
    applies those registered for it (masked patch prediction's draw), training all of them.
    micro_batches: the micro-batches a replica splits its training batch into (gradient
    accumulation); batch ops that draw per micro-batch read it.
    examples_per_class=k: a fixed subset (seeded by `seed`) of exactly k examples of every class
    (single-label datasets only).
    ops: the image ops, [(op name, kwargs)] (trainers.data.ops). By default `eval_ops(image_size)`, or
    in training `train_ops` of a config with image_size, crop_min_area and random_flip (None: their
    declared defaults, 0.05 and True; the config's other fields too).
    """
    counts = [
        ("global_batch_size", global_batch_size, 1),
        ("start_step", start_step, 0),
        ("micro_batches", micro_batches, 1),
    ]
    if ops is None:  # only the default ops resize to image_size
        counts.insert(0, ("image_size", image_size, 1))
    for name, value, low in counts:
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
            raise DatasetError(f"{name} must be an integer >= {low}, got {value!r}")
    if ops is not None and (crop_min_area is not None or random_flip is not None):
        raise TypeError(
            "crop_min_area and random_flip shape the default training ops: with ops=, set them in the ops"
        )
    if ops is None:
        ops = (
            _default_train_ops(int(image_size), crop_min_area, random_flip)
            if training
            else eval_ops(int(image_size))
        )
    if mixup and batch_ops is not None:
        raise TypeError("mixup= is the batch op mixup(p): with batch_ops=, put it in the batch ops")
    if mixup:
        batch_ops = [("mixup", {"p": float(mixup)})]
    image_ops = Chain(ops)  # a bad op list fails here, before any record is read
    batch_chain = BatchChain(batch_ops or ())
    records = spec.records(split)
    if examples_per_class is not None:
        if not isinstance(examples_per_class, (int, np.integer)) or examples_per_class < 1:
            raise DatasetError(f"examples_per_class must be a positive integer, got {examples_per_class!r}")
        if spec.multi_label:
            raise DatasetError(
                multi_label_refusal(spec, "--examples_per_class", "leave it at 0 (train on every example)")
            )
        records = examples_per_class_subset(
            records, int(examples_per_class), seed, spec.num_classes, spec.name, split
        )
    if records.count == 0:
        raise empty_split_error(spec, split)
    return InputFn(
        spec,
        split,
        records,
        ops=image_ops,
        global_batch_size=int(global_batch_size),
        training=bool(training),
        seed=int(seed),
        start_step=int(start_step),
        batch_ops=batch_chain,
        micro_batches=int(micro_batches),
    )


def _default_train_ops(image_size, crop_min_area, random_flip):
    # Every training field at its declared default, so that train_ops may read any of them.
    config = fields(TRAINING)
    config.image_size = image_size
    if crop_min_area is not None:
        config.crop_min_area = float(crop_min_area)
    if random_flip is not None:
        config.random_flip = bool(random_flip)
    return train_ops(config)


def distribute(strategy, input_fn):
    """Per-replica batches on every replica; each host builds its own pipeline (input_pipeline_id)."""
    return strategy.distribute_datasets_from_function(input_fn)
