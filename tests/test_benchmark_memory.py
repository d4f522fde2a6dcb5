"""Memory as the benchmarks measure it: a process tree's peak (harness.run_watched) and the export's
peak memory per format (benchmarks/export_memory.py), with the deploy page's table."""

import os
import re
import sys

import pytest
from benchmark_runs import FRAMEWORK_VARIABLE, read_json, table_rows

# This process loaded TensorFlow first (conftest.py): the benchmarks must leave PyTorch out.
os.environ[FRAMEWORK_VARIABLE] = "tf"

from benchmarks import export_memory, harness  # noqa: E402

ROOT = harness.ROOT


def test_run_watched_sees_a_grandchilds_memory_and_kills_the_tree_above_the_limit():
    # The child starts a grandchild that holds 300 MB: the export's ONNX conversion is such a
    # grandchild of the benchmark, and its memory counts in the export's peak.
    grandchild = "import time; b = bytearray(300_000_000); time.sleep(2)"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"
    held = harness.run_watched([sys.executable, "-c", child], limit_bytes=4e9)
    assert held["returncode"] == 0 and not held["killed"]
    assert 300e6 < held["peak_bytes"] < 600e6
    killed = harness.run_watched([sys.executable, "-c", child], limit_bytes=200e6)
    assert killed["killed"] and killed["returncode"] == -9 and killed["seconds"] < 2


@pytest.mark.slow
def test_export_memory_runs_the_export_command_and_reads_its_report(tmp_path):
    export_memory.main(["--cases=ViT-Ti_16:32", "--formats=saved_model", f"--out={tmp_path}/e.json"])
    [row] = table_rows(read_json(tmp_path / "e.json"))
    assert row["case"] == "ViT-Ti_16:32" and row["format"] == "saved_model" and "error" not in row
    assert 0.3 < row["peak_gb"] < 4  # TensorFlow's import alone holds about 0.9 GB
    assert row["max_difference"] <= 1e-4 and row["size_mb"] > row["weights_gb"] * 1000
    assert "within" not in row  # no bound is set for this model


def test_the_deploy_pages_peak_memory_table_is_the_committed_run():
    data = read_json(os.path.join(harness.OUT_DIR, "export_memory.json"))
    with open(os.path.join(ROOT, "docs", "guides", "deploy.md"), encoding="utf-8") as f:
        page = " ".join(f.read().split())  # the prose wraps lines
    assert " ".join(export_memory.markdown(data).split()) in page
    command = " ".join(arg for arg in data["command"].split() if not arg.startswith("--out="))
    assert f"`{command}`" in page and f"Measured {data['date']}" in page  # --out: where the JSON went
    assert {r["case"] for r in table_rows(data)} == set(export_memory.TARGET_GB)  # B/16 at 384 px, L/16


def test_growth_reads_a_format_and_a_number_of_blocks_and_refuses_others_in_one_line(tmp_path):
    assert export_memory.growth_arguments(["onnx"]) == ("onnx", export_memory.GROWTH_LAYERS)
    assert export_memory.growth_arguments(["litert", "12"]) == ("litert", 12)
    refused = {
        "": "--growth takes a format and, optionally, a number of blocks: write --growth FORMAT [BLOCKS]",
        "png": "unknown format 'png': choose from saved_model, onnx,",
        "onnx twelve": "'twelve' blocks: the number must be a whole number of 2 or more",
        "onnx 1": "'1' blocks: the number must be a whole number of 2 or more",
        "onnx 12 3": "--growth takes a format and, optionally, a number of blocks",
    }
    for words, message in refused.items():
        with pytest.raises(SystemExit, match=f"^error: {re.escape(message)}"):
            export_memory.main(["--growth", *words.split()])
    missing = tmp_path / "none.json"
    with pytest.raises(SystemExit, match=f"^error: no run's JSON at {re.escape(str(missing))}: run python"):
        export_memory.main(["--markdown", str(missing)])
