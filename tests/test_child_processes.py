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
    # Set through monkeypatch, so that the site file's "yes" is gone after the test too.
    monkeypatch.setenv("OWN_SITE_RAN", "no")
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
        # The server test_c's first command started: the run's, not a child of test_c's own.
        {"kind": "server", "test": "tests/test_c.py::test_three", "argv": ["python", "-c", "import sys"]},
        {"kind": "child", "test": "tests/test_c.py::test_three", "argv": ["python", "-m"], "forked": True},
        {"kind": "tensorflow", "pid": 3, "test": "tests/test_c.py::test_three (call)", "server": True},
    ]
    log.write_text("".join(json.dumps(note) + "\n" for note in notes) + '{"kind": "chi')
    child_processes.report(str(log))
    printed = capsys.readouterr().out
    assert "test cases that started a child process: 3\n" in printed
    assert "of which a child imported TensorFlow: 1\n" in printed
    assert "child processes started by tests: 5\n" in printed
    assert "of which forked from a process that had imported TensorFlow: 2\n" in printed
    assert "command servers started: 1\n" in printed
    assert "TensorFlow imports: 3 (1 by pytest's own processes, 1 by the servers)\n" in printed
    assert "notes that could not be read: 1\n" in printed


def test_a_command_servers_import_is_noted_as_the_servers(tmp_path, monkeypatch):
    """A server is started by the first test that needs one and serves the whole run: noted as
    that test's child, its import made every such test look as if its own child imported
    TensorFlow."""
    log = tmp_path / "processes.jsonl"
    monkeypatch.setenv(child_processes.LOG_VARIABLE, str(log))
    monkeypatch.setenv(child_processes.SERVER_VARIABLE, "tf")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_c.py::test_three (call)")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the site file's finder goes in
    spec = importlib.util.spec_from_file_location("server_site", SITE_FILE)
    site = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(site)
    finder = next(f for f in sys.meta_path if type(f).__name__ == "_TensorFlowImport")
    finder._noted(lambda module: None)(None)  # as TensorFlow's own import would run it
    (note,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert note["server"] is True and note["test"] == "tests/test_c.py::test_three (call)"
    monkeypatch.delenv(child_processes.SERVER_VARIABLE)
    sys.meta_path.insert(0, finder)
    finder._noted(lambda module: None)(None)
    assert json.loads(log.read_text().splitlines()[1])["server"] is False
