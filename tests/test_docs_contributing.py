"""docs/contributing.md's blocks: the make targets and pytest commands (with README.md's two
commands) and the layout of the repository.
"""

import os
import re
import subprocess

import command_server
import pytest
import trainer_cli
from docs_standins import (
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
)
from readme_blocks import ROOT, split_command

PYTEST = ".venv/bin/python -m pytest "


def test_make_targets():
    expected = {
        "make demo": ["-m trainers.demo --workdir=runs/demo"],
        "make test": [
            "ruff check .",
            "ruff format --check .",
            "mkdocs build --strict",
            "-m pytest",
            "--dist=loadfile",
            "--no-loadscope-reorder",  # tests/conftest.py's order of the files: the workers end together
            "--max-worker-restart=0",  # a dead worker ends the run, never a hang (the Makefile)
        ],
        "make format": ["ruff format ."],
    }
    commands = block("two-commands").commands + block("tests").commands
    makes = [command for command in commands if not command.startswith(PYTEST)]  # test_pytest_commands
    assert len(makes) == 4
    for command in makes:
        assert command in expected, command
        plan = subprocess.run(
            ["make", "-n", "-C", ROOT, command.split()[1]], capture_output=True, text=True, check=True
        ).stdout
        for step in expected[command]:
            assert step in plan, f"`{command}` no longer runs {step!r}:\n{plan}"


@pytest.mark.slow
def test_pytest_commands():
    commands = [command for command in block("tests").commands if command.startswith(PYTEST)]
    assert len(commands) == 2  # the rest are test_make_targets'
    for command in commands:
        _, argv = split_command(command)
        assert argv[1:3] == ["-m", "pytest"], command
        # Forked from a process that imported the trainers: what the collection imports.
        args = [*argv[3:], "--collect-only", "-q", "-p", "no:cacheprovider"]
        proc = command_server.run_process(command_server.PYTEST, args, trainer_cli.child_env(), 300)
        assert proc.returncode == 0, command + proc.stdout[-2000:] + proc.stderr[-2000:]
        collected = re.search(r"(\d+)(?:/\d+)? tests? collected", proc.stdout)
        assert collected and int(collected.group(1)) > 0, command


def test_layout_block():
    text = block("layout").text
    for folder in re.findall(r"^(\w+)/ ", text, re.MULTILINE):
        assert os.path.isdir(os.path.join(ROOT, folder)), folder
    keras_vit_line = re.search(r"^keras_vit/ +([\s\S]*?)\ntrainers/", text).group(1)
    names = re.sub(r"\([^)]*\)", "", re.sub(r"the library[^:]*:", "", keras_vit_line))
    for name in filter(None, (n.strip() for n in re.split(r"[,;/\s]+|\band\b", names))):
        assert _module_exists("keras_vit", name), f"keras_vit/{name} is in the layout of docs/contributing.md"
    for line in re.findall(r"^ {17}(\S[^\n]*?)  +\S", text, re.MULTILINE):
        for name in re.split(r"[,\s]+", line.replace("data/", "data").replace("evaluators/", "evaluators")):
            if name:
                assert _module_exists("trainers", name), (
                    f"trainers/{name} is in the layout of docs/contributing.md"
                )


def _module_exists(package, name):
    base = os.path.join(ROOT, package, name)
    return os.path.exists(base + ".py") or os.path.isdir(base)


def test_no_test_file_is_over_the_line_limit():
    """A test file longer than contributing.md's limit is one that pytest-xdist's --dist=loadfile
    cannot split and a reader cannot hold: split it by the module or page it tests."""
    found = re.search(r"no test file is over ([\d,]+) lines", _page_text(), re.IGNORECASE)
    limit = int(found.group(1).replace(",", ""))
    folder = os.path.join(ROOT, "tests")
    over = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                lines = sum(1 for _ in f)
            if lines > limit:
                over[name] = lines
    assert over == {}


def _page_text():
    with open(os.path.join(ROOT, "docs", "contributing.md"), encoding="utf-8") as f:
        return " ".join(f.read().split())
