"""README.md's fenced code blocks, split into the items tests/test_readme.py runs.

A Python block or an output sample is one item; a shell block is one item per command (lines
joined at a trailing backslash, comments and blank lines dropped). Items are found by their
content, never by line number, so editing one part of the README does not move another's test.
"""

import dataclasses
import os
import re
import shlex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
SHELL = ("bash", "sh", "shell", "console")
_FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")


@dataclasses.dataclass(frozen=True)
class Item:
    kind: str  # "python", "shell" (one command) or "text" (an output sample or a tree)
    text: str
    heading: str
    line: int  # where it starts, for messages only
    before: str = ""  # the prose between the previous block and this one

    @property
    def first_line(self):
        return self.text.strip().splitlines()[0] if self.text.strip() else ""

    def describe(self):
        return f"{self.kind} {self.first_line[:100]!r} under {self.heading!r} (README.md line {self.line})"


def blocks(text):
    """[(language, body, heading, first body line, prose before)] of every fenced block, in order."""
    found, heading, lines, i, prose = [], "(top)", text.split("\n"), 0, []
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            end = i + 1
            while end < len(lines) and not lines[end].startswith(fence.group(1)):
                end += 1
            if end == len(lines):
                raise ValueError(f"README.md line {i + 1}: the code block is never closed")
            body = "\n".join(lines[i + 1 : end])
            found.append((fence.group(2).lower(), body, heading, i + 2, "\n".join(prose)))
            i, prose = end, []
        else:
            prose.append(lines[i])
            if lines[i].startswith("#"):
                heading, prose = lines[i].lstrip("#").strip(), []
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


def items(path=README):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = []
    for language, body, heading, line, before in blocks(text):
        if language in SHELL:
            found += [Item("shell", cmd, heading, line + at, before) for cmd, at in commands(body)]
        elif language in ("python", "py"):
            found.append(Item("python", body, heading, line, before))
        else:
            found.append(Item("text", body, heading, line, before))
    return found


def split_command(command):
    """'A=1 python -m mod --x=1' -> ({"A": "1"}, ["python", "-m", "mod", "--x=1"])."""
    words = shlex.split(command)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words
