"""docs/guides/benchmarks.md's blocks: the Performance tables and the benchmarks' commands."""

import pytest
from docs_standins import (
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    region,
)
from readme_blocks import split_command


def test_performance_section():
    """The Performance tables are what the committed JSON renders; each benchmark's command parses."""
    from benchmarks import accelerator, inference, input_pipeline, op_profile, report, scaling, train

    assert report.main(["--check"]) == 0, "run python -m benchmarks.report --write"
    mains = {
        "inference": inference,
        "train": train,
        "input_pipeline": input_pipeline,
        "scaling": scaling,
        "accelerator": accelerator,
        "op_profile": op_profile,
    }
    commands = [command for generated in region("performance") for command in generated.commands]
    # After the pip install (test_pip_installs_name_real_extras):
    commands += block("benchmarks-cpu").commands[1:] + block("benchmarks-gpu").commands[1:]
    assert {split_command(c)[1][2] for c in commands} >= {f"benchmarks.{name}" for name in mains}
    for command in commands:
        _, argv = split_command(command)
        if argv[2] == "benchmarks.report":
            assert argv[3:] == ["--write"]
            continue
        with pytest.raises(SystemExit, match="0"):
            mains[argv[2].split(".")[1]].main([*argv[3:], "--help"])  # the page's flags parse
