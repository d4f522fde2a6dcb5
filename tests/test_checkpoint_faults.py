"""The faults of long runs around checkpoints, end to end (python -m trainers.finetune subprocesses).

A truncated newest checkpoint, every checkpoint truncated, a disk that fills up during a save (a
file-size limit everywhere, a small tmpfs where the test may mount one), a read-only checkpoint
folder, and SIGKILL at random moments. Every fault either resumes to the results of an
uninterrupted run or stops with one line, the right exit code, and the checkpoints on disk intact.
"""

import os
import random
import shutil
import subprocess
import time

import pytest
from trainer_cli import (
    CIFAR_RUN,
    checkpoint_steps,
    child_env,
    command,
    error_line,
    file_size_limited,
    read_results,
    run_cli,
    start_cli,
)

RUN = CIFAR_RUN
DATA = "ckpt-{}.data-00000-of-00001"
INDEX = "ckpt-{}.index"


# The data and the uninterrupted run are tests/session_data.py's, shared with test_finetune.py.
@pytest.fixture(scope="module")
def data_dir(cifar10_data_dir):
    return cifar10_data_dir


@pytest.fixture(scope="module")
def reference(cifar_reference):
    """An uninterrupted run: the results every recovered run must end with."""
    workdir = cifar_reference[0]
    assert checkpoint_steps(workdir) == [10, 20, 30]
    return workdir


def _args(data_dir, workdir):
    return RUN + [f"--data_dir={data_dir}", f"--workdir={workdir}"]


def _assert_same_results(a, b):
    assert a["steps"] == b["steps"]
    assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)
    for split in b["eval"]:
        assert a["eval"][split]["loss"] == pytest.approx(b["eval"][split]["loss"], rel=1e-6)
        assert a["eval"][split]["accuracy"] == b["eval"][split]["accuracy"]


