"""What every benchmark shares: timing, round-robin repeats, medians, tables, JSON, child processes.

A contestant is a name and a `step()` that runs one batch to completion (its result on the host).
`interleave` warms every contestant up first (compilation), then for each repeat times each
contestant once in turn, so a change of load on a shared machine hits all of them alike.
"""

import argparse
import datetime
import functools
import importlib.metadata
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from keras_vit import cpu_info, fileio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "docs", "benchmarks")
# The distributions whose versions a result records (the ones installed).
VERSIONS = (
    "tensorflow",
    "keras",
    "keras-hub",
    "torch",
    "timm",
    "jax",
    "onnxruntime",
    "onnxscript",
    "openvino",
)
# Peer name -> the modules it needs.
PEER_MODULES = {"keras-hub": ("keras_hub",), "timm": ("timm", "torch")}


class Contestant:
    """`name` as the table shows it; `build()` -> step, called once, before any timing;
    `framework` ("tf", "jax", "torch", "onnxruntime" or "openvino"): whose matmul peak its FLOP/s
    are compared with (none is measured for ONNX Runtime and OpenVINO); `switched_off`: the
    KERAS_VIT_* switch a keras_vit row runs with off, a measure of what that path gains, not a
    route a user would pick for speed."""

    def __init__(self, name, build, ours=False, framework="tf", switched_off=None):
        self.name, self.build, self.ours, self.framework = name, build, ours, framework
        self.switched_off = switched_off
        self.step = None
        self.compile_s = None


def missing_peer(peer):
    """None if `peer` ("keras-hub" or "timm") can be imported, else a one-line note."""
    absent = [m for m in PEER_MODULES[peer] if importlib.util.find_spec(m) is None]
    if not absent and peer == "timm" and "tensorflow" in sys.modules and "torch" not in sys.modules:
        # See benchmarks/contestants.py: PyTorch must load before TensorFlow.
        return "timm skipped: run the benchmark as its own process (python -m benchmarks...) to measure it"
    if not absent:
        return None
    return f'{peer} is not installed ({", ".join(absent)} missing): pip install -e ".[bench]"'


def time_step(step, min_seconds):
    """Seconds per call: calls `step` until `min_seconds` have passed (at least once)."""
    calls, start = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / calls


def interleave(contestants, repeats, min_seconds=0.5, warmup=1):
    """{name: [seconds per call of each repeat]}; the contestants take turns in every repeat.

    Once all are built, each runs one more untimed call in turn before the timed rounds: the
    calls just after the builds ran slowest. keras_vit's step, first in turn, took 6.3 s in the
    first round of a training run whose other rounds took 2.3 to 2.9 s, and the second
    contestant 5.5 s against 3.3 to 3.8 (2026-11-29, the family-25 EPYC); in the two runs
    before it keras_vit's first rounds took 5.8 and 5.2 s, its others 2.4 to 2.9."""
    for c in contestants:
        start = time.perf_counter()
        c.step = c.build()
        for _ in range(warmup):
            c.step()
        c.compile_s = time.perf_counter() - start
    for c in contestants:
        c.step()
    times = {c.name: [] for c in contestants}
    for _ in range(repeats):
        for c in contestants:
            timed = c.step.time if isinstance(c.step, ChildStep) else functools.partial(time_step, c.step)
            times[c.name].append(timed(min_seconds))
    for c in contestants:
        if isinstance(c.step, ChildStep):
            c.step.close()  # its model's memory back before the next case
    return times


# --- contestants in a child process -----------------------------------------------------------

_REPLY = "benchmark-reply: "


