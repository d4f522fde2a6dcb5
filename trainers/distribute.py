"""The tf.distribute strategy from the flags: TPU, local GPUs, CPU (split into N devices), multi-worker.

`--cpu_devices=N` splits the host CPU into N logical devices so that multi-replica code runs (and is
tested) on a laptop exactly as it runs on N accelerators: the same MirroredStrategy, the same
all-reduce, the same per-replica batches. One CPU device is a one-replica MirroredStrategy for the same
reason: a single code path whatever the replica count.
"""

import collections
import contextlib
import glob
import importlib.util
import json
import os
import signal

import tensorflow as tf
from absl import logging
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
from tensorflow.python.distribute import multi_worker_util
from tensorflow.python.eager import context

from trainers import preemption, rendezvous
from trainers.errors import StrategyError

# --strategy's values; the jax engine's mesh (trainers/jax_distribute.py) takes the same.
STRATEGIES = ("auto", "tpu", "gpu", "cpu", "multi_worker")


def create_strategy(
    strategy: str = "auto", tpu: str | None = None, cpu_devices: int = 1, cpu_threads: int = 0
) -> tf.distribute.Strategy:
    """auto: a TPU if --tpu is given or one is attached, else all local GPUs, else the CPU.
    `cpu_threads`: the intra-op threads of the CPU kernels (0: TensorFlow's default)."""
    if strategy not in STRATEGIES:
        raise StrategyError(f"unknown --strategy={strategy!r}: use one of {', '.join(STRATEGIES)}")
    if not isinstance(cpu_devices, int) or isinstance(cpu_devices, bool) or cpu_devices < 1:
        raise StrategyError(f"--cpu_devices must be a positive integer, got {cpu_devices!r}")
    set_cpu_threads(cpu_threads)
    if strategy == "auto":
        if tpu or _local_tpu_attached():
            strategy = "tpu"
        elif tf.config.list_physical_devices("GPU"):
            strategy = "gpu"
        else:
            strategy = "cpu"
    if strategy == "tpu":
        return _tpu_strategy(tpu)
    if strategy == "gpu":
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            raise StrategyError(
                "--strategy=gpu but TensorFlow sees no GPU here: install a CUDA build of "
                "TensorFlow, or use --strategy=cpu (or auto)"
            )
        return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(len(gpus))])
    if strategy == "multi_worker":
        return _multi_worker_strategy(cpu_devices)
    _split_cpu(cpu_devices)
    return _cpu_strategy(cpu_devices)


# One MirroredStrategy per set of CPU devices and process. Two strategies over the same devices
# number their collective ops from the same keys, and TensorFlow's collective runtime then
# aborts the second one ("Collective instance 100 expected type ..."): a notebook or the demo
# that runs several trainings in one process must reuse the first.
_CPU_STRATEGIES = {}


def _cpu_strategy(cpu_devices):
    if cpu_devices not in _CPU_STRATEGIES:
        _CPU_STRATEGIES[cpu_devices] = tf.distribute.MirroredStrategy(
            [f"/cpu:{i}" for i in range(cpu_devices)]
        )
    return _CPU_STRATEGIES[cpu_devices]


def _tpu_chips_visible():
    """TensorFlow lists a TPU, or TPU chips are visible as devices (/dev/accel* up to v4, vfio from v5)."""
    try:
        if tf.config.list_physical_devices("TPU"):
            return True
    except RuntimeError:
        pass
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def _local_tpu_attached():
    """A TPU VM whose TPU this TensorFlow can drive (auto picks the TPU only then)."""
    return _tpu_chips_visible() and (
        bool(tf.config.list_physical_devices("TPU")) or importlib.util.find_spec("libtpu") is not None
    )


def _tpu_strategy(tpu):
    name = tpu or "local"
    if name == "local" and not _tpu_chips_visible():
        # Checked first: a failed initialize_tpu_system also clears TensorFlow's eager caches.
        raise StrategyError(
            "no TPU found (--tpu=local: this machine has no TPU device): on a TPU VM use "
            "--tpu=local, for a TPU node its name; elsewhere use --strategy=gpu, cpu or auto"
        )
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        if name != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except Exception as e:  # NotFoundError, ValueError, URLError, ...: all mean "no usable TPU"
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0][:120]
        raise StrategyError(
            f"no TPU found (--tpu={name}: {reason}): on a TPU VM use --tpu=local, for a TPU "
            f"node its name; elsewhere use --strategy=gpu, cpu or auto"
        ) from None


