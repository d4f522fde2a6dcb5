"""Strategies from flags, their one-line errors, and two worker processes feeding the same global batches."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import command_server
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context
from trainer_cli import TINY_DIGITS_FLAGS, free_ports, run_as_a_user, start_python_c, wait_all

from trainers import data, distribute, preemption, rendezvous

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def no_cluster_formed(monkeypatch):
    """Each test starts as a process that has formed no multi-worker cluster: a strategy one test
    forms (a stand-in's) would otherwise be every later test's."""
    monkeypatch.setattr(distribute, "_FORMED", {})


def one_line(error):
    text = str(error.value)
    assert text and "\n" not in text
    return text


def test_cpu_split_into_two_replicas():
    strategy = distribute.create_strategy("cpu", cpu_devices=2)
    assert isinstance(strategy, tf.distribute.MirroredStrategy) and strategy.num_replicas_in_sync == 2
    assert distribute.describe(strategy) == "MirroredStrategy: 2 replica(s) on 1 worker(s) [CPU:0, CPU:1]"
    result = strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group + 1)
    assert strategy.reduce(tf.distribute.ReduceOp.SUM, result, axis=None).numpy() == 3


def test_one_cpu_is_a_one_replica_mirrored_strategy():
    strategy = distribute.create_strategy("cpu", cpu_devices=1)
    assert isinstance(strategy, tf.distribute.MirroredStrategy) and strategy.num_replicas_in_sync == 1
    assert "1 replica(s) on 1 worker(s) [CPU:0]" in distribute.describe(strategy)


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="this machine has a GPU")
def test_auto_without_accelerators_is_the_cpu():
    strategy = distribute.create_strategy("auto")
    assert isinstance(strategy, tf.distribute.MirroredStrategy) and strategy.num_replicas_in_sync == 1
    assert strategy.extended.worker_devices[0].endswith("CPU:0")


def test_more_cpu_devices_than_tensorflow_started_with():
    # The test session split the CPU in two at start-up; TensorFlow cannot be re-split once its
    # runtime has started, which listing the devices does (the test ran alone failed without it).
    assert len(tf.config.list_logical_devices("CPU")) == 2
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy("cpu", cpu_devices=3)
    assert "--cpu_devices=3 but TensorFlow already started with 2 CPU device(s)" in one_line(e)


CPU_THREADS_SCRIPT = """
import tensorflow as tf
from trainers import distribute
distribute.create_strategy("cpu", cpu_threads=3)
print(tf.config.threading.get_intra_op_parallelism_threads())
distribute.create_strategy("cpu", cpu_threads=3)  # a second run in the same process
try:
    distribute.create_strategy("cpu", cpu_threads=4)
except distribute.StrategyError as e:
    print(e)
"""


@pytest.mark.slow  # 16 s: a child imports TensorFlow
def test_cpu_threads_are_set_before_the_runtime_starts_and_checked_after():
    proc = subprocess.run(
        [sys.executable, "-c", CPU_THREADS_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    threads, error = proc.stdout.strip().splitlines()
    assert threads == "3"
    assert error == (
        "--cpu_threads=4 but TensorFlow already started with 3 threads: set it in the process's "
        "first run, or leave it at 0"
    )


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_cpu_threads_must_be_a_count(bad):
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy("cpu", cpu_threads=bad)
    assert one_line(e) == f"--cpu_threads must be 0 (one per core) or a positive integer, got {bad!r}"


def test_no_tpu():
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy("tpu")
    assert one_line(e).startswith("no TPU found (--tpu=local")
    assert "--strategy=gpu, cpu or auto" in one_line(e)


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="this machine has a GPU")
def test_no_gpu():
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy("gpu")
    assert "sees no GPU" in one_line(e) and "--strategy=cpu" in one_line(e)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(strategy="mirrored"),
            "unknown --strategy='mirrored': use one of auto, tpu, gpu, cpu, multi_worker",
        ),
        (dict(strategy="cpu", cpu_devices=0), "--cpu_devices must be a positive integer, got 0"),
        (dict(strategy="cpu", cpu_devices="2"), "--cpu_devices must be a positive integer, got '2'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy(**kwargs)
    assert one_line(e) == message


@pytest.mark.parametrize(
    "tf_config, message",
    [
        (None, "--strategy=multi_worker needs the TF_CONFIG environment variable"),
        ("{not json", "invalid TF_CONFIG (JSONDecodeError"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "invalid TF_CONFIG (KeyError: 'cluster')"),
        (json.dumps({"cluster": {"worker": ["localhost:1"]}}), "invalid TF_CONFIG (KeyError: 'task')"),
        (
            json.dumps({"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 3}}),
            "invalid TF_CONFIG (ValueError: task does not name one of cluster.chief or cluster.worker)",
        ),
    ],
)
def test_bad_tf_config(monkeypatch, tf_config, message):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy("multi_worker")
    assert one_line(e).startswith(message)


@pytest.mark.parametrize(
    "cluster, task, problem",
    [
        ({"worker": ["h:1"]}, {"type": "chief", "index": 0}, "task does not name one of cluster.chief"),
        ({"worker": ["h:1"]}, {"type": "evaluator", "index": 0}, "task does not name one of cluster.chief"),
        ({"worker": ["h:1"]}, {"type": "worker", "index": "one"}, "invalid literal for int()"),
        ({}, {"type": "worker", "index": 0}, "task does not name one of cluster.chief"),
        ({"worker": "h:1"}, {"type": "worker", "index": 0}, "cluster.chief and cluster.worker must be lists"),
        (["h:1"], {"type": "worker", "index": 0}, "cluster.chief and cluster.worker must be lists"),
        (
            {"chief": ["h:1", "h:2"]},
            {"type": "chief", "index": 0},
            "cluster.chief lists more than one process",
        ),
    ],
)
def test_a_tf_config_both_engines_refuse_is_one_line_with_an_example(cluster, task, problem):
    with pytest.raises(distribute.StrategyError) as e:
        distribute.read_tf_config(json.dumps({"cluster": cluster, "task": task}))
    assert one_line(e).startswith("invalid TF_CONFIG (") and problem in one_line(e)
    assert one_line(e).endswith(f"e.g. {distribute.TF_CONFIG_EXAMPLE}")


def test_a_process_joins_one_cluster_and_its_later_runs_share_it(monkeypatch):
    """TensorFlow's server holds a process's port to its end and cannot form a cluster twice: a
    sweep under --strategy=multi_worker (a run per rate, in one process) met again for its second
    rate, found process 0's port held by that server, and its other processes waited 300 s (tried
    by hand with two workers). A later run now shares the first run's strategy; another TF_CONFIG
    in the same process is one line. The cluster is a chief alone, which the tf engine refused
    (`KeyError: 'worker'`) where TensorFlow's strategy and the jax engine run it as one process
    (by hand afterwards: a 4-step digits run of a chief alone ended alike on both engines)."""
    formed, met = [], []
    monkeypatch.setattr(distribute, "meet_at_process_0", lambda *args: met.append(args) or (["h:1"], 0))
    monkeypatch.setattr(distribute, "limit_tensorflow_s_wait", lambda *args: None)
    monkeypatch.setattr(
        tf.distribute, "MultiWorkerMirroredStrategy", lambda: formed.append(object()) or formed[-1]
    )
    chief, worker = {"type": "chief", "index": 0}, {"type": "worker", "index": 0}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["h:1"]}, "task": chief}))
    first = distribute.create_strategy("multi_worker")
    assert distribute.create_strategy("multi_worker") is first
    assert len(formed) == 1 and met == [({"chief": ["h:1"]}, "chief", 0)]
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["h:2"]}, "task": worker}))
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy("multi_worker")
    assert one_line(e).startswith("--strategy=multi_worker: this process already joined the cluster of")


def test_parameter_servers_in_tf_config_are_one_line(monkeypatch):
    """A ps job in TF_CONFIG made TensorFlow's coordination service lead from the first
    parameter server, which no process of --strategy=multi_worker starts: the worker waited there
    (past 120 s when tried by hand) where it now stops at once."""
    cluster = {"worker": ["localhost:1"], "ps": ["localhost:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy("multi_worker")
    assert one_line(e).startswith(
        "invalid TF_CONFIG (ValueError: cluster.ps lists parameter servers, which "
        "--strategy=multi_worker does not use: list its processes under chief and worker only)"
    )


def test_multi_worker_on_cpu_has_one_replica_per_worker(monkeypatch):
    monkeypatch.setenv(
        "TF_CONFIG",
        json.dumps(
            {"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}
        ),
    )
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy("multi_worker", cpu_devices=2)
    assert "--cpu_devices>1 does not apply to --strategy=multi_worker on CPU" in one_line(e)


@pytest.fixture
def runtime(monkeypatch):
    """A TensorFlow runtime of its own in place of the process's, whose coordination service the
    strategy's creation configures (the process's own is started already, for the other tests)."""
    own = context.Context()
    monkeypatch.setattr(distribute.context, "context", lambda: own)
    return own


def test_the_processes_meet_before_tensorflow_s_wait_which_ctrl_c_ends_and_the_wait_is_said(
    monkeypatch, capsys, runtime
):
    """The strategy waits in TensorFlow's native code, holding the GIL, for every process of
    TF_CONFIG to start: a worker that never started left the others silent for an hour, and
    neither Ctrl-C nor SIGTERM stopped them (Python's handlers cannot run there; only kill -9
    did). The processes now meet first in Python (trainers/rendezvous.py: the chief first, then
    the workers, so process 0 is the chief) and the signals stop that wait; during TensorFlow's
    own wait SIGINT is at the system's default, which ends the process (checked by hand: exit
    status 130 at once); the handler is put back after it."""
    cluster = {"chief": ["host-a:2222"], "worker": ["host-b:2222", "host-c:2222"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    met = []
    monkeypatch.setattr(
        rendezvous,
        "meet",
        # Where a signal would stop the command at once (no run reads the flags there).
        lambda processes, index, **kwargs: met.append((processes, index, kwargs, preemption._unread())),
    )
    during = []

    def strategy_in_the_wait():
        during.append(signal.getsignal(signal.SIGINT))
        return "strategy"

    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", strategy_in_the_wait)
    before = signal.getsignal(signal.SIGINT)
    assert before is not signal.SIG_DFL
    with preemption.watching(reads=True):  # a run's, as the trainers create their strategy
        assert distribute.create_strategy("multi_worker") == "strategy"
    assert during == [signal.SIG_DFL]
    assert signal.getsignal(signal.SIGINT) is before
    assert capsys.readouterr().out == (
        "cluster: worker 1 of TF_CONFIG (host-c:2222) waits for its 3 processes to start; "
        "Ctrl-C or SIGTERM stops the wait, which gives up after 300 s\n"
    )
    assert met == [
        (
            ["host-a:2222", "host-b:2222", "host-c:2222"],
            2,
            {"tasks": ["chief 0", "worker 0", "worker 1"]},
            True,
        )
    ]


def test_a_one_process_cluster_says_so_rather_than_that_it_waits():
    assert distribute.cluster_wait_line({"worker": ["host-a:2222"]}, "worker", 0) == (
        "cluster: worker 0 of TF_CONFIG (host-a:2222) is its only process"
    )


def _cluster_of_three(monkeypatch):
    cluster = {"chief": ["host-a:2222"], "worker": ["host-b:2222", "host-c:2222"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    monkeypatch.setattr(rendezvous, "meet", lambda processes, index, **kwargs: None)


def _strategy_raising(monkeypatch, error, runtime=None, seen=None):
    """The one-line error of `create_strategy("multi_worker")` for worker 1 of a chief and two
    workers where creating TensorFlow's strategy raises `error`; `seen` gets the coordination
    service configured by then."""
    _cluster_of_three(monkeypatch)

    def strategy_that_raises():
        if seen is not None:
            seen.append(runtime.coordination_service)
        raise error

    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", strategy_that_raises)
    with pytest.raises(distribute.StrategyError) as e:
        distribute.create_strategy("multi_worker")
    return one_line(e)


def test_tensorflow_s_own_wait_ends_at_the_limit_with_one_line(monkeypatch, runtime):
    """After the meeting at process 0, a process that died before TensorFlow's own wait was
    complete left the others waiting in native code for the coordination service's default hour.
    The service the strategy would make is configured first, with the meeting's limit on the
    registration and a barrier to register with (without the barrier process 0, the leader,
    waited on past the limit: tried with real processes, and tested below); the strategy's
    DeadlineExceededError at the limit is the command's one-line error."""
    seen = []
    error = tf.errors.DeadlineExceededError(None, None, "Barrier timed out. Id: [Init]Wait_for_all_tasks")
    assert _strategy_raising(monkeypatch, error, runtime, seen) == (
        "--strategy=multi_worker: TensorFlow's cluster did not form within 300 s after its 3 "
        "processes had started: check that each still runs and reaches chief 0 at host-a:2222, "
        "then rerun them all"
    )
    (service,) = seen
    assert service.service_type == "standalone"
    assert service.service_leader == "/job:chief/replica:0/task:0"  # TensorFlow's rule: the chief
    jobs = [(job.name, job.num_tasks) for job in service.coordinated_job_list]
    assert jobs == [("chief", 1), ("worker", 2)]
    assert service.cluster_register_timeout_in_ms == rendezvous.JOIN_TIMEOUT_S * 1000 == 300_000
    assert service.cluster_register_with_barrier


