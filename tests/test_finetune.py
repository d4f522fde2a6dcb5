"""python -m trainers.finetune end to end on fake TFDS data with a tiny ViT (subprocesses).

One uninterrupted reference run is shared; the other tests compare against it: two replicas,
two worker processes, kill -9 and resume. Each run takes ~15-25 s on 2 CPU cores.
"""

import json
import os
import shutil
import signal
import time

import pytest
from trainer_cli import (
    CIFAR_RUN,
    TINY_MODEL,
    checkpoint_steps,
    free_ports,
    plugin_tags,
    read_results,
    run_cli,
    scalar_tags,
    start_cli,
)

# The clip binds throughout (checked below): resumed and re-distributed runs are compared
# through a clipped update.
RUN = CIFAR_RUN
CLIP = float(next(flag.split("=")[1] for flag in RUN if flag.startswith("--grad_norm_clip=")))


# The data and the reference run are tests/session_data.py's, shared with test_checkpoint_faults.py.
@pytest.fixture(scope="module")
def data_dir(cifar10_data_dir):
    return cifar10_data_dir


@pytest.fixture(scope="module")
def reference(cifar_reference):
    return cifar_reference


def _assert_same_results(a, b, rel):
    assert a["steps"] == b["steps"]
    assert a["train_loss"] == pytest.approx(b["train_loss"], rel=rel)
    assert a["eval"].keys() == b["eval"].keys()
    for split in a["eval"]:
        assert a["eval"][split]["loss"] == pytest.approx(b["eval"][split]["loss"], rel=rel)
        assert a["eval"][split]["accuracy"] == pytest.approx(b["eval"][split]["accuracy"], abs=1e-9)


@pytest.mark.slow
def test_trains_evaluates_logs_and_checkpoints(reference):
    workdir, proc = reference
    results = read_results(workdir)
    assert results["steps"] == 30 and results["dataset"] == "cifar10"
    # cifar10 preset splits: minival = train[98%:] (4 images), test = 100 images; chance is 10 %.
    assert results["eval"]["test"]["examples"] == 100
    assert results["eval"]["minival"]["examples"] == 4
    assert results["eval"]["test"]["accuracy"] >= 0.5
    assert results["skipped_images"] == 0 and results["wall_time_s"] > 0
    config = json.load(open(os.path.join(workdir, "config.json")))
    assert (
        config["train_split"] == "train[:98%]" and config["total_steps"] == 30 and config["hidden_size"] == 32
    )
    assert checkpoint_steps(workdir) == [10, 20, 30]
    assert os.path.getsize(os.path.join(workdir, "model.npz")) > 0
    train = scalar_tags(os.path.join(workdir, "train"))
    # Step 1 is the first loop call (it compiles the step): its throughput is not the run's.
    for tag in ("loss", "learning_rate", "grad_norm"):
        assert [s for s, _ in train[tag]] == [1, 5, 10, 15, 20, 25, 30], tag
    for tag in ("images_per_second", "images_per_second_per_core"):
        assert [s for s, _ in train[tag]] == [5, 10, 15, 20, 25, 30], tag
    assert min(v for _, v in train["grad_norm"]) > CLIP  # the gradient norm before the clip
    assert train["loss"][-1][1] < train["loss"][0][1]
    evals = scalar_tags(os.path.join(workdir, "eval"))
    assert [s for s, _ in evals["test/accuracy"]] == [10, 20, 30]
    assert evals["test/accuracy"][-1][1] == pytest.approx(results["eval"]["test"]["accuracy"])
    assert "minival/loss" in evals
    assert plugin_tags(os.path.join(workdir, "eval"), "images")
    assert plugin_tags(os.path.join(workdir, "train"), "hparams")
    assert "img/s" in proc.stdout and "ETA" in proc.stdout


