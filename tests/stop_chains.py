"""A two-process run's stops as one chain of reruns (tests/test_preemption.py and
tests/test_jax_engine_reliability.py, one engine each), and the stops it is made of: a SIGTERM
to the second process at a moment, a SIGKILL to it after a checkpoint."""

import os
import re
import signal
import time

from trainer_cli import (
    PREEMPTED,
    SAVED_AT,
    checkpoint_steps,
    start_cluster,
    stop_step_of_two,
    wait_all,
)


def stops_of_two(args, workdir, tmp_path, total, lost_after_s):
    """One chain of a two-process run's stops in `workdir`, each run the rerun of the one before:
    a SIGTERM to the second process at the start (the banner's first line) and once training is
    under way (the first progress line), a SIGKILL to it after a newer checkpoint, a SIGTERM to it
    at the last loop call, then a rerun nobody stops. Checks what every engine keeps at each
    (sigterm_to_the_second_at_each, kill_one_of_two; no results.json and no per-process scratch
    after the middle stop; each rerun resumes from the stop before; only the chief reports its
    resume; no preemption claimed unasked) and returns what each engine checks its own way:
    {"start", "end": the outputs of the two, "step": the middle stop's step}."""
    markers = ("model:", f"/{total}  loss")
    (_, start), (_, middle) = sigterm_to_the_second_at_each(args, markers, tmp_path)
    step = stop_step_of_two(middle)
    assert checkpoint_steps(workdir)[-1] == step
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    assert not [n for n in os.listdir(workdir) if n.startswith(".worker_")]

    procs, logs = start_cluster(tmp_path, args, "killed")
    killed_out, named = kill_one_of_two(procs, logs, workdir, lost_after_s, after_step=step)
    assert f"at step {step}." in killed_out and not PREEMPTED.search(killed_out)

    (tmp_path / "end").mkdir()  # its logs apart from the first two runs'
    ((_, end),) = sigterm_to_the_second_at_each(args, (f"step {total}/{total}",), tmp_path / "end")
    assert f"Resumed from {named} at step" in end[0]

    final = wait_all(*start_cluster(tmp_path, args, "resumed"))
    assert f"at step {total}." in final[0]
    assert not PREEMPTED.search(final[0]) and not PREEMPTED.search(final[1])
    assert "Resumed" not in final[1]  # only the chief reports
    return {"start": start, "end": end, "step": step}


# The line of a process whose partner in a run was lost (trainers/peer_watch.py); group 1 the
# lost process, group 2 the checkpoint it names.
LOST = re.compile(
    r"^finetune: error: process (\d+) of 2 \([^)]*\) is gone \(its connection closed\); "
    r"the last checkpoint is (\S+)\. Stopping this process too: rerun the same command",
    re.M,
)


def kill_one_of_two(procs, logs, workdir, lost_after_s, timeout=240, after_step=-1):
    """SIGKILLs the second of two processes once the run has a checkpoint after `after_step` (the
    step it resumed from); returns (the survivor's output, the checkpoint its line names) after
    checking that it stopped within `lost_after_s` with exit code 1, its one line, and nothing
    half-written."""
    deadline = time.time() + timeout
    try:
        while checkpoint_steps(workdir)[-1:] <= [after_step]:
            assert time.time() < deadline and all(p.poll() is None for p in procs), [
                log.read_text()[-2000:] for log in logs
            ]
            time.sleep(0.05)
        procs[1].kill()
        killed = time.time()
        code = procs[0].wait(timeout=lost_after_s + 60)
        seconds = time.time() - killed
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    out = logs[0].read_text()
    assert code == 1 and seconds < lost_after_s, (code, seconds, out[-3000:])
    found = LOST.findall(out)
    assert len(found) == 1 and found[0][0] == "1" and "Traceback" not in out, out[-3000:]
    named = found[0][1]
    folder = os.path.join(str(workdir), "checkpoints")
    assert named == os.path.join(folder, f"ckpt-{checkpoint_steps(workdir)[-1]}"), (named, os.listdir(folder))
    assert not [n for n in os.listdir(folder) if n.endswith("_temp") or n.startswith(".tmp")]
    assert not os.path.exists(os.path.join(str(workdir), "results.json"))
    print(f"survivor stopped {seconds:.1f} s after the kill, naming {named}")
    return out, named


def sigterm_to_the_second_at_each(args, markers, tmp_path, env=None, timeout=240):
    """sigterm_at_each for a run of two processes: the SIGTERM goes to the second process when the
    first (which prints the run's lines) shows the marker. Both must exit 0 with no traceback,
    agree on any step they saved, and the next run resume from it. Returns [(marker, outputs)]."""
    stops = []
    for number, marker in enumerate(markers):
        procs, logs = start_cluster(tmp_path, args, f"sigterm{number}_", env)
        deadline = time.time() + timeout
        try:
            while marker not in logs[0].read_text():
                assert all(p.poll() is None for p in procs) and time.time() < deadline, [
                    log.read_text()[-2000:] for log in logs
                ]
                time.sleep(0.02)
            procs[1].send_signal(signal.SIGTERM)
        except BaseException:
            for proc in procs:
                proc.kill()
                proc.wait()
            raise
        outputs = wait_all(procs, logs, timeout=180)
        assert not any("Traceback" in out for out in outputs), [out[-2000:] for out in outputs]
        saved = [SAVED_AT.findall(out) for out in outputs]
        assert saved[0] == saved[1] and len(saved[0]) <= 1, saved  # the same step, once
        if number and SAVED_AT.search(stops[-1][1][0]):
            assert f"at step {SAVED_AT.search(stops[-1][1][0]).group(1)}." in outputs[0], outputs[0][-2000:]
        stops.append((marker, outputs))
    return stops
