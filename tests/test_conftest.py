"""tests/conftest.py's order of the collected tests, which pytest-xdist's --dist=loadfile follows,
and its check of the environment a test leaves."""

import pathlib
import types

import conftest


def _item(path, name, slow):
    marker = object() if slow else None
    return types.SimpleNamespace(
        path=pathlib.Path(path), name=name, get_closest_marker=lambda mark: marker if mark == "slow" else None
    )


def test_files_with_the_most_slow_tests_come_first_each_whole_and_in_its_own_order():
    collected = [
        _item("tests/test_a.py", "fast_1", False),
        _item("tests/test_a.py", "fast_2", False),
        _item("tests/test_b.py", "slow_1", True),
        _item("tests/test_b.py", "fast_1", False),
        _item("tests/test_c.py", "fast_1", False),
        _item("tests/test_c.py", "slow_1", True),
        _item("tests/test_c.py", "slow_2", True),
        _item("tests/test_d.py", "slow_1", True),
    ]
    items = list(collected)
    conftest.pytest_collection_modifyitems(None, items)
    # Two slow tests, then one each in collection order (b before d), then the file of fast ones.
    assert [(item.path.stem, item.name) for item in items] == [
        ("test_c", "fast_1"),
        ("test_c", "slow_1"),
        ("test_c", "slow_2"),
        ("test_b", "slow_1"),
        ("test_b", "fast_1"),
        ("test_d", "slow_1"),
        ("test_a", "fast_1"),
        ("test_a", "fast_2"),
    ]


def test_a_variable_set_unset_or_changed_is_a_change_and_the_phase_s_name_is_not():
    before = {"KEEP": "1", "GONE": "x", "MOVED": "a", "PYTEST_CURRENT_TEST": "t (setup)"}
    after = {"KEEP": "1", "MOVED": "b", "NEW": "", "PYTEST_CURRENT_TEST": "t (teardown)"}
    assert conftest.environment_changes(before, after) == ["GONE", "MOVED", "NEW"]
    assert conftest.environment_changes(before, dict(before, PYTEST_CURRENT_TEST="t (call)")) == []


def test_a_program_module_imported_in_the_test_may_add_its_defaults_only():
    """benchmarks/accelerator.py sets XLA_PYTHON_CLIENT_PREALLOCATE as it is imported: the test
    that imports it first in a worker (test_docs_benchmarks' in a run of its own) is not at fault."""
    before = {"KEEP": "1", "MOVED": "a"}
    after = {"KEEP": "1", "MOVED": "b", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert conftest.environment_changes(before, after, {"benchmarks.accelerator"}) == ["MOVED"]
    assert conftest.environment_changes(before, after, {"numpy.linalg"}) == [
        "MOVED",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
    ]