@pytest.mark.slow
def test_rerun_of_a_finished_run_reports_the_same(reference, tmp_path):
    workdir = str(tmp_path / "copy")
    shutil.copytree(reference[0], workdir)
    os.remove(os.path.join(workdir, "results.json"))
    proc = run_cli("finetune", RUN + [f"--data_dir={_data_dir(reference)}", f"--workdir={workdir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Resumed" in proc.stdout
    _assert_same_results(read_results(workdir), read_results(reference[0]), rel=1e-6)


def _data_dir(reference):
    return json.load(open(os.path.join(reference[0], "config.json")))["data_dir"]


@pytest.fixture(scope="module")
def two_replicas(data_dir, reference, tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("two") / "run")
    proc = run_cli("finetune", RUN + [f"--data_dir={data_dir}", f"--workdir={workdir}", "--cpu_devices=2"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_results(workdir)


@pytest.mark.slow
def test_two_replicas_match_one(reference, two_replicas):
    assert two_replicas["replicas"] == 2
    _assert_same_results(two_replicas, read_results(reference[0]), rel=1e-4)


@pytest.mark.slow
def test_two_workers_match_two_replicas(data_dir, two_replicas, tmp_path):
    workdir = str(tmp_path / "run")
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(
            start_cli(
                "finetune",
                RUN + [f"--data_dir={data_dir}", f"--workdir={workdir}", "--strategy=multi_worker"],
                env={"TF_CONFIG": tf_config},
                log_path=str(tmp_path / f"worker{index}.log"),
            )
        )
    codes = [p.wait(timeout=400) for p in procs]
    logs = [open(tmp_path / f"worker{i}.log").read() for i in range(2)]
    assert codes == [0, 0], [log[-2000:] for log in logs]
    # Only the chief prints the banner and progress; no worker prints AutoGraph's warnings.
    assert "model:    " in logs[0] and "loss" in logs[0]
    assert "model:    " not in logs[1] and "loss" not in logs[1], logs[1][-2000:]
    assert not any("AutoGraph" in log for log in logs)
    results = read_results(workdir)
    assert results["replicas"] == 2
    _assert_same_results(results, two_replicas, rel=1e-4)
    assert not [n for n in os.listdir(workdir) if n.startswith(".worker_")]


@pytest.mark.slow
def test_kill_after_a_checkpoint_then_resume_gives_the_same_results(data_dir, reference, tmp_path):
    workdir = str(tmp_path / "run")
    args = RUN + [f"--data_dir={data_dir}", f"--workdir={workdir}"]
    proc = start_cli("finetune", args, log_path=str(tmp_path / "killed.log"))
    deadline = time.time() + 240
    while not checkpoint_steps(workdir) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.kill()  # SIGKILL: no handler runs
    proc.wait()
    done = checkpoint_steps(workdir)
    assert done and done[-1] < 30, "the run must be killed between checkpoints"
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    resumed = run_cli("finetune", args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"at step {done[-1]}" in resumed.stdout
    _assert_same_results(read_results(workdir), read_results(reference[0]), rel=1e-6)


@pytest.mark.slow  # 15 s: a child imports TensorFlow and trains
def test_sigterm_saves_a_checkpoint_and_exits_zero(data_dir, tmp_path):
    workdir = str(tmp_path / "run")
    args = RUN + [
        f"--data_dir={data_dir}",
        f"--workdir={workdir}",
        "--total_steps=100000",
        "--warmup_steps=5",
        "--checkpoint_every=0",
        "--eval_every=0",
        "--steps_per_loop=2",
    ]
    log = tmp_path / "sigterm.log"
    proc = start_cli("finetune", args, log_path=str(log))
    deadline = time.time() + 240
    while "img/s" not in log.read_text() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    assert time.time() - sent < 30
    steps = checkpoint_steps(workdir)
    assert len(steps) == 1 and 0 < steps[0] < 100000
    assert "SIGTERM" in log.read_text()
    assert not os.path.exists(os.path.join(workdir, "results.json"))


def test_diverging_loss_stops_and_keeps_the_last_good_checkpoint(data_dir, reference, tmp_path):
    workdir = str(tmp_path / "run")
    shutil.copytree(reference[0], workdir)
    before = open(os.path.join(workdir, "results.json")).read()
    # Resume the finished 30-step run for 20 more steps at an absurd learning rate.
    proc = run_cli(
        "finetune",
        RUN
        + [
            f"--data_dir={data_dir}",
            f"--workdir={workdir}",
            "--total_steps=50",
            "--base_lr=1e38",
            "--grad_norm_clip=0",
            "--allow_config_change",  # other settings than the finished run's, on purpose
        ],
    )
    assert proc.returncode == 1
    message = [line for line in proc.stderr.splitlines() if line.startswith("finetune: error:")]
    assert len(message) == 1 and "loss became" in message[0] and "ckpt-30" in message[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert checkpoint_steps(workdir) == [10, 20, 30]
    assert open(os.path.join(workdir, "results.json")).read() == before


@pytest.mark.slow
@pytest.mark.parametrize("fake_tfds_dir", [("oxford_iiit_pet", 4, 2)], indirect=True, ids=["pets_4_2"])
def test_oxford_iiit_pet_preset_splits(tmp_path, fake_tfds_dir):
    data_dir = fake_tfds_dir
    workdir = str(tmp_path / "run")
    proc = run_cli(
        "finetune",
        TINY_MODEL
        + [
            "--dataset=oxford_iiit_pet",
            f"--data_dir={data_dir}",
            f"--workdir={workdir}",
            "--batch_size=32",
            "--total_steps=40",
            "--warmup_steps=5",
            "--base_lr=0.1",
            "--steps_per_loop=10",
            "--eval_every=0",
            "--checkpoint_every=0",
            "--examples_per_class=2",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = read_results(workdir)
    # --examples_per_class subsamples training only.
    # Preset: train[:90%] / minival train[90%:] / test; 37 classes, chance 2.7 %.
    assert results["eval"]["test"]["examples"] == 74
    assert results["eval"]["minival"]["examples"] == 15
    assert results["eval"]["test"]["accuracy"] > 0.1
    assert checkpoint_steps(workdir) == [40]


def _write_folder_dataset(root):
    """Two classes told apart by colour, 24 train and 6 test images each, plus one truncated JPEG."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in (("train", 24), ("test", 6)):
        for label, colour in (("blue", (20, 40, 220)), ("red", (220, 30, 30))):
            folder = os.path.join(root, split, label)
            os.makedirs(folder)
            for i in range(count):
                pixels = np.clip(np.array(colour) + rng.normal(0, 25, (40, 40, 3)), 0, 255)
                Image.fromarray(pixels.astype("uint8")).save(os.path.join(folder, f"{i}.jpg"))
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((40, 40, 3), "uint8")).save(buffer, format="JPEG")
    with open(os.path.join(root, "train", "red", "truncated.jpg"), "wb") as f:
        f.write(buffer.getvalue()[: len(buffer.getvalue()) // 3])


def test_folder_dataset_with_a_truncated_jpeg_skips_it_and_trains_on(tmp_path):
    root = str(tmp_path / "images")
    _write_folder_dataset(root)
    workdir = str(tmp_path / "run")
    proc = run_cli(
        "finetune",
        TINY_MODEL
        + [
            f"--dataset=folder:{root}",
            "--train_split=train",
            "--eval_splits=test=test",
            "--batch_size=16",
            "--total_steps=20",
            "--warmup_steps=2",
            "--base_lr=0.1",
            "--steps_per_loop=5",
            "--eval_every=0",
            "--checkpoint_every=0",
            f"--workdir={workdir}",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = read_results(workdir)
    assert results["skipped_images"] == 1
    assert results["steps"] == 20
    assert results["eval"]["test"]["examples"] == 12
    assert results["eval"]["test"]["accuracy"] >= 0.9  # chance: 0.5