class ChildServer:
    """A child process `python -m module --serve` that builds steps and times them on request.

    For a contestant that cannot run in this process: Keras fixes its backend per process, so
    keras_vit on the PyTorch backend runs beside a TensorFlow parent this way. One child serves
    every case of a run (a process start with its imports costs seconds). Requests and replies
    are JSON lines; the child exits when this process closes its stdin (or exits)."""

    def __init__(self, module, env=None):
        self.module, self.env = module, env
        self.proc = None
        self._log = None

    def request(self, **message):
        if self.proc is None or self.proc.poll() is not None:
            self._log = tempfile.TemporaryFile(mode="w+")  # a pipe nobody reads could fill and block
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                text=True,
                env=child_env(self.env),
                cwd=ROOT,
            )
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(_REPLY):
                return json.loads(line[len(_REPLY) :])
        self._log.seek(0)
        tail = (self._log.read().strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{self.module} --serve exited {self.proc.wait()}: {tail}")

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None


class ChildStep:
    """A step built and run in a ChildServer's process. Calling it runs one step there;
    `time(min_seconds)` times a round there (time_step), so the pipe is not in the timing."""

    def __init__(self, server, *args):
        self.server = server
        self.id = server.request(op="build", args=list(args))["id"]

    def __call__(self):
        self.server.request(op="step", id=self.id)

    def time(self, min_seconds):
        return self.server.request(op="time", id=self.id, min_seconds=min_seconds)["seconds"]

    def close(self):
        self.server.request(op="drop", id=self.id)


def serve(build):
    """The child's side of ChildServer: `build(*args)` -> step, for each request on stdin."""
    steps = {}
    for line in sys.stdin:
        message = json.loads(line)
        reply = {}
        if message["op"] == "build":
            reply["id"] = len(steps) + 1
            steps[reply["id"]] = build(*message["args"])
        elif message["op"] == "step":
            steps[message["id"]]()
        elif message["op"] == "time":
            reply["seconds"] = time_step(steps[message["id"]], message["min_seconds"])
        elif message["op"] == "drop":
            del steps[message["id"]]
        print(_REPLY + json.dumps(reply), flush=True)


def median(values):
    return statistics.median(values)


def peak_rss_mb():
    """This process's peak resident memory so far, in MB: VmHWM, which, unlike getrusage's
    ru_maxrss, starts anew at exec (a child would otherwise report its parent's peak)."""
    return _status_mb("VmHWM")


def rss_mb():
    """This process's resident memory now, in MB."""
    return _status_mb("VmRSS")


def _status_mb(field):
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise OSError(f"/proc/self/status has no {field}")


def child_env(env=None):
    """This process's environment with `env` over it, for a child that imports the repository."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env


def run_child(module, argv, env=None):
    """Runs `python -m module argv` and returns the JSON object its last output line holds."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *argv], capture_output=True, text=True, env=child_env(env), cwd=ROOT
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def run_watched(command, limit_bytes, env=None, poll_s=0.05):
    """Runs `command` (a list) and polls the resident memory of it and every process it starts.

    Returns {"returncode", "stdout", "stderr", "last_line" (of stderr), "seconds", "killed",
    "peak_bytes"}: the peak is the largest sum over the process tree seen by a poll. Above
    `limit_bytes` the whole tree is killed (killed=True), so that an export that would take the
    machine's memory ends alone. Linux only (/proc)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(
            command, stdout=out, stderr=err, text=True, env=child_env(env), cwd=ROOT, start_new_session=True
        )
        peak, killed = 0, False
        while proc.poll() is None:
            resident = tree_rss_bytes(proc.pid)
            peak = max(peak, resident)
            if resident > limit_bytes and not killed:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
            time.sleep(poll_s)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    lines = [line for line in stderr.strip().splitlines() if line.strip()] or ["no output"]
    return {
        "returncode": proc.returncode,
        "stdout": stdout,
        "stderr": stderr,
        "last_line": lines[-1],
        "seconds": time.perf_counter() - start,
        "killed": killed,
        "peak_bytes": peak,
    }


class PeakPoller:
    """`with PeakPoller(pid) as p:` polls tree_rss_bytes(pid, anonymous) in a thread every
    `poll_s` while the block runs; then p.start_bytes (at entry) and p.peak_bytes (the largest)."""

    def __init__(self, pid, anonymous=False, poll_s=0.02):
        self.pid, self.anonymous, self.poll_s = pid, anonymous, poll_s
        self.start_bytes = self.peak_bytes = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self.start_bytes = self.peak_bytes = tree_rss_bytes(self.pid, self.anonymous)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, tree_rss_bytes(self.pid, self.anonymous))

    def _poll(self):
        while not self._done.wait(self.poll_s):
            self.peak_bytes = max(self.peak_bytes, tree_rss_bytes(self.pid, self.anonymous))


def tree_rss_bytes(pid, anonymous=False):
    """The resident memory of process `pid` and all its descendants, in bytes (0 once it is gone).

    anonymous=True leaves out the resident pages of mapped files (the libraries' code, which the
    page cache may hold or drop, so that they vary from run to run): the memory a process
    allocated itself."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])  # the name may hold spaces
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(entry))
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        stack.extend(children.get(current, []))
        try:
            with open(f"/proc/{current}/statm", encoding="ascii") as f:
                _, resident, shared = f.read().split()[:3]
            total += (int(resident) - (int(shared) if anonymous else 0)) * _PAGE_SIZE
        except (OSError, IndexError, ValueError):
            pass
    return total


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def versions():
    found = {}
    for name in VERSIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def machine(cpuinfo=cpu_info.CPUINFO):
    """keras_vit.cpu_info's record of this CPU and its cores, with "python"."""
    return {**cpu_info.record(cpuinfo), "python": platform.python_version()}


