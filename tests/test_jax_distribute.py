"""trainers/jax_distribute.py: the jax engine's feed hands each device the element tf.distribute
would, pads an evaluation's last group with weight-0 rows, and refuses a device count JAX lacks.

JAX reads its CPU device count once, when it starts: the two-device checks run in a child.
"""

import json

import numpy as np
import pytest
import trainer_cli

from trainers.errors import StrategyError

FEED_CHECK = """
import json
import jax
import numpy as np
import tensorflow as tf
from trainers import jax_distribute

strategy = jax_distribute.JaxStrategy(jax.devices("cpu")[:2])
seen = {}

def input_fn(context):
    seen["context"] = [context.num_input_pipelines, context.input_pipeline_id, context.num_replicas_in_sync]
    # Five per-replica batches of 2 rows: rows of element k hold the value k.
    images = np.repeat(np.arange(5, dtype=np.float32), 2).reshape(5, 2, 1)
    weights = np.ones((5, 2), np.float32)
    return tf.data.Dataset.from_tensor_slices((images, images[..., 0].astype(np.int32), weights))

def train_fn(context):
    images = np.repeat(np.arange(5, dtype=np.float32), 2).reshape(5, 2, 1)
    return tf.data.Dataset.from_tensor_slices((images, images[..., 0].astype(np.int32)))

batches = list(strategy.distribute_datasets_from_function(input_fn))
train = list(strategy.distribute_datasets_from_function(train_fn))
out = {
    "context": seen["context"],
    "images": [np.asarray(b[0])[:, 0].tolist() for b in batches],
    "weights": [np.asarray(b[2]).tolist() for b in batches],
    "device_rows": [[np.asarray(s.data)[:, 0].tolist() for s in b[0].addressable_shards] for b in batches],
    "train": [np.asarray(b[0])[:, 0].tolist() for b in train],
}
try:
    jax_distribute.create_jax_strategy("cpu", cpu_devices=3)
except Exception as e:
    out["refusal"] = str(e)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def feed():
    env = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    proc = trainer_cli.run_python_c(FEED_CHECK, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_each_device_gets_the_next_per_replica_batch(feed):
    # One pipeline (one process) of a two-replica run, as tf.distribute's InputContext says.
    assert feed["context"] == [1, 0, 2]
    # Element 2k on device 0, element 2k + 1 on device 1, as MirroredStrategy hands them out.
    assert feed["device_rows"][:2] == [[[0.0, 0.0], [1.0, 1.0]], [[2.0, 2.0], [3.0, 3.0]]]


def test_an_evaluation_tail_is_padded_with_weight_zero(feed):
    assert feed["images"] == [[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 4, 4]]
    assert feed["weights"] == [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]]
    assert np.sum(feed["weights"]) == 10  # every example counted once


def test_a_training_tail_that_fills_no_step_is_dropped(feed):
    assert feed["train"] == [[0, 0, 1, 1], [2, 2, 3, 3]]


def test_more_cpu_devices_than_jax_started_with_is_one_line(feed):
    assert feed["refusal"] == (
        "--cpu_devices=3 but JAX started with 2 CPU device(s): pass --cpu_devices on the trainer's "
        "command line, or set XLA_FLAGS=--xla_force_host_platform_device_count=3 before JAX is imported"
    )


def _joined(monkeypatch, tf_config):
    """What `_initialize` gives jax.distributed.initialize and the meeting for `tf_config`."""
    import jax

    from trainers import jax_distribute, rendezvous

    met, joined = [], []
    monkeypatch.setattr(
        rendezvous, "meet", lambda processes, index, **kwargs: met.append((processes, index, kwargs))
    )
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: joined.append(kwargs))
    monkeypatch.setattr(jax_distribute, "_CLUSTER", {"coordinator": "", "names": []})
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    jax_distribute._initialize()
    return met, joined, jax_distribute._CLUSTER


@pytest.mark.parametrize("task, process", [(("chief", 0), 0), (("worker", 0), 1), (("worker", 1), 2)])
def test_a_chief_in_tf_config_is_process_0_as_on_the_tf_engine(monkeypatch, task, process):
    """The jax engine read only cluster.worker and task.index: with a chief in TF_CONFIG (the
    training guide's `worker 0 (or chief)`), the chief took worker 0's place and address, ran
    the whole run alone as a one-process cluster, and worker 0 ended in a port clash (tried by
    hand). Its processes are now the tf engine's, numbered as there: the chief, then the workers."""
    cluster = {"chief": ["host-a:2222"], "worker": ["host-b:2222", "host-c:2222"]}
    kind, index = task
    met, joined, joined_cluster = _joined(
        monkeypatch, {"cluster": cluster, "task": {"type": kind, "index": index}}
    )
    processes = ["host-a:2222", "host-b:2222", "host-c:2222"]
    assert met == [(processes, process, {"tasks": ["chief 0", "worker 0", "worker 1"]})]
    assert [(j["coordinator_address"], j["num_processes"], j["process_id"]) for j in joined] == [
        ("host-a:2222", 3, process)
    ]
    assert {k: joined_cluster[k] for k in ("coordinator", "names")} == {
        "coordinator": "host-a:2222",
        "names": processes,
    }


@pytest.mark.parametrize(
    "cluster, task",
    [
        ({"worker": ["host-b:2222"]}, {"type": "chief", "index": 0}),
        ({"worker": ["host-b:2222"], "ps": ["host-p:2222"]}, {"type": "worker", "index": 0}),
    ],
)
def test_a_task_not_in_the_cluster_is_the_tf_engines_one_line(monkeypatch, cluster, task):
    """TF_CONFIG is read by the tf engine's function (trainers/distribute.py's read_tf_config,
    whose tests hold its refusals): the same line on both engines."""
    with pytest.raises(StrategyError) as e:
        _joined(monkeypatch, {"cluster": cluster, "task": task})
    assert str(e.value).startswith("invalid TF_CONFIG (ValueError: ")
    assert "\n" not in str(e.value)


def test_joining_a_cluster_says_what_it_waits_for_and_how_long(monkeypatch, capsys):
    """jax.distributed.initialize waits for every process of TF_CONFIG to start: a process that
    never started held the others silent for five minutes, after which JAX's client ended them
    with its own fatal error. The wait is now said first, with its limit, past which the process
    ends with its one-line error (trainers/join_deadline.py), a minute before JAX's limit. The
    processes meet first in Python (trainers/rendezvous.py), where signals stop the wait."""
    import jax

    from trainers import jax_distribute, join_deadline, preemption, rendezvous

    met = []
    monkeypatch.setattr(
        rendezvous,
        "meet",
        lambda processes, index, **kwargs: met.append((processes, index, kwargs, preemption._unread())),
    )

    limits = []
    real_limit = join_deadline.ends_the_process_after
    monkeypatch.setattr(
        join_deadline,
        "ends_the_process_after",
        lambda seconds, message: limits.append((seconds, message)) or real_limit(seconds, message),
    )

    workers = ["host-a:2222", "host-b:2222", "host-c:2222"]
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 2}})
    )
    joined = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: joined.append(kwargs))
    monkeypatch.setattr(jax_distribute, "_CLUSTER", {"coordinator": "", "names": []})
    with preemption.watching(reads=True):  # a run's: signals stop the meeting at once all the same
        jax_distribute._initialize()
    assert joined[0]["initialization_timeout"] == jax_distribute.JAX_JOIN_TIMEOUT_S == 360
    assert (joined[0]["coordinator_address"], joined[0]["process_id"]) == ("host-a:2222", 2)
    assert capsys.readouterr().out == (
        "cluster: worker 2 of TF_CONFIG (host-c:2222) waits for its 3 processes to start; "
        "Ctrl-C or SIGTERM stops the wait, which gives up after 300 s\n"
    )
    assert met == [(workers, 2, {"tasks": ["worker 0", "worker 1", "worker 2"]}, True)]
    assert limits == [
        (
            jax_distribute.JOIN_TIMEOUT_S,
            "--strategy=multi_worker: JAX's cluster did not form within 300 s after its 3 processes "
            "had started: check that each still runs and reaches process 0 at host-a:2222, then "
            "rerun them all",
        )
    ]


def test_a_later_run_shares_the_cluster_and_another_tf_config_is_one_line(monkeypatch):
    """A process joins one JAX cluster: a later run with the same TF_CONFIG (a sweep's next rate)
    shares it without joining again, and one with another TF_CONFIG is the tf engine's line, where
    it ran on silently in the first cluster."""
    import jax

    from trainers import jax_distribute

    first = json.dumps({"cluster": {"worker": ["host-a:2222"]}, "task": {"type": "worker", "index": 0}})
    joined = {"coordinator": "host-a:2222", "names": ["host-a:2222"], "tf_config": first}
    monkeypatch.setattr(jax_distribute, "_CLUSTER", joined)
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(jax_distribute, "_initialize", lambda: pytest.fail("joined a second time"))
    monkeypatch.setenv("TF_CONFIG", first)
    jax_distribute._join_cluster()
    monkeypatch.setenv("TF_CONFIG", first.replace("host-a", "host-b"))
    with pytest.raises(StrategyError) as e:
        jax_distribute._join_cluster()
    assert str(e.value) == jax_distribute.ANOTHER_CLUSTER
