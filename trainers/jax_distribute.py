"""The JAX engine's distribution: one data-parallel mesh over every device of every process.

`JaxStrategy` stands where a tf.distribute strategy stands for the tf engine, with the part of
that interface the shared run uses: `num_replicas_in_sync`, `scope()`,
`distribute_datasets_from_function(input_fn)`, `extended.worker_devices`, and what the banner,
the chief test and preemption ask (`describe`, `is_chief`, `process_count`, `any_process`).

The batch is split over the mesh's one axis; the state is replicated on every device. Inside the
jit-compiled step XLA then sums the gradients over the devices (and hosts) itself, before the
step clips them, as the tf engine's explicit all-reduce does.

The feed keeps tf.data: each process builds its own pipeline (input_pipeline_id = the process),
whose elements are per-replica batches as under tf.distribute; the process hands its local
devices one element each, in order, as MirroredStrategy does, so both engines see the same
examples on the same replica. Several hosts join through `jax.distributed`, with the cluster
read from TF_CONFIG (the tf engine's multi_worker flag and variable), or found by JAX itself on
TPU pods and SLURM.

With several processes every step, evaluation and `any_process` is a collective, so every
process must make the same calls: the evaluation splits are padded to whole global batches by
trainers/data/pipeline.py, so each process's pipeline yields the same number of elements; the
state is replicated, so each process reads (checkpoints, exports) its own local copy and never
needs a global array on the host (`fetch` gathers one where it must). The chief (process 0) writes
the workdir; the others save into a temporary folder they delete (trainers/run_checkpoints.py).
"""

import collections
import contextlib
import os
import sys

import jax
import numpy as np
import tensorflow as tf
from jax._src import distributed as jax_distributed_state
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from keras_vit import startup
from trainers import join_deadline, preemption, rendezvous
from trainers.distribute import (
    ANOTHER_CLUSTER,
    STRATEGIES,
    TF_CONFIG_EXAMPLE,
    Processes,
    host_of,
    meet_at_process_0,
    read_tf_config,
)
from trainers.errors import StrategyError

BATCH_AXIS = "batch"
# Batches placed on the devices ahead of the step: the host prepares the next while one runs.
PREFETCH = 2


def create_jax_strategy(strategy="auto", tpu=None, cpu_devices=1):
    """The mesh for --strategy on the devices JAX sees (tpu, gpu, cpu, or auto: the first of those)."""
    if strategy not in STRATEGIES:
        raise StrategyError(f"unknown --strategy={strategy!r}: use one of {', '.join(STRATEGIES)}")
    if not isinstance(cpu_devices, int) or isinstance(cpu_devices, bool) or cpu_devices < 1:
        raise StrategyError(f"--cpu_devices must be a positive integer, got {cpu_devices!r}")
    _keep_tensorflow_off_accelerators()
    if strategy == "multi_worker":
        _join_cluster()
    # JAX probes its platforms here (a CUDA plugin without a GPU logs errors): quiet as
    # TensorFlow's start (keras_vit/startup.py).
    with startup.native_stderr_hidden(hide=startup.quiet_start()):
        platform = jax.default_backend()
    if strategy in ("tpu", "gpu") and platform != strategy:
        raise StrategyError(
            f"--strategy={strategy} but JAX sees no {strategy.upper()} here (its devices: {platform}): "
            f"install JAX for the {strategy.upper()}, or use --strategy=cpu (or auto)"
        )
    if tpu and tpu != "local" and platform == "tpu":
        raise StrategyError(
            "--tpu names a TPU node; the jax engine runs on the TPU VM itself: use --tpu=local"
        )
    if strategy == "cpu" or platform == "cpu":
        devices = jax.devices("cpu")
        if len(devices) < cpu_devices:
            raise StrategyError(
                f"--cpu_devices={cpu_devices} but JAX started with {len(devices)} CPU device(s): pass "
                f"--cpu_devices on the trainer's command line, or set XLA_FLAGS="
                f"--xla_force_host_platform_device_count={cpu_devices} before JAX is imported"
            )
        devices = devices[:cpu_devices] if jax.process_count() == 1 else devices
        return _connected(JaxStrategy(devices))
    return _connected(JaxStrategy(jax.devices()))


def _connected(strategy):
    """`strategy` after its processes' first collective. On CPU, JAX's collectives (gloo) print
    a line to stdout when they connect, in the middle of the progress lines unless it happens
    here, with the start-up's other lines, hidden unless --verbose."""
    if strategy.process_count == 1:
        return strategy
    hide = startup.quiet_start()
    with startup.native_stderr_hidden(hide=hide), _native_stdout_hidden(hide=hide):
        strategy.any_process(False)
    return strategy