def set_cpu_threads(count):
    """Sets the intra-op thread count before TensorFlow starts its runtime; once started, the
    count it runs with must be the one asked for (a second run in the same process)."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise StrategyError(f"--cpu_threads must be 0 (one per core) or a positive integer, got {count!r}")
    if count == 0 or tf.config.threading.get_intra_op_parallelism_threads() == count:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(count)
    except RuntimeError:
        raise StrategyError(
            f"--cpu_threads={count} but TensorFlow already started with "
            f"{tf.config.threading.get_intra_op_parallelism_threads() or 'one per core'} threads: "
            "set it in the process's first run, or leave it at 0"
        ) from None


def _split_cpu(count):
    """Makes at least `count` logical CPU devices exist and returns how many there are."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    if count > 1 and len(tf.config.get_logical_device_configuration(cpu) or []) < count:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
            )
        except RuntimeError:
            pass  # TensorFlow already started its devices; checked just below
    available = len(tf.config.list_logical_devices("CPU"))
    if available < count:
        raise StrategyError(
            f"--cpu_devices={count} but TensorFlow already started with {available} CPU "
            f"device(s): create the strategy before any other TensorFlow work"
        )
    return available


# The multi-worker strategy this process formed, and its TF_CONFIG. TensorFlow's server holds
# the process's port until the process ends and cannot form a cluster twice: every later run in
# the process (the sweep's, each rate a run) shares the first one's, as the jax engine's runs
# share the JAX cluster it joined. A second cluster's meeting found process 0's port held by its
# own server and the other processes waited the meeting's 300 s.
_FORMED = {}

# Both engines' line for a run in a process that joined the cluster of another TF_CONFIG.
ANOTHER_CLUSTER = (
    "--strategy=multi_worker: this process already joined the cluster of another TF_CONFIG, and "
    "a process joins one: run the other in a process of its own"
)

# What both engines print where TF_CONFIG is missing or malformed.
TF_CONFIG_EXAMPLE = (
    '{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": "worker", "index": 0}}'
)


def read_tf_config(raw):
    """(cluster, task type, task index) of a TF_CONFIG value, the same on both engines: its
    processes are a chief (at most one) and workers, and its task is one of them. A cluster of a
    chief alone is a one-process run, as TensorFlow's own strategy takes it. StrategyError in one
    line otherwise."""
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config["task"]
        if not isinstance(cluster, dict) or not all(
            isinstance(cluster.get(kind) or [], list) for kind in ("chief", "worker")
        ):
            raise ValueError("cluster.chief and cluster.worker must be lists of host:port")
        check_no_parameter_servers(cluster)
        if len(cluster.get("chief") or []) > 1:
            raise ValueError("cluster.chief lists more than one process; name the others under worker")
        task_type, index = task["type"], int(task["index"])
        if (task_type, index) not in cluster_processes(cluster):
            raise ValueError("task does not name one of cluster.chief or cluster.worker")
    except (ValueError, KeyError, TypeError) as e:
        raise StrategyError(
            f"invalid TF_CONFIG ({type(e).__name__}: {e}): it needs cluster.chief and/or "
            f"cluster.worker (lists of host:port) and task.type and task.index naming one of them, "
            f"e.g. {TF_CONFIG_EXAMPLE}"
        ) from None
    return cluster, task_type, index


def _multi_worker_strategy(cpu_devices):
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise StrategyError(
            f"--strategy=multi_worker needs the TF_CONFIG environment variable, e.g. {TF_CONFIG_EXAMPLE}"
        )
    cluster, task_type, index = read_tf_config(raw)
    if cpu_devices > 1 and not tf.config.list_physical_devices("GPU"):
        # MultiWorkerMirroredStrategy places one replica on each worker's CPU, whatever the logical split.
        raise StrategyError(
            "--cpu_devices>1 does not apply to --strategy=multi_worker on CPU (one replica "
            "per worker): use --cpu_devices=1, or --strategy=cpu for several replicas "
            "in one process"
        )
    if _FORMED:  # a later run of the same command: a sweep's next rate, say
        if _FORMED["tf_config"] != raw:
            raise StrategyError(ANOTHER_CLUSTER)
        return _FORMED["strategy"]
    # TensorFlow's own wait, which no signal of ours can end, then has its own limit (below).
    processes, _ = meet_at_process_0(cluster, task_type, index)
    logging.info("Multi-worker: %d processes, this is %s %s", len(processes), task_type, index)
    limit_tensorflow_s_wait(cluster, rendezvous.JOIN_TIMEOUT_S)
    try:
        with _ctrl_c_ends_the_wait():
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
    except tf.errors.DeadlineExceededError:
        raise StrategyError(_never_formed(cluster, processes)) from None
    except tf.errors.UnknownError as e:
        if _GRPC_NOT_STARTED not in str(e):
            raise
        raise StrategyError(_port_held(cluster[task_type][index], f"{task_type} {index}")) from None
    preemption.reclaim_signals()  # the cluster's runtime took SIGTERM for itself
    _FORMED.update(tf_config=raw, strategy=strategy)
    return strategy