def test_a_process_whose_own_port_another_program_holds_ends_with_one_line(monkeypatch, runtime):
    """TensorFlow's server binds the process's own TF_CONFIG port after the meeting, which checks
    only process 0's: a port held by another program was a traceback ending in `UnknownError:
    Could not start gRPC server` (exit status 1; TensorFlow's error, as a held port gave it, tried
    by hand on a one-process cluster). Another UnknownError is not taken for it."""
    error = tf.errors.UnknownError(None, None, "Could not start gRPC server")
    assert _strategy_raising(monkeypatch, error) == (
        "--strategy=multi_worker: worker 1 (host-c:2222) cannot listen on port 2222: another "
        "program holds it; stop it or give TF_CONFIG a free port, then rerun every process"
    )
    with pytest.raises(tf.errors.UnknownError, match="something else"):
        _strategy_raising(monkeypatch, tf.errors.UnknownError(None, None, "something else"))


def test_a_coordination_service_configured_by_the_user_is_kept(monkeypatch, runtime):
    _cluster_of_three(monkeypatch)
    runtime.configure_coordination_service(service_type="standalone", heartbeat_timeout_in_ms=4000)
    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", lambda: "strategy")
    assert distribute.create_strategy("multi_worker") == "strategy"
    assert runtime.coordination_service.heartbeat_timeout_in_ms == 4000
    assert runtime.coordination_service.cluster_register_timeout_in_ms == 0
    assert not runtime.coordination_service.cluster_register_with_barrier