@contextlib.contextmanager
def _native_stdout_hidden(hide):
    """File descriptor 1 sent to /dev/null (C++ libraries write there past sys.stdout)."""
    if not hide:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _keep_tensorflow_off_accelerators():
    """TensorFlow only runs tf.data here: it must not take the accelerators' memory from JAX."""
    for kind in ("GPU", "TPU"):
        try:
            tf.config.set_visible_devices([], kind)
        except (RuntimeError, ValueError):  # already started, or no such device type
            pass


# JAX's coordination service ends every process of the run, with its own fatal error, once one of
# them has sent no heartbeat for this long: left above trainers/peer_watch.py's LOST_AFTER_S, so
# the run's own line comes first.
HEARTBEAT_TIMEOUT_S = 100
# How long JAX's own wait for the cluster may take once every process has reported to process 0
# (trainers/rendezvous.py: one that died since leaves the others there); past it the process ends
# with its one-line error (trainers/join_deadline.py). JAX's own limit is set a minute later: its
# client would end the process with a fatal error of its own (exit status 134), which its public
# API cannot turn into an exception.
JOIN_TIMEOUT_S = rendezvous.JOIN_TIMEOUT_S
JAX_JOIN_TIMEOUT_S = JOIN_TIMEOUT_S + 60
# The cluster this process joined: the coordinator's "host:port" and the processes' addresses.
_CLUSTER = {"coordinator": "", "names": []}


def _join_cluster():
    """jax.distributed.initialize from TF_CONFIG, or from what JAX finds (TPU pods, SLURM)."""
    if jax.distributed.is_initialized():
        # A later run of the same command (a sweep's next rate) shares the cluster; JAX, like
        # TensorFlow, joins one per process.
        if "tf_config" in _CLUSTER and os.environ.get("TF_CONFIG") != _CLUSTER["tf_config"]:
            raise StrategyError(ANOTHER_CLUSTER)
        return
    _initialize()
    preemption.reclaim_signals()  # JAX's coordination client took SIGTERM for itself


def _initialize():
    """jax.distributed.initialize, with the cluster it joins kept for trainers/peer_watch.py."""
    raw = os.environ.get("TF_CONFIG")
    try:
        if raw:
            # The tf engine's processes and numbering: a chief, where TF_CONFIG has one, is process 0.
            cluster, task_type, task_index = read_tf_config(raw)
            # JAX's own wait, which no signal of ours can end, then has the trainer's limit.
            processes, index = meet_at_process_0(cluster, task_type, task_index)
            with join_deadline.ends_the_process_after(JOIN_TIMEOUT_S, _never_formed(processes)):
                jax.distributed.initialize(
                    coordinator_address=processes[0],
                    num_processes=len(processes),
                    process_id=index,
                    initialization_timeout=JAX_JOIN_TIMEOUT_S,
                    heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S,
                )
            _CLUSTER.update(coordinator=processes[0], names=processes, tf_config=raw)
        else:
            jax.distributed.initialize(heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S)
            # The address JAX found (TPU pods, SLURM): public only as its state's field.
            found = getattr(jax_distributed_state.global_state, "coordinator_address", None)
            _CLUSTER.update(coordinator=found or "", names=[], tf_config=raw)
    except StrategyError:  # TF_CONFIG's, or the processes' meeting's, own line
        raise
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise StrategyError(
            f"--strategy=multi_worker could not join the cluster ({type(e).__name__}: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else e}): set TF_CONFIG, e.g. "
            f"{TF_CONFIG_EXAMPLE}"
        ) from None


def _never_formed(processes):
    """The one-line error of a process whose JAX cluster did not form within JOIN_TIMEOUT_S
    after all its processes had met (one of them died since, or cannot reach process 0)."""
    return (
        f"--strategy=multi_worker: JAX's cluster did not form within {JOIN_TIMEOUT_S} s after its "
        f"{len(processes)} processes had started: check that each still runs and reaches process 0 "
        f"at {processes[0]}, then rerun them all"
    )


_Extended = collections.namedtuple("_Extended", "worker_devices")


