"""trainers.results: the one writer of WORKDIR/results.json, and its reader."""

import json
import os

import pytest

from trainers import results


def test_written_sorted_indented_and_read_back(tmp_path):
    assert results.read(str(tmp_path)) is None  # no finished run yet
    results.write(str(tmp_path), {"steps": 3, "eval": {"test": {"accuracy": 0.5}}})
    text = (tmp_path / "results.json").read_text()
    expected = {"eval": {"test": {"accuracy": 0.5}}, "steps": 3}
    assert text == json.dumps(expected, indent=2, sort_keys=True) + "\n"
    assert results.read(str(tmp_path)) == {"steps": 3, "eval": {"test": {"accuracy": 0.5}}}


def test_a_write_that_fails_leaves_the_old_file_whole(tmp_path):
    results.write(str(tmp_path), {"steps": 1})
    with pytest.raises(TypeError):
        results.write(str(tmp_path), {"steps": object()})  # not JSON: fails before the file is touched
    assert results.read(str(tmp_path)) == {"steps": 1}
    assert os.listdir(tmp_path) == ["results.json"]  # no temporary file left behind


def test_every_command_writes_through_it():
    # The trainers that end with results.json name this module, and none writes the file itself.
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "trainers")
    # (trainers.fewshot ends through actions.Export, as the training runs do.)
    for name in ("actions.py", "sweep.py", "demo.py"):
        with open(os.path.join(root, name), encoding="utf-8") as f:
            source = f.read()
        assert "results_lib.write(" in source, name
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py") and name != "results.py":
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    assert '"results.json")' not in f.read(), name