_LOWERED_LIMIT = textwrap.dedent("""
    import sys
    from keras_vit import commands
    from trainers import rendezvous
    rendezvous.JOIN_TIMEOUT_S = {limit}
    from trainers import finetune
    sys.argv = ["finetune", *{args!r}]
    commands.exit_with(finetune.main)
""")


@pytest.mark.slow  # a trainer child on the tf engine that waits 5 s: about 20 s on 2 cores
def test_process_0_whose_peer_died_after_the_meeting_ends_at_the_limit(tmp_path):
    """The real wait: process 0 of two (TensorFlow's coordination service's leader) meets its
    peer, which then stops before TensorFlow's wait (here: it never starts TensorFlow). With the
    limit lowered to 5 s, process 0 ends with the one-line error and exit status 2, nothing
    written, where it waited for an hour before (and past the limit without the barrier)."""
    workers = [f"localhost:{p}" for p in free_ports(2)]
    tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}}
    workdir = str(tmp_path / "run")
    args = ["--strategy=multi_worker", f"--workdir={workdir}", *TINY_DIGITS_FLAGS]
    peer_met = []

    def peer_that_stops_after_the_meeting():
        rendezvous.meet(workers, 1, timeout_s=120)
        peer_met.append(time.monotonic())

    peer = threading.Thread(target=peer_that_stops_after_the_meeting, daemon=True)
    peer.start()
    # TensorFlow's lines hidden by the trainers' own start, as a user runs it.
    code = _LOWERED_LIMIT.format(limit=5, args=args)
    env = {"TF_CONFIG": json.dumps(tf_config)}
    proc = run_as_a_user(command_server.CODE, [code], env, timeout=240, fresh=True)
    ended = time.monotonic()
    peer.join(5)
    assert peer_met, "the peer never met process 0"
    assert 5 <= ended - peer_met[0] < 60, ended - peer_met[0]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == (
        "finetune: error: --strategy=multi_worker: TensorFlow's cluster did not form within 5 s "
        f"after its 2 processes had started: check that each still runs and reaches worker 0 at "
        f"{workers[0]}, then rerun them all\n"
    ), proc.stderr[-3000:]
    assert not os.path.exists(workdir)