class JaxStrategy:
    engine = "jax"

    def __init__(self, devices):
        self.devices = list(devices)
        self.mesh = Mesh(np.array(self.devices), (BATCH_AXIS,))
        self.replicated = NamedSharding(self.mesh, P())
        self.batch_sharding = NamedSharding(self.mesh, P(BATCH_AXIS))
        self.local_devices = [d for d in self.devices if d.process_index == jax.process_index()]
        self.extended = _Extended([f"/device:{d.platform.upper()}:{d.id}" for d in self.local_devices])

    @property
    def num_replicas_in_sync(self):
        return len(self.devices)

    @property
    def process_count(self):
        return jax.process_count()

    @property
    def is_chief(self):
        return jax.process_index() == 0

    @property
    def task_id(self):
        return jax.process_index()

    @property
    def platform(self):
        return self.devices[0].platform

    def scope(self):
        return contextlib.nullcontext()

    def describe(self):
        names = ", ".join(f"{d.platform.upper()}:{d.id}" for d in self.local_devices[:8])
        if len(self.local_devices) > 8:
            names += f", ... ({len(self.local_devices)} devices)"
        return (
            f"JAX data parallel: {self.num_replicas_in_sync} replica(s) on "
            f"{self.process_count} process(es) [{names}]"
        )

    def memory_limit(self):
        """Bytes one device may allocate (the smallest), or None where JAX does not say."""
        limits = []
        for device in self.local_devices:
            try:
                stats = device.memory_stats() or {}
            except Exception:  # some platforms do not implement it
                stats = {}
            if "bytes_limit" in stats:
                limits.append(int(stats["bytes_limit"]))
        return min(limits) if limits else None

    def distribute_datasets_from_function(self, input_fn):
        context = tf.distribute.InputContext(
            num_input_pipelines=self.process_count,
            input_pipeline_id=jax.process_index(),
            num_replicas_in_sync=self.num_replicas_in_sync,
        )
        return Feed(self, input_fn(context))

    def put_replicated(self, value):
        """`value` (the same on every process) as an array on every device of the mesh."""
        if isinstance(value, jax.Array) and value.sharding == self.replicated:
            return value
        host = np.asarray(value.addressable_data(0) if isinstance(value, jax.Array) else value)
        return jax.make_array_from_callback(host.shape, self.replicated, lambda index: host[index])

    def put_batch(self, local):
        """This process's rows of a global batch as one array split over the mesh."""
        return jax.make_array_from_process_local_data(self.batch_sharding, local)

    def fetch(self, array):
        """A global array as NumPy on this host (every process gets all of it)."""
        if self.process_count > 1 and not array.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(array, tiled=True))
        return np.asarray(array)

    def processes(self):
        """trainers.distribute.Processes of a run of several processes; None for one."""
        if self.process_count == 1:
            return None
        # The chief is process 0, which runs JAX's coordinator.
        host = host_of(_CLUSTER["coordinator"]) if _CLUSTER["coordinator"] else "localhost"
        return Processes(jax.process_index(), self.process_count, host, _CLUSTER["names"], self._share)

    def _share(self, value):
        return int(multihost_utils.broadcast_one_to_all(np.array(value, np.int32)))

    def any_process(self, flag):
        """Whether `flag` is true on any process (a collective: every process must call it)."""
        if self.process_count == 1:
            return bool(flag)
        return bool(np.any(multihost_utils.process_allgather(np.array([bool(flag)]))))


class Feed:
    """A tf.data dataset of per-replica batches as global batches on the mesh, prefetched."""

    def __init__(self, strategy, dataset):
        self.strategy, self.dataset = strategy, dataset

    def __iter__(self):
        queue = collections.deque()
        batches = self._global_batches()
        for batch in batches:
            queue.append(batch)
            if len(queue) > PREFETCH:
                yield queue.popleft()
        while queue:
            yield queue.popleft()

    def _global_batches(self):
        local = len(self.strategy.local_devices)
        elements = self.dataset.as_numpy_iterator()
        while True:
            group = []
            for element in elements:
                group.append(element)
                if len(group) == local:
                    break
            if not group:
                return
            last = len(group) < local
            if last:
                group = _pad_group(group, local)
                if group is None:  # a training stream's tail that fills no replica: dropped
                    return
            parts = tuple(np.concatenate([element[k] for element in group]) for k in range(len(group[0])))
            yield tuple(self.strategy.put_batch(part) for part in parts)
            if last:
                return


def _pad_group(group, size):
    """An evaluation stream's last, partial group filled up with weight-0 copies (its padding has
    weights, the third part of each element); None for elements without weights."""
    if len(group[0]) != 3:
        return None
    images, labels, weights = group[-1]
    filler = (images, labels, np.zeros_like(weights))
    return group + [filler] * (size - len(group))
