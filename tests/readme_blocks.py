"""The fenced code blocks of README.md and of the documentation's pages (docs/**/*.md), found by
the names their marks give them, and the check that every block has a test.

A block is marked on the line before it (an empty line between, so that Markdown keeps the mark
out of the block) with its kind and a name used once across the pages:

    <!-- runnable: quickstart -->   a Python or shell block that a test runs
    <!-- unrunnable: install -->    one that cannot run on a CPU machine without network (a GPU,
                                    a registry download, a server); its test checks what it can
    <!-- sample: console -->        a text block (program output, a tree, a table) that a test
                                    compares with what the code prints or reads

The tests of a page (tests/test_docs_PAGE.py, one file per page; their fetchers and stand-ins are
in tests/docs_standins.py) fetch a block by its name with `block(NAME)` (runnable or sample) or
`unrunnable(NAME, REASON)`. A block between the markers of a generated region (`<!-- NAME:begin
...` and `<!-- NAME:end -->`) is written by its generator and carries no mark: `region(NAME)`
fetches the region's blocks. The check (tests/test_docs_marks.py) reads the claims of all the
test files. docs/contributing.md explains the convention.
"""

import ast
import dataclasses
import glob
import os
import re
import shlex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
SHELL = ("bash", "sh", "shell", "console")
MARK = re.compile(r"^<!-- (runnable|unrunnable|sample): ([a-z0-9]+(?:-[a-z0-9]+)*) -->$")
# The test functions that fetch blocks, and the kinds of mark each takes ("region": none).
FETCHERS = {"block": ("runnable", "sample"), "unrunnable": ("unrunnable",), "region": ()}
_MARK_LIKE = re.compile(r"^<!--\s*(runnable|unrunnable|sample)\b")
_FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")
_REGION_BEGIN = re.compile(r"^<!-- ([\w-]+):begin\b")
_REGION_END = re.compile(r"^<!-- [\w-]+:end -->")


def pages():
    """README.md and every Markdown page under docs/, in order."""
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return [README, *docs]


@dataclasses.dataclass(frozen=True)
class Block:
    language: str
    text: str
    heading: str
    line: int  # the body's first line, for messages
    page: str  # relative to the repository root
    before: str  # the prose between the previous block and this one
    kind: str = ""  # its mark's: runnable, unrunnable or sample; "" when unmarked
    name: str = ""
    region: str = ""  # the generated region it lies in
    bad_mark: str = ""  # a line before it that looks like a mark but is not one

    @property
    def form(self):
        if self.language in SHELL:
            return "shell"
        return "python" if self.language in ("python", "py") else "text"

    @property
    def commands(self):
        """The commands of a shell block, in order."""
        assert self.form == "shell", f"{self.describe()} is not a shell block"
        return [command for command, _ in commands(self.text)]

    @property
    def where(self):
        return f"{self.page}:{self.line}"

    def describe(self):
        return f"{self.page} line {self.line} (under {self.heading!r})"


def blocks(text, page="README.md"):
    """[Block] of every fenced block of a page's text, in order."""
    found, heading, lines, i, prose, region = [], "(top)", text.split("\n"), 0, [], ""
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            end = i + 1
            while end < len(lines) and not lines[end].startswith(fence.group(1)):
                end += 1
            if end == len(lines):
                raise ValueError(f"{page} line {i + 1}: the code block is never closed")
            last = ([line.strip() for line in prose if line.strip()] or [""])[-1]
            mark = MARK.match(last)
            found.append(
                Block(
                    fence.group(2).lower(),
                    "\n".join(lines[i + 1 : end]),
                    heading,
                    i + 2,
                    page,
                    "\n".join(prose),
                    *(mark.groups() if mark else ("", "")),
                    region=region,
                    bad_mark=last if _MARK_LIKE.match(last) and not mark else "",
                )
            )
            i, prose = end, []
        else:
            prose.append(lines[i])
            if lines[i].startswith("#"):
                heading, prose = lines[i].lstrip("#").strip(), []
            elif _REGION_BEGIN.match(lines[i]):
                region = _REGION_BEGIN.match(lines[i]).group(1)
            elif _REGION_END.match(lines[i]):
                region = ""
        i += 1
    return found


def read(paths=None):
    """The blocks of `paths` (default: README.md and docs/**/*.md)."""
    found = []
    for path in pages() if paths is None else paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        page = os.path.relpath(path, ROOT) if os.path.commonpath([path, ROOT]) == ROOT else path
        found += blocks(text, page)
    return found


