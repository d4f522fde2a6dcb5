"""Counts, from the sources, the collected test cases that start a child process.

    .venv/bin/python -m pytest --collect-only -q > /tmp/collected.txt
    .venv/bin/python tests/static_children.py tests /tmp/collected.txt

The runtime counter (tests/child_processes.py) sees what one run starts; this sees every test,
marked `slow` or not, without running any. A test case counts if its function, a helper of its
module or of a tests/ module it calls (transitively, by name), or a function-scoped fixture it
takes calls `subprocess.run`, `Popen`, `call`, `check_output`, `check_call` or one of
tests/trainer_cli.py's child starters; a helper handed to another function (`session_artefact
(..., make)`) counts as called. A module- or session-scoped fixture that starts a child counts
once, however many tests share it. Parametrised cases count one each, as collected. It reads
names, not types, so it is an estimate: a method of the same name as a helper is not followed.
"""

import ast
import collections
import os
import signal
import sys

STARTERS = {
    "run_child",
    "start_cli",
    "start_cluster",
    "run_in_one_child",
    "run_python_c",
    "start_python_c",
    "Popen",
    "check_output",
    "check_call",
}
SUBPROCESS_CALLS = {"run", "call", "Popen", "check_output", "check_call"}


def _functions(folder):
    """{(module, name): facts} of every function in the folder's modules, and their imports."""
    functions, imports = {}, {}
    for filename in sorted(os.listdir(folder)):
        if not filename.endswith(".py"):
            continue
        module = filename[:-3]
        with open(os.path.join(folder, filename), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    imports[(module, alias.asname or alias.name)] = node.module
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions[(module, node.name)] = _facts(module, node)
    return functions, imports


def _facts(module, node):
    calls, starts = set(), False
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        calls.update((module, arg.id) for arg in sub.args if isinstance(arg, ast.Name))
        function = sub.func
        if isinstance(function, ast.Name):
            calls.add((module, function.id))
            starts |= function.id in STARTERS
        elif isinstance(function, ast.Attribute):
            owner = function.value.id if isinstance(function.value, ast.Name) else None
            if owner:
                calls.add((owner, function.attr))
            starts |= function.attr in STARTERS or (
                owner == "subprocess" and function.attr in SUBPROCESS_CALLS
            )
    scope = None
    for decorator in node.decorator_list:
        text = ast.unparse(decorator)
        if "fixture" in text:
            scope = next(
                (s for s in ("session", "package", "module", "class") if f"'{s}'" in text), "function"
            )
    return {"calls": calls, "starts": starts, "fixture": scope, "args": [a.arg for a in node.args.args]}


def count(folder, collected):
    """({(module, test): cases}, [shared fixtures]) for the collected node ids."""
    functions, imports = _functions(folder)
    by_name = collections.defaultdict(list)
    for key in functions:
        by_name[key[1]].append(key)
    known = {}

    def starts(key, seen=()):
        if key in known or key in seen:
            return known.get(key, False)
        facts = functions[key]
        found = facts["starts"]
        for module, name in facts["calls"]:
            if found:
                break
            target = (module, name) if (module, name) in functions else (imports.get((module, name)), name)
            found = target in functions and not functions[target]["fixture"] and starts(target, (*seen, key))
        for name in facts["args"]:
            if found:
                break
            local = [(key[0], name)] if (key[0], name) in functions else by_name.get(name, [])
            found = any(functions[f]["fixture"] == "function" and starts(f, (*seen, key)) for f in local)
        known[key] = found
        return found

    shared = sorted(
        key[1]
        for key, facts in functions.items()
        if facts["fixture"] not in (None, "function") and starts(key)
    )
    cases = collections.Counter()
    for node_id in collected:
        path, rest = node_id.split("::", 1)
        key = (os.path.basename(path)[:-3], rest.split("[")[0].split("::")[-1])
        if key in functions and starts(key):
            cases[key] += 1
    return cases, shared


def main(folder, collected_file):
    with open(collected_file) as f:
        collected = [line.strip() for line in f if "::" in line]
    cases, shared = count(folder, collected)
    print(f"test cases that start a child process: {sum(cases.values())}")
    print(f"module- or session-scoped fixtures that start one: {len(shared)} ({', '.join(shared)})")
    print(f"in all: {sum(cases.values()) + len(shared)}")
    for (module, name), number in sorted(cases.items()):
        print(f"  {number:3d}  {module}::{name}")


if __name__ == "__main__":
    # Read through `| head`: end as a shell tool does when its reader goes away, without Python's
    # BrokenPipeError traceback.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main(*sys.argv[1:])
