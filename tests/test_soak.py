"""A soak run: thousands of steps with evaluations and checkpoints, the process's memory sampled.

A leak of a few kilobytes a step (a tf.function retraced per loop call, summaries or iterators
piling up, checkpoint objects kept) kills a week-long run; over 4,000 steps it shows as growth of
the process's anonymous memory. Progress is read from the checkpoints on disk, not from the console lines.
"""

import os
import statistics
import time

import pytest
from fixtures import TINY_DIGITS_FLAGS
from trainer_cli import checkpoint_steps, read_results, start_cli

STEPS, EVERY = 4000, 250
SOAK = [
    "--dataset=digits",
    *TINY_DIGITS_FLAGS,
    "--batch_size=16",
    f"--total_steps={STEPS}",
    "--warmup_steps=50",
    "--steps_per_loop=10",
    f"--eval_every={EVERY}",
    f"--checkpoint_every={EVERY}",
]


def _heap_bytes(pid):
    """The process's anonymous memory, resident or swapped out: what a leak grows. (VmRSS also
    counts the pages of the mapped libraries, which the kernel drops and reloads as other
    processes need memory, so it moves by hundreds of megabytes on a busy machine.)"""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value
    return (int(fields["RssAnon"].split()[0]) + int(fields.get("VmSwap", "0 kB").split()[0])) * 1024


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads resident memory from /proc")
def test_memory_stays_flat_through_a_long_run(tmp_path):
    workdir = str(tmp_path / "run")
    # A fresh interpreter: the memory measured is the command's own, none shared with a server's.
    proc = start_cli(
        "finetune", SOAK + [f"--workdir={workdir}"], log_path=str(tmp_path / "soak.log"), fresh=True
    )
    samples = []  # (newest checkpoint step, anonymous memory in bytes)
    deadline = time.time() + 600
    try:
        while proc.poll() is None and time.time() < deadline:
            steps = checkpoint_steps(workdir)
            try:
                samples.append((steps[-1] if steps else 0, _heap_bytes(proc.pid)))
            except (OSError, KeyError):
                break  # the process just ended
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.wait() == 0, (tmp_path / "soak.log").read_text()[-3000:]
    assert read_results(workdir)["steps"] == STEPS
    # From the second evaluation on (the first one's buffers, the checkpoint writer and the
    # evaluation function exist by then) to the last stretch of training.
    start = [rss for step, rss in samples if 2 * EVERY <= step < 4 * EVERY]
    end = [rss for step, rss in samples if STEPS - 4 * EVERY <= step < STEPS]
    assert len(start) >= 5 and len(end) >= 5, f"too few samples: {len(start)}, {len(end)}"
    growth = statistics.median(end) / statistics.median(start) - 1
    peak = max(rss for step, rss in samples if step >= 2 * EVERY) / statistics.median(start) - 1
    print(
        f"anonymous memory (resident + swapped): {statistics.median(start) / 2**20:.0f} MiB "
        f"at steps {2 * EVERY}-{4 * EVERY}, "
        f"{statistics.median(end) / 2**20:.0f} MiB at steps {STEPS - 4 * EVERY}-{STEPS} "
        f"({growth:+.1%}; peak {peak:+.1%}); {len(samples)} samples"
    )
    # A leak grows on; warm-up levels off: the last quarter holds the third quarter's level.
    third = [rss for step, rss in samples if STEPS // 2 <= step < 3 * STEPS // 4]
    last = [rss for step, rss in samples if 3 * STEPS // 4 <= step < STEPS]
    late = statistics.median(last) / statistics.median(third) - 1
    print(f"last quarter against the third: {late:+.1%}")
    assert growth < 0.05
    assert late < 0.02
