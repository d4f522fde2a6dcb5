"""The fenced code blocks of README.md and of the documentation's pages (docs/**/*.md), split
into the items tests/test_readme.py runs.

A Python block or an output sample is one item; a shell block is one item per command (lines
joined at a trailing backslash, comments and blank lines dropped). Items are found by their
content, never by page or line number, so moving a block to another page or editing one part of
a page does not move another's test.

A block the tests execute is marked by a line `<!-- runnable -->` before it (an empty line
between them); a block between the markers of a generated region (`<!-- NAME:begin ...` and
`<!-- NAME:end -->`) is written by its generator. docs/contributing.md explains the convention.
"""

import dataclasses
import glob
import os
import re
import shlex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
RUNNABLE = "<!-- runnable -->"
SHELL = ("bash", "sh", "shell", "console")
_FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")
_REGION_BEGIN = re.compile(r"^<!-- [\w-]+:begin\b")
_REGION_END = re.compile(r"^<!-- [\w-]+:end -->")


def pages():
    """README.md and every Markdown page under docs/, in order."""
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return [README, *docs]


@dataclasses.dataclass(frozen=True)
class Item:
    kind: str  # "python", "shell" (one command) or "text" (an output sample or a tree)
    text: str
    heading: str
    line: int  # where it starts, for messages only
    before: str = ""  # the prose between the previous block and this one
    page: str = "README.md"  # relative to the repository root
    runnable: bool = False  # marked <!-- runnable -->
    generated: bool = False  # inside a generated region
    block: int = 0  # the first line of its block: the items of one block share it

    @property
    def first_line(self):
        return self.text.strip().splitlines()[0] if self.text.strip() else ""

    @property
    def where(self):
        return f"{self.page}:{self.line}"

    def describe(self):
        return f"{self.kind} {self.first_line[:100]!r} under {self.heading!r} ({self.page} line {self.line})"


@dataclasses.dataclass(frozen=True)
class Block:
    language: str
    body: str
    heading: str
    line: int  # the body's first line
    before: str
    runnable: bool
    generated: bool


def blocks(text, page="README.md"):
    """[Block] of every fenced block of a page's text, in order."""
    found, heading, lines, i, prose, generated = [], "(top)", text.split("\n"), 0, [], False
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            end = i + 1
            while end < len(lines) and not lines[end].startswith(fence.group(1)):
                end += 1
            if end == len(lines):
                raise ValueError(f"{page} line {i + 1}: the code block is never closed")
            body = "\n".join(lines[i + 1 : end])
            marked = [line for line in prose if line.strip()][-1:] == [RUNNABLE]
            found.append(
                Block(fence.group(2).lower(), body, heading, i + 2, "\n".join(prose), marked, generated)
            )
            i, prose = end, []
        else:
            prose.append(lines[i])
            if lines[i].startswith("#"):
                heading, prose = lines[i].lstrip("#").strip(), []
            elif _REGION_BEGIN.match(lines[i]):
                generated = True
            elif _REGION_END.match(lines[i]):
                generated = False
        i += 1
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


def block_items(block, page):
    """The items of one block."""
    common = dict(
        heading=block.heading,
        before=block.before,
        page=page,
        runnable=block.runnable,
        generated=block.generated,
        block=block.line,
    )
    if block.language in SHELL:
        return [Item("shell", cmd, line=block.line + at, **common) for cmd, at in commands(block.body)]
    if block.language in ("python", "py"):
        return [Item("python", block.body, line=block.line, **common)]
    return [Item("text", block.body, line=block.line, **common)]


def items(paths=None):
    """The items of every block of `paths` (default: README.md and docs/**/*.md)."""
    found = []
    for path in pages() if paths is None else paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        page = os.path.relpath(path, ROOT) if os.path.commonpath([path, ROOT]) == ROOT else path
        for block in blocks(text, page):
            found += block_items(block, page)
    return found


def split_command(command):
    """'A=1 python -m mod --x=1' -> ({"A": "1"}, ["python", "-m", "mod", "--x=1"])."""
    words = shlex.split(command)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words
