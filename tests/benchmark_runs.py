"""What the benchmarks' tests share: the flags of a tiny run, a benchmark run as a command in a
child process, and the reading of a benchmark's JSON."""

import importlib.util
import json
import os
import subprocess
import sys

from fixtures import ROOT

from benchmarks.contestants import CHILD_FRAMEWORK

# A one-block model, one repeat, a short minimum time and a small matmul for the peak.
TINY = ["--num_layers=1", "--repeats=1", "--min_seconds=0.01", "--matmul_size=64"]
# What a test process sets to "tf" so that the benchmarks it imports leave PyTorch out (it loaded
# TensorFlow first); a child without it chooses its frameworks itself (benchmarks/contestants.py).
FRAMEWORK_VARIABLE = CHILD_FRAMEWORK


def timm_installed():
    """Whether timm can run (in a child: importing it after TensorFlow crashes this process)."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "timm"))


def run_benchmark(module, argv, timeout, **env):
    """`python -m benchmarks.<module> argv` with TINY, in a child free to load PyTorch first,
    `env` added to its environment; CalledProcessError where it fails."""
    child_env = {k: v for k, v in os.environ.items() if k != FRAMEWORK_VARIABLE}
    subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *argv, *TINY],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env={**child_env, **env},
        timeout=timeout,
    )


def read_json(path):
    """A benchmark's JSON (`--out`)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def table_rows(data, index=0):
    """The rows of the JSON's `index`-th table."""
    return data["tables"][index]["rows"]
