"""docs/guides/demo.md's generated region: the demo's command and table."""

import json

from docs_standins import (
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    region,
)
from readme_blocks import split_command

from trainers import demo


def test_demo_region(capsys):
    """The demo's command and table are what benchmarks.report renders from the committed
    docs/demo/results.json (tests/test_demo.py checks the region and the file further)."""
    from benchmarks import report

    with open(report.DEMO_RESULTS, encoding="utf-8") as f:
        results = json.load(f)
    rendered = demo.table(results, results["settings"], results["wall_time_s"])
    run, table = region("demo")
    sample = table.text.strip("\n")
    assert (
        "\n".join(line.rstrip() for line in rendered.splitlines()) == sample
    )  # Markdown drops trailing blanks
    for command in run.commands:
        _, argv = split_command(command)
        assert demo.main(["demo", *argv[3:], "--help"]) == 0, command  # the flags parse
    capsys.readouterr()