def limit_tensorflow_s_wait(cluster, seconds):
    """Configures, before the strategy does, the coordination service it would configure (the
    same leader, by TensorFlow's own rule, and the same jobs), with a limit of `seconds` on the
    wait for every process to register with it.

    Without it a process that died after the meeting at process 0, before TensorFlow's own wait
    was complete, left the others there for an hour (the service's default), deaf to SIGTERM. The
    limit alone ends only the processes that register with another: process 0, the service's
    leader, registers with itself at once and then waited on regardless; registering with a
    barrier makes its wait end at the limit too. Both end with DeadlineExceededError. A service
    the user configured already is left as it is."""
    runtime = context.context()
    if runtime.coordination_service is not None:
        return
    spec = tf.train.ClusterSpec(cluster)
    runtime.configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in ("chief", "worker")
            if job in spec.jobs
        ],
        cluster_register_timeout_in_ms=int(seconds * 1000),
    )
    runtime.coordination_service.cluster_register_with_barrier = True


# TensorFlow's error when its server cannot bind the process's TF_CONFIG port.
_GRPC_NOT_STARTED = "Could not start gRPC server"


def _port_held(address, name):
    """The one-line error of a process whose own TF_CONFIG port another program holds:
    TensorFlow's server binds it only after the meeting (which checks process 0's port alone),
    and said no more than `UnknownError: Could not start gRPC server`, in a traceback."""
    port = rendezvous.split_address(address)[1]
    return (
        f"--strategy=multi_worker: {name} ({address}) cannot listen on port {port}: another "
        "program holds it; stop it or give TF_CONFIG a free port, then rerun every process"
    )


def _never_formed(cluster, processes):
    """The one-line error of a process whose cluster TensorFlow did not form within the limit
    after all its processes had met at process 0 (one of them stopped since, or cannot reach
    process 0's port)."""
    kind, first = cluster_processes(cluster)[0]
    return (
        f"--strategy=multi_worker: TensorFlow's cluster did not form within "
        f"{rendezvous.JOIN_TIMEOUT_S} s after its {len(processes)} processes had started: check "
        f"that each still runs and reaches {kind} {first} at {processes[0]}, then rerun them all"
    )


def check_no_parameter_servers(cluster):
    """ValueError where a TF_CONFIG cluster lists parameter servers: neither engine's multi-worker
    strategy has any, and TensorFlow's waited for them to join (its coordination service's leader
    is the first of them) until its limit, then failed far from the cause."""
    if cluster.get("ps"):
        raise ValueError(
            "cluster.ps lists parameter servers, which --strategy=multi_worker does not use: "
            "list its processes under chief and worker only"
        )


def cluster_processes(cluster):
    """[(task type, index)] of a TF_CONFIG cluster's processes, numbered as both engines number
    them: the chief first (process 0, which writes the run), then the workers."""
    return [(kind, i) for kind in ("chief", "worker") for i in range(len(cluster.get(kind) or []))]


def is_process_0(cluster, task_type, task_index):
    """Whether the task is process 0 of a TF_CONFIG cluster (the chief, else worker 0): the one
    that writes the run."""
    return cluster_processes(cluster)[:1] == [(task_type, task_index)]


def meet_at_process_0(cluster, task_type, task_index):
    """Says what this process waits for, then meets every other process of the TF_CONFIG
    cluster at process 0 (trainers/rendezvous.py), where SIGTERM and Ctrl-C stop the wait, before
    either engine's own wait in native code. Returns the processes' addresses, in both engines'
    order (`cluster_processes`), and this process's index among them."""
    print(cluster_wait_line(cluster, task_type, task_index), flush=True)
    tasks = cluster_processes(cluster)
    processes = [cluster[kind][i] for kind, i in tasks]
    index = tasks.index((task_type, task_index))
    with preemption.stops_at_once():
        rendezvous.meet(processes, index, tasks=[f"{kind} {i}" for kind, i in tasks])
    return processes, index


def cluster_wait_line(cluster, task_type, index):
    """What each process of a cluster says before it waits for the others to start (both
    engines): the cluster forms only once every process of TF_CONFIG has, so a process that never
    starts holds the others there, until the limit (trainers/rendezvous.py)."""
    processes = sum(len(cluster.get(kind) or []) for kind in ("chief", "worker"))
    if processes == 1:  # no one to wait for
        return f"cluster: {task_type} {index} of TF_CONFIG ({cluster[task_type][index]}) is its only process"
    return (
        f"cluster: {task_type} {index} of TF_CONFIG ({cluster[task_type][index]}) waits for its "
        f"{processes} processes to start; Ctrl-C or SIGTERM stops the wait, which gives up after "
        f"{rendezvous.JOIN_TIMEOUT_S} s"
    )