def accelerator():
    """The first GPU's name as nvidia-smi gives it, or None where there is none."""
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    names = proc.stdout.strip().splitlines()
    return names[0].strip() if proc.returncode == 0 and names else None


def parser(description, name):
    """An argument parser with the flags every benchmark has."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=description)
    p.add_argument(
        "--repeats", type=int, default=5, help="timed rounds per contestant (the median is reported)"
    )
    p.add_argument("--min_seconds", type=float, default=0.5, help="each timed round runs at least this long")
    p.add_argument("--peers", default="keras-hub,timm", help="peers to measure: keras-hub, timm, or none")
    p.add_argument("--out", default=os.path.join(OUT_DIR, f"{name}.json"), help="where the JSON goes")
    return p


def peers(arg):
    chosen = [p.strip() for p in arg.split(",") if p.strip() and p.strip() != "none"]
    unknown = sorted(set(chosen) - set(PEER_MODULES))
    if unknown:
        raise SystemExit(f"error: unknown peer {unknown[0]!r}: choose from {', '.join(PEER_MODULES)} or none")
    return chosen


def result(name, argv, settings):
    """The common head of a benchmark's JSON."""
    return {
        "benchmark": name,
        "command": " ".join(["python -m benchmarks." + name, *argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "versions": versions(),
        "settings": settings,
        "notes": [],
        "tables": [],
    }


def write_json(path, data):
    fileio.makedirs(os.path.dirname(os.path.abspath(path)))
    fileio.write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


# --- tables ---------------------------------------------------------------------------------


def _cell(value, fmt):
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return format(value, fmt)


def table(section):
    """[header, *rows] of strings for a section's "columns" ([[title, key, format]]) and "rows"."""
    columns = section["columns"]
    return [[title for title, _, _ in columns]] + [
        [_cell(row.get(key), fmt) for _, key, fmt in columns] for row in section["rows"]
    ]


def text_table(section):
    cells = table(section)
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        for r in cells
    )


def markdown_table(section):
    cells = table(section)
    lines = [
        "| " + " | ".join(cells[0]) + " |",
        "|" + "|".join(["---"] + ["--:"] * (len(cells[0]) - 1)) + "|",
    ]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells[1:]])


def section(title, columns, rows):
    return {"title": title, "columns": [list(c) for c in columns], "rows": rows}


def limit_line(data):
    """The machine a run measured and its matmul peak per framework and dtype: what each row's
    "of matmul peak" divides the row's FLOP/s by (its own framework's peak in its dtype)."""
    m = data["machine"]
    where = f"one {m['accelerator']}" if m.get("accelerator") else cpu_info.describe(m)
    peaks = data["matmul_peak_flops"]
    in_order = {k: peaks[k] for k in sorted(peaks)}
    return f"matmul peak of {where}, measured in this run: {described_peaks(in_order)}"


def peak_rates(measured):
    """{"tf float32": FLOP/s, ...}: a peak measurement (benchmarks/peak.py) without its time and
    sizes."""
    return {k: v for k, v in measured.items() if k not in ("seconds", "sizes")}


def described_peaks(measured):
    """ "tf float32 219 GFLOP/s, ..., torch bfloat16 1 GFLOP/s (1024²)": each rate in the order
    measured, and the size of those measured below the requested one."""
    sizes = measured.get("sizes", {})
    return ", ".join(
        f"{k} {v / 1e9:.0f} GFLOP/s" + (f" ({sizes[k]}²)" if k in sizes else "")
        for k, v in peak_rates(measured).items()
    )


def print_rates(label, rows):
    """One line, "label: contestant 12.3, ...", printed as soon as rows are timed: a run's tables
    come only at its end."""
    print(f"{label}: " + ", ".join(f"{r['contestant']} {r['images_per_s']:.1f}" for r in rows), flush=True)


def finish(data, path, start):
    """Prints the tables and notes, writes the JSON (with the run's wall time)."""
    data["wall_s"] = round(time.perf_counter() - start, 1)
    for part in data["tables"]:
        print(f"\n{part['title']}\n{text_table(part)}")
    for note in data["notes"]:
        print(f"note: {note}")
    if data.get("matmul_peak_flops"):
        print(limit_line(data))
    write_json(path, data)
    print(f"wrote {path} ({data['wall_s']:.0f} s)")