_WORKER = textwrap.dedent("""
    import json
    from trainers import data, distribute
    first = distribute.create_strategy("multi_worker")
    print("DESCRIBE", distribute.describe(first), flush=True)
    spec = data.get_spec("digits")
    out = {}
    for name, training in (("train", True), ("test", False)):
        # Each pipeline as a run of its own (a sweep's rates): the second run's strategy is the
        # first's, where it met again and found process 0's port held by TensorFlow's server.
        strategy = distribute.create_strategy("multi_worker")
        print("SAME", strategy is first, flush=True)
        fn = data.make_input_fn(spec, name, image_size=8, global_batch_size=6, training=training, seed=7,
                                start_step=2 if training else 0)
        batches = []
        for _, batch in zip(range(4), data.distribute(strategy, fn)):
            batches.append([strategy.gather(t, axis=0).numpy().tolist() for t in batch])
        out[name] = batches
    print("BATCHES", json.dumps(out), flush=True)
""")


@pytest.mark.slow
def test_two_worker_processes_see_the_one_pipeline_global_batches(tmp_path):
    workers = [f"localhost:{p}" for p in free_ports(2)]
    procs, logs = [], []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        out, err = tmp_path / f"worker{index}.out", tmp_path / f"worker{index}.err"
        with open(out, "w") as stdout, open(err, "w") as stderr:
            procs.append(start_python_c(_WORKER, stdout, stderr, env={"TF_CONFIG": json.dumps(tf_config)}))
        logs.append((out, err))
    wait_all(procs, [err for _, err in logs], timeout=240)
    outputs = [out.read_text() for out, _ in logs]
    for stdout in outputs:
        assert "DESCRIBE MultiWorkerMirroredStrategy: 2 replica(s) on 2 worker(s)" in stdout
        assert stdout.count("SAME True") == 2, stdout
    results = [
        json.loads(line.split(" ", 1)[1])
        for stdout in outputs
        for line in stdout.splitlines()
        if line.startswith("BATCHES ")
    ]
    assert len(results) == 2 and results[0] == results[1]

    spec = data.get_spec("digits")
    for name, training in (("train", True), ("test", False)):
        fn = data.make_input_fn(
            spec,
            name,
            image_size=8,
            global_batch_size=6,
            training=training,
            seed=7,
            start_step=2 if training else 0,
        )
        expected = [batch for _, batch in zip(range(4), fn(None))]
        for got, want in zip(results[0][name], expected):
            for g, w in zip(got, want):
                np.testing.assert_allclose(np.array(g), w.numpy(), rtol=0, atol=1e-6)
