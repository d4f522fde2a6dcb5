"""The check that every fenced block of README.md and docs/**/*.md has a mark and a test, and of
the marks themselves (tests/readme_blocks.py; docs/contributing.md, "The documentation").

The tests of the blocks are tests/test_docs_*.py, one file per page; the check reads the claims
(`block("NAME")`, `unrunnable("NAME", ...)`, `region("NAME")`) from all of their syntax trees, so
a block without a mark, a mark no test fetches, a fetched name no page has and a name used twice,
on any page, fail test_every_block_has_a_test, one line each, naming the page, the line and the
heading.
"""

import readme_blocks
from docs_standins import (
    BLOCKS,
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
)


def test_every_block_has_a_test():
    problems = readme_blocks.problems(BLOCKS, readme_blocks.all_claims())
    assert not problems, "\n".join(problems)


def test_a_new_block_is_named_with_its_heading_and_page(tmp_path):
    new = (
        "\n## Serving\n\nStart it:\n\n```bash\npython -m keras_vit.serve --port=8500 \\\n    --model=x\n```\n"
    )
    (tmp_path / "deploy.md").write_text("# Deploy\n" + new, encoding="utf-8")
    found = BLOCKS + readme_blocks.read([str(tmp_path / "deploy.md")])
    (problem,) = readme_blocks.problems(found, readme_blocks.all_claims())
    assert problem.startswith(f"{tmp_path / 'deploy.md'} line 8 (under 'Serving'): the shell block ")
    assert "'python -m keras_vit.serve --port=8500 --model=x' has no mark" in problem


def test_marks_and_claims_agree(tmp_path):
    """A mark no test claims, a name used twice, a bad mark, a mark of the wrong kind, a generated
    region no test claims, and claims of a missing name, of the wrong kind or without a literal
    name: one line each."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n<!-- runnable: serve -->\n\n```bash\ndocker run x\n```\n\n"
        "<!-- runnable: quickstart -->\n\n```python\nx = 1\n```\n\n"
        "<!-- runnable -->\n\n```bash\nmake\n```\n\n"
        "<!-- sample: make -->\n\n```bash\nmake\n```\n\n"
        "<!-- table:begin -->\n```\nx  1\n```\n<!-- table:end -->\n",
        encoding="utf-8",
    )
    tests = tmp_path / "test_page.py"
    tests.write_text(
        'def test_a():\n    block("nowhere")\n\n\ndef test_b(name):\n    unrunnable("quickstart", "x")\n'
        "    block(name)\n",
        encoding="utf-8",
    )
    claims = readme_blocks.all_claims() + readme_blocks.claims(str(tests))
    problems = readme_blocks.problems(BLOCKS + readme_blocks.read([str(page)]), claims)
    assert problems == [
        f"{page} line 6 (under 'Page'): no test claims the runnable mark 'serve'; call block(\"serve\")",
        f"{page} line 12 (under 'Page'): the name 'quickstart' is used twice"
        f" (also {block('quickstart').describe()})",
        f"{page} line 18 (under 'Page'): '<!-- runnable -->' is not a mark; write <!-- KIND: NAME -->",
        f"{page} line 24 (under 'Page'): a shell block cannot be marked sample",
        f"{page} line 29 (under 'Page'): no test claims the generated region; call region(\"table\")",
        "test_page.py line 2 (test_a): block('nowhere') names no block of the docs",
        "test_page.py line 6 (test_b): unrunnable('quickstart') fetches a block marked runnable",
        "test_page.py line 7 (test_b): block() takes the name as a literal string, for this check",
    ]


def test_every_page_is_read():
    pages = {b.page for b in BLOCKS}
    assert "README.md" in pages and "docs/guides/training.md" in pages and "docs/guides/deploy.md" in pages
    assert {b.kind for b in BLOCKS} == {"runnable", "unrunnable", "sample", ""}
    assert {"performance", "demo"} <= {b.region for b in BLOCKS}


def test_blocks_are_found():
    assert {b.form for b in BLOCKS} == {"python", "shell", "text"} and len(BLOCKS) > 40
    (command,) = block("sweep").commands
    assert command.startswith("python -m trainers.finetune --dataset=oxford_iiit_pet --data_dir=$DATA ")
    assert command.endswith("--workdir=/tmp/pets_sweep")  # continuation joined, comment dropped