@contextlib.contextmanager
def _ctrl_c_ends_the_wait():
    """Ctrl-C at the operating system's default while the strategy waits for every process of
    the cluster (all of them reported to process 0 first, so the wait is short, unless one died
    since: then up to the limit, `limit_tensorflow_s_wait`): the wait runs in TensorFlow's native code,
    holding the GIL, so no Python handler can run before it returns. The process then ends at
    once, as SIGINT ends a program, with nothing yet written. (TensorFlow takes SIGTERM for
    itself as the wait begins, and keeps it until it returns.)"""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
    except ValueError:  # not the main thread: no handler of ours to lift
        yield
        return
    try:
        yield
    finally:
        if previous is not None:  # None: a handler not set from Python, which this cannot put back
            signal.signal(signal.SIGINT, previous)


def describe(strategy) -> str:
    """One line for the log: the kind, the number of replicas and workers, and the devices."""
    if hasattr(strategy, "describe"):  # the jax engine's (trainers/jax_distribute.py)
        return strategy.describe()
    kind = type(strategy).__name__
    for public, name in (
        (tf.distribute.MultiWorkerMirroredStrategy, "MultiWorkerMirroredStrategy"),
        (tf.distribute.TPUStrategy, "TPUStrategy"),
        (tf.distribute.MirroredStrategy, "MirroredStrategy"),
        (tf.distribute.OneDeviceStrategy, "OneDeviceStrategy"),
    ):
        if isinstance(strategy, public):  # the class behind MultiWorkerMirroredStrategy has another name
            kind = name
            break
    replicas = strategy.num_replicas_in_sync
    workers = 1
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None:
        try:
            jobs = resolver.cluster_spec().as_dict()
            workers = max(1, sum(len(v) for k, v in jobs.items() if k in ("worker", "chief")))
        except Exception:  # TPU resolvers without a reachable cluster spec
            workers = 1
    if isinstance(strategy, tf.distribute.TPUStrategy):
        workers = strategy.extended.num_hosts
    devices = getattr(strategy.extended, "worker_devices", ())
    shown = ", ".join(d.split("/")[-1].replace("device:", "") for d in devices[:8])
    if len(devices) > 8:
        shown += f", ... ({len(devices)} devices)"
    return f"{kind}: {replicas} replica(s) on {workers} worker(s) [{shown}]"


def worker_devices(strategy):
    """The devices a strategy's replicas run on in this process ("GPU"/"CPU" for the default
    strategy, where TensorFlow places the step itself)."""
    try:
        return list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy: one device, TensorFlow's choice
        return ["GPU"] if tf.config.list_logical_devices("GPU") else ["CPU"]


def all_gpus(devices):
    """Whether every one of `devices` (worker_devices' names) is a GPU."""
    return all("GPU" in d.upper() for d in devices)


def task_id(strategy):
    """This process's index among the workers (names a non-chief worker's temporary checkpoint folder)."""
    return strategy.cluster_resolver.task_id


def is_chief(strategy):
    """The process that writes logs, results and the real checkpoints (worker 0 or 'chief')."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or isinstance(strategy, tf.distribute.TPUStrategy):
        return True
    cluster = resolver.cluster_spec().as_dict()
    if not cluster or resolver.task_type is None:
        return True
    return is_process_0(cluster, resolver.task_type, resolver.task_id)


# The processes of one run, as trainers/peer_watch.py watches them: this process's index (the
# chief's is 0) and their count, the chief's host, each process's address for the lines (or
# empty), and share(value): the chief's integer on every process (a collective: every process
# calls it, at the same point of the run).
Processes = collections.namedtuple("Processes", "index count chief_host names share")


def processes(strategy):
    """The Processes of a run of several tf.distribute workers; None for one."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None
    resolver = strategy.cluster_resolver
    jobs = resolver.cluster_spec().as_dict()
    tasks = cluster_processes(jobs)
    if len(tasks) < 2:
        return None
    names = [jobs[kind][i] for kind, i in tasks]
    index = tasks.index((resolver.task_type, resolver.task_id))
    chief = index == 0

    def share(value):
        # Each of the chief's replicas adds (value, 1), the others' (0, 0): their ratio is the
        # chief's value whatever its replica count.
        part = [value, 1] if chief else [0, 0]
        values = strategy.experimental_distribute_values_from_function(
            lambda context: tf.constant(part, tf.int64)
        )
        total, count = strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None).numpy()
        return int(total // count)

    return Processes(index, len(names), host_of(names[0]), names, share)


def host_of(address):
    """The host of "host:port" ("[::1]:port" too)."""
    return address.rsplit(":", 1)[0].strip("[]")