def commands(body):
    """[(command, first line number within body)] of a shell block."""
    found, current, start = [], "", 0
    for number, raw in enumerate(body.split("\n")):
        line = _strip_comment(raw).rstrip()
        if not current:
            start = number
        if line.endswith("\\"):
            current += line[:-1].strip() + " "
            continue
        current = (current + line.strip()).strip()
        if current:
            found.append((current, start))
        current = ""
    return found


def _strip_comment(line):
    """The line without a trailing `# comment` (a # inside quotes is kept)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def split_command(command):
    """'A=1 python -m mod --x=1' -> ({"A": "1"}, ["python", "-m", "mod", "--x=1"])."""
    words = shlex.split(command)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


@dataclasses.dataclass(frozen=True)
class Claim:
    fetcher: str  # a key of FETCHERS
    name: str  # "" when the call does not pass a literal name
    where: str  # the test file, line and function that makes the call


def claims(path):
    """[Claim] of every call to a fetcher in the test file at `path` (read, not run)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []
    for statement in tree.body:  # a test, a fixture, a helper, or a module-level line
        owner = getattr(statement, "name", "module level")
        for call in ast.walk(statement):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) in FETCHERS:
                first = call.args[0] if call.args else None
                name = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
                where = f"{os.path.basename(path)} line {call.lineno} ({owner})"
                found.append(Claim(call.func.id, name, where))
    return found


def test_files():
    """The test files of the docs' blocks: tests/test_docs_*.py."""
    return sorted(glob.glob(os.path.join(ROOT, "tests", "test_docs_*.py")))


def all_claims():
    """[Claim] of every test file of the docs' blocks, so that a block claimed in any of them counts."""
    return [claim for path in test_files() for claim in claims(path)]


def named(all_blocks, name, fetcher):
    """The one block marked `name`, of a kind that `fetcher` takes."""
    found = [b for b in all_blocks if b.name == name]
    assert len(found) == 1, f"{len(found)} blocks of the docs are marked {name!r}"
    assert found[0].kind in FETCHERS[fetcher], f"{found[0].describe()} is {found[0].kind}, not {fetcher}()"
    return found[0]


def problems(all_blocks, all_claims):
    """One line per block without a test, mark without a claim, claim without a block, or name used twice."""
    found, seen = [], {}
    claimed = {(c.fetcher, c.name) for c in all_claims}
    for b in all_blocks:
        at = f"{b.describe()}:"
        if b.region:
            if b.kind:
                found.append(f"{at} a mark inside the generated region {b.region!r} (its generator's)")
            elif ("region", b.region) not in claimed:
                found.append(f'{at} no test claims the generated region; call region("{b.region}")')
        elif b.bad_mark:
            found.append(f"{at} {b.bad_mark!r} is not a mark; write <!-- KIND: NAME -->")
        elif not b.kind:
            kinds = "sample" if b.form == "text" else "runnable or unrunnable"
            found.append(f"{at} the {b.form} block {_first_line(b)!r} has no mark ({kinds}) and no test")
        elif (b.kind == "sample") != (b.form == "text"):
            found.append(f"{at} a {b.form} block cannot be marked {b.kind}")
        elif b.name in seen:
            found.append(f"{at} the name {b.name!r} is used twice (also {seen[b.name].describe()})")
        else:
            seen[b.name] = b
            fetcher = "unrunnable" if b.kind == "unrunnable" else "block"
            if (fetcher, b.name) not in claimed:
                found.append(f'{at} no test claims the {b.kind} mark {b.name!r}; call {fetcher}("{b.name}")')
    regions = {b.region for b in all_blocks}
    for c in all_claims:
        if not c.name:
            found.append(f"{c.where}: {c.fetcher}() takes the name as a literal string, for this check")
        elif c.name not in (regions if c.fetcher == "region" else seen):
            found.append(f"{c.where}: {c.fetcher}({c.name!r}) names no block of the docs")
        elif c.fetcher != "region" and seen[c.name].kind not in FETCHERS[c.fetcher]:
            found.append(f"{c.where}: {c.fetcher}({c.name!r}) fetches a block marked {seen[c.name].kind}")
    return found


def _first_line(b):
    lines = b.commands if b.form == "shell" else b.text.strip().splitlines()
    return lines[0][:80] if lines else ""
