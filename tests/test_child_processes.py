"""tests/child_processes.py and its site file: the count of children and TensorFlow imports."""

import importlib.util
import json
import os
import sys

import child_processes

SITE_FILE = os.path.join(child_processes.CHILD_SITE, "sitecustomize.py")


def _run_site_file(name):
    spec = importlib.util.spec_from_file_location(name, SITE_FILE)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_a_tests_own_sitecustomize_still_runs_under_the_count(tmp_path, monkeypatch):
    """Python runs only the first sitecustomize on the path, and the count's comes first: it
    shadowed tests/test_startup.py's own, whose note was then never written."""
    own = tmp_path / "own_site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE_RAN'] = 'yes'\n")
    monkeypatch.delenv("OWN_SITE_RAN", raising=False)
    monkeypatch.setattr(sys, "path", [child_processes.CHILD_SITE, str(own), *sys.path])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # its finder, with the count on
    _run_site_file("counted_site")
    assert os.environ.get("OWN_SITE_RAN") == "yes"


def test_the_report_counts_children_and_imports(tmp_path, capsys):
    log = tmp_path / "processes.jsonl"
    notes = [
        {"kind": "child", "test": "tests/test_a.py::test_one", "argv": ["python", "-m", "trainers.finetune"]},
        {"kind": "child", "test": "tests/test_a.py::test_one", "argv": ["python", "-c", "pass"]},
        {"kind": "child", "test": "tests/test_b.py::test_two", "argv": ["python", "-c", "pass"]},
        # Forked from tests/command_server.py's server: a child, with no import of its own.
        {"kind": "child", "test": "tests/test_b.py::test_two", "argv": ["python", "-m"], "forked": True},
        {"kind": "tensorflow", "pid": 1, "test": "tests/test_a.py::test_one (call)"},
        {"kind": "tensorflow", "pid": 2, "test": None},
    ]
    log.write_text("".join(json.dumps(note) + "\n" for note in notes) + '{"kind": "chi')
    child_processes.report(str(log))
    printed = capsys.readouterr().out
    assert "test cases that started a child process: 2\n" in printed
    assert "of which a child imported TensorFlow: 1\n" in printed
    assert "child processes started by tests: 4\n" in printed
    assert "of which forked from a process that had imported TensorFlow: 1\n" in printed
    assert "TensorFlow imports: 2 (1 by pytest's own processes)\n" in printed
    assert "notes that could not be read: 1\n" in printed
