"""`python -m keras_vit` and `python -m trainers`: a line per command, with what it does."""

import ast
import os
import re
import signal

import pytest

import benchmarks
import keras_vit
import trainers
from keras_vit import __main__ as keras_vit_main
from keras_vit import commands
from trainers import __main__ as trainers_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTED = re.compile(r"python -m ((?:keras_vit|trainers)\.[a-z_]+)")


def _documented_commands():
    """Every `python -m keras_vit.X` / `trainers.X` that README.md and docs/ tell users to run."""
    paths = [os.path.join(ROOT, "README.md")]
    for folder, _, files in os.walk(os.path.join(ROOT, "docs")):
        paths += [os.path.join(folder, name) for name in files if name.endswith(".md")]
    found = set()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            found |= set(DOCUMENTED.findall(f.read()))
    return found


def test_both_listings_print_every_command_with_its_docstring_and_exit_0(capsys):
    assert keras_vit_main.main([]) == 0
    keras_vit_lines = capsys.readouterr().out.splitlines()
    assert trainers_main.main([]) == 0
    trainers_lines = capsys.readouterr().out.splitlines()
    assert keras_vit_lines[0] == "Commands of keras_vit:" and trainers_lines[0] == "Commands of trainers:"
    listed = {line.split()[2]: line for line in keras_vit_lines[1:] + trainers_lines[1:]}
    tools = {"keras_vit.predict", "keras_vit.export", "keras_vit.visualize", "keras_vit.convert"}
    assert tools <= set(listed)
    assert {"trainers.finetune", "trainers.pretrain", "trainers.fewshot", "trainers.prepare"} <= set(listed)
    # What each does is its module's docstring's first paragraph: the same words, on one line.
    with open(os.path.join(ROOT, "keras_vit", "visualize", "__main__.py"), encoding="utf-8") as f:
        first = ast.get_docstring(ast.parse(f.read())).split("\n\n")[0]
    assert listed["keras_vit.visualize"].endswith("  " + " ".join(first.split()))
    assert "Classifies image files" in listed["keras_vit.predict"]
    # Modules that are not commands (no `__main__` block) and the listings themselves are left out.
    assert not {"keras_vit.models", "keras_vit.commands", "trainers.loop", "trainers.__main__"} & set(listed)


def test_a_listing_given_arguments_is_a_usage_error_that_names_the_command(capsys):
    # `python -m keras_vit predict x.png` (a space for the dot) had printed the list and ended 0.
    assert keras_vit_main.main(["predict", "x.png", "--top=2"]) == commands.USAGE_ERROR
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Commands of keras_vit:"
    assert (
        err[-1]
        == "error: python -m keras_vit takes no arguments; run python -m keras_vit.predict x.png --top=2"
    )
    assert trainers_main.main(["bogus"]) == commands.USAGE_ERROR
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: python -m trainers takes no arguments; run one of the commands above"
    )
    assert trainers_main.main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("Commands of trainers:")


def test_every_command_the_docs_name_is_listed():
    listed = {command.split()[-1] for command, _ in commands.find(keras_vit) + commands.find(trainers)}
    assert _documented_commands() - listed == set()


def _main_blocks(package):
    """{path: the statements of its `if __name__ == "__main__":` block} of a package's commands."""
    folder = os.path.dirname(package.__file__)
    blocks = {}
    for here, _, files in os.walk(folder):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(here, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in tree.body:
                if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'":
                    blocks[os.path.relpath(path, ROOT)] = [ast.unparse(s) for s in node.body]
    return blocks


def test_every_command_ends_through_exit_with():
    """A command whose `__main__` block is `sys.exit(main())` prints a BrokenPipeError traceback
    when its reader goes away (`--help | head -1`, `python -m benchmarks.report | head`)."""
    blocks = {**_main_blocks(keras_vit), **_main_blocks(trainers), **_main_blocks(benchmarks)}
    assert {"trainers/finetune.py", "keras_vit/predict.py", "keras_vit/visualize/__main__.py"} <= set(blocks)
    assert {"benchmarks/report.py", "benchmarks/memory.py", "benchmarks/export_memory.py"} <= set(blocks)
    assert {path: body for path, body in blocks.items() if body != ["commands.exit_with(main)"]} == {}


def test_a_reader_gone_away_ends_the_command_at_once_and_silent(monkeypatch):
    sent = []
    monkeypatch.setattr(commands.os, "open", lambda path, flags: ("opened", path))
    monkeypatch.setattr(commands.os, "dup2", lambda source, target: sent.append((source, target)))

    def main():
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(SystemExit) as ended:
        commands.exit_with(main)
    assert ended.value.code == commands.STOPPED_BY_A_CLOSED_PIPE == 141
    # stdout and stderr both go nowhere: the interpreter's last flush must not fail again.
    assert sent == [(("opened", os.devnull), 1), (("opened", os.devnull), 2)]
    with pytest.raises(SystemExit) as ended:
        commands.exit_with(lambda: 3)
    assert ended.value.code == 3 and len(sent) == 2


def test_ctrl_c_ends_the_command_killed_by_sigint_without_a_traceback(monkeypatch):
    """Python's own end (a shell loop running the command stops too), before its traceback."""
    done = []
    monkeypatch.setattr(commands.signal, "signal", lambda number, handler: done.append((number, handler)))
    monkeypatch.setattr(commands.os, "kill", lambda pid, number: done.append((pid, number)))

    def main():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # only because the kill above is a stand-in
        commands.exit_with(main)
    assert done == [(signal.SIGINT, signal.SIG_DFL), (os.getpid(), signal.SIGINT)]


def test_sigterm_lets_the_command_clean_up_then_ends_it_killed_by_sigterm(monkeypatch):
    """`keras_vit.export` killed by SIGTERM during its ONNX conversion left its scratch files
    behind (ViT-B/16: a 347 MB `.tmp-...-vit.onnx` beside OUT and the weights' folder in /tmp;
    gigabytes for the large models): Python's default SIGTERM runs no `finally`. A handler
    someone else installed (the trainers') is left alone."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    killed, cleaned = [], []
    monkeypatch.setattr(commands.os, "kill", lambda pid, number: killed.append((pid, number)))

    def main():
        try:
            signal.raise_signal(signal.SIGTERM)
            return 0
        finally:
            cleaned.append("scratch removed")

    try:
        with pytest.raises(commands.Terminated):  # only because the kill above is a stand-in
            commands.exit_with(main)
        assert cleaned == ["scratch removed"] and killed == [(os.getpid(), signal.SIGTERM)]
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

        def own(number, frame):
            pass

        signal.signal(signal.SIGTERM, own)
        with pytest.raises(SystemExit):
            commands.exit_with(lambda: 0)
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, previous)
