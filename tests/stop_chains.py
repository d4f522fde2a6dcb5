"""A two-process run's stops as one chain of reruns (tests/test_preemption.py and
tests/test_jax_engine_reliability.py, one engine each)."""

import os

from trainer_cli import (
    PREEMPTED,
    checkpoint_steps,
    kill_one_of_two,
    sigterm_to_the_second_at_each,
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