def _killed_after_step_10(reference, workdir):
    """The workdir of a run killed between its checkpoints of step 10 and 20."""
    shutil.copytree(reference, workdir)
    folder = os.path.join(workdir, "checkpoints")
    for step in (20, 30):
        os.remove(os.path.join(folder, DATA.format(step)))
        os.remove(os.path.join(folder, INDEX.format(step)))
    with open(os.path.join(folder, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-10"\nall_model_checkpoint_paths: "ckpt-10"\n')
    for name in ("results.json", "model.npz"):
        os.remove(os.path.join(workdir, name))
    return folder


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _assert_only_step_10(folder, reference):
    """The folder holds checkpoint 10, byte for byte as written, and nothing a save left behind."""
    assert sorted(os.listdir(folder)) == ["checkpoint", DATA.format(10), INDEX.format(10)]
    for name in (DATA.format(10), INDEX.format(10)):
        assert _read(os.path.join(folder, name)) == _read(os.path.join(reference, "checkpoints", name))


@pytest.mark.slow
def test_a_truncated_newest_checkpoint_is_moved_aside_and_the_run_resumes_from_the_previous(
    data_dir, reference, tmp_path
):
    workdir = str(tmp_path / "run")
    shutil.copytree(reference, workdir)
    os.remove(os.path.join(workdir, "results.json"))
    newest = os.path.join(workdir, "checkpoints", DATA.format(30))
    with open(newest, "r+b") as f:  # a copy cut short
        f.truncate(os.path.getsize(newest) // 3)
    truncated = _read(newest)
    proc = run_cli("finetune", _args(data_dir, workdir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if "cannot be read" in line]
    assert len(said) == 1 and "ckpt-30" in said[0] and "unreadable" in said[0], proc.stdout
    assert "at step 20." in proc.stdout
    # Moved aside, never deleted; the run wrote a new, readable step 30 in its place.
    aside = os.path.join(workdir, "checkpoints", "unreadable")
    assert _read(os.path.join(aside, DATA.format(30))) == truncated
    assert os.path.exists(os.path.join(aside, INDEX.format(30)))
    assert checkpoint_steps(workdir) == [10, 20, 30]
    _assert_same_results(read_results(workdir), read_results(reference))


@pytest.mark.slow  # 16 s on the 2-core Xeon: its reference run and a killed run
def test_a_save_killed_while_tensorflow_merges_its_files_is_dropped_and_the_run_resumes(
    data_dir, reference, tmp_path
):
    """SIGKILL while the save of step 20 merges its parts: ckpt-20_temp/ still there beside a
    ckpt-20.index cut short. The rerun once took that index for the only checkpoint, found it
    unreadable and stopped with exit 2; the save had not finished, so the run resumes from 10."""
    workdir = str(tmp_path / "run")
    folder = _killed_after_step_10(reference, workdir)
    saved = os.path.join(reference, "checkpoints")
    os.makedirs(os.path.join(folder, "ckpt-20_temp"))
    shutil.copy(os.path.join(saved, DATA.format(20)), os.path.join(folder, "ckpt-20_temp", "part-00000"))
    shutil.copy(os.path.join(saved, DATA.format(20)), os.path.join(folder, DATA.format(20)))
    with open(os.path.join(folder, INDEX.format(20)), "wb") as f:
        f.write(_read(os.path.join(saved, INDEX.format(20)))[:40])
    proc = run_cli("finetune", _args(data_dir, workdir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Resumed from" in proc.stdout and "at step 10." in proc.stdout, proc.stdout[-3000:]
    assert "cannot be read" not in proc.stdout
    assert checkpoint_steps(workdir) == [10, 20, 30]
    assert not os.path.exists(os.path.join(folder, "unreadable"))
    _assert_same_results(read_results(workdir), read_results(reference))


def test_with_every_checkpoint_unreadable_one_line_says_what_was_found_and_exits_2(
    data_dir, reference, tmp_path
):
    workdir = str(tmp_path / "run")
    shutil.copytree(reference, workdir)
    os.remove(os.path.join(workdir, "results.json"))
    folder = os.path.join(workdir, "checkpoints")
    for name in (DATA.format(10), INDEX.format(20), DATA.format(30)):  # data and index files alike
        with open(os.path.join(folder, name), "r+b") as f:
            f.truncate(100)
    before = {name: _read(os.path.join(folder, name)) for name in os.listdir(folder)}
    proc = run_cli("finetune", _args(data_dir, workdir))
    assert proc.returncode == 2
    line = error_line(proc)
    assert "no readable checkpoint" in line and "found 3" in line, line
    assert all(f"ckpt-{step}" in line for step in (10, 20, 30)), line
    # Nothing moved or deleted: the user decides (a good copy, or starting over).
    assert {name: _read(os.path.join(folder, name)) for name in os.listdir(folder)} == before
    assert not os.path.exists(os.path.join(workdir, "results.json"))


@pytest.mark.slow
def test_a_save_that_fails_stops_with_one_line_leaves_the_previous_checkpoint_and_resumes_exactly(
    data_dir, reference, tmp_path
):
    """A full disk, as any user can make one: a file-size limit below a checkpoint's size."""
    workdir = str(tmp_path / "run")
    folder = _killed_after_step_10(reference, workdir)
    size = os.path.getsize(os.path.join(folder, DATA.format(10)))
    proc = subprocess.run(
        file_size_limited(size // 2, command("finetune", _args(data_dir, workdir))),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    line = error_line(proc)
    assert f"{folder}/ckpt-20" in line and "file too large" in line, line
    assert f"{folder}/ckpt-10 and is intact" in line, line
    _assert_only_step_10(folder, reference)
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    # Room again: the rerun resumes from step 10 and ends as the uninterrupted run.
    resumed = run_cli("finetune", _args(data_dir, workdir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step 10." in resumed.stdout
    _assert_same_results(read_results(workdir), read_results(reference))


def _mount(*args):
    return subprocess.run(["mount", *args], capture_output=True, text=True)


def _pages(size):
    return -(-size // 4096) * 4096


def _room_for_two_checkpoints(reference):
    """Bytes for the state file and two of the run's checkpoints, and half of a third."""
    checkpoint = sum(
        _pages(os.path.getsize(os.path.join(reference, "checkpoints", name.format(10))))
        for name in (DATA, INDEX)
    )
    return 4096 + 2 * checkpoint + checkpoint // 2


@pytest.fixture
def small_tmpfs(tmp_path, reference):
    """A tmpfs with room for two of the run's checkpoints, not three, to hold a workdir's
    checkpoints/ (the rest of the workdir, whose files change as the trainers grow, is not on it)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root; the file-size-limit test covers a full disk without it")
    point = tmp_path / "run" / "checkpoints"
    point.mkdir(parents=True)
    size = _room_for_two_checkpoints(reference)
    proc = _mount("-t", "tmpfs", "-o", f"size={size // 1024}k", "tmpfs", str(point))
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()})")
    yield str(point)
    subprocess.run(["umount", str(point)], check=False)


@pytest.mark.slow
def test_a_full_tmpfs_warns_before_the_save_stops_with_one_line_and_resumes_once_it_grows(
    data_dir, reference, small_tmpfs
):
    folder = small_tmpfs
    workdir = os.path.dirname(folder)
    proc = run_cli("finetune", _args(data_dir, workdir))
    assert proc.returncode == 1
    line = error_line(proc)
    assert f"{folder}/ckpt-30" in line and "no space left" in line, line
    warnings = [w for w in proc.stderr.splitlines() if w.startswith("warning:")]
    assert len(warnings) == 1 and "ckpt-20" in warnings[0], proc.stderr[-3000:]
    assert sorted(os.listdir(folder)) == sorted(
        ["checkpoint", DATA.format(10), INDEX.format(10), DATA.format(20), INDEX.format(20)]
    )
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    assert _mount("-o", "remount,size=4m", small_tmpfs).returncode == 0
    resumed = run_cli("finetune", _args(data_dir, workdir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step 20." in resumed.stdout and "warning:" not in resumed.stderr
    _assert_same_results(read_results(workdir), read_results(reference))


@pytest.mark.slow
def test_a_read_only_checkpoint_folder_stops_the_run_with_one_line(data_dir, reference, tmp_path):
    workdir = str(tmp_path / "run")
    folder = _killed_after_step_10(reference, workdir)
    if os.geteuid() == 0:  # root writes through file modes: make the folder a read-only mount
        if _mount("--bind", folder, folder).returncode != 0:
            pytest.skip("cannot bind-mount here")
        remount = _mount("-o", "remount,ro,bind", folder)
        cause = "read-only file system"
    else:
        os.chmod(folder, 0o555)
        remount = None
        cause = "permission denied"
    try:
        if remount is not None and remount.returncode != 0:
            pytest.skip(f"cannot remount read-only here ({remount.stderr.strip()})")
        proc = run_cli("finetune", _args(data_dir, workdir))
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", folder], check=False)
        else:
            os.chmod(folder, 0o755)
    assert proc.returncode == 1
    line = error_line(proc)
    assert f"{folder}/ckpt-20" in line and cause in line, line
    _assert_only_step_10(folder, reference)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_rerun_each_time_ends_as_an_uninterrupted_run(
    data_dir, reference, tmp_path
):
    """Kills at uniformly drawn moments of each attempt's training (inside saves and evaluations
    too), restarting until one attempt finishes; the seed is printed so a failure can be replayed."""
    workdir = str(tmp_path / "run")
    args = _args(data_dir, workdir)
    seed = int(os.environ.get("KILL_SEED", random.SystemRandom().randrange(1 << 30)))
    rng = random.Random(seed)
    kills = []  # (seconds into training, checkpoints on disk after the kill)
    for attempt in range(4):
        log = tmp_path / f"attempt{attempt}.log"
        proc = start_cli("finetune", args, log_path=str(log))
        # Wait until this attempt trains (TensorFlow's start-up is not what is under test), then
        # kill within the next 1.2 s: about the time the 30 steps take on 2 cores.
        deadline = time.time() + 240
        while "img/s" not in log.read_text() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        delay = rng.uniform(0.0, 1.2)
        time.sleep(delay)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if os.path.exists(os.path.join(workdir, "results.json")):
            break  # this attempt finished before its kill
        kills.append((round(delay, 2), checkpoint_steps(workdir)))
    print(f"KILL_SEED={seed}: {len(kills)} kills (seconds into training, checkpoints left): {kills}")
    assert kills, f"KILL_SEED={seed}: the first attempt finished before its kill"
    final = run_cli("finetune", args)
    assert final.returncode == 0, final.stderr[-3000:]
    assert "Traceback" not in final.stderr
    _assert_same_results(read_results(workdir), read_results(reference))
    assert not [n for n in os.listdir(os.path.join(workdir, "checkpoints")) if n.endswith("_temp")]
