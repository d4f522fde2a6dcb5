"""The import graph of keras_vit, trainers and configs, read from the sources with `ast`.

Nothing is imported: every module is parsed, and each `import` statement, at module level or
inside a function, becomes an edge to the project module it names. `from pkg import mod`
is an edge to `pkg.mod` when `mod` is a module, else to `pkg`; `import a.b` is an edge to
`a.b`. The implicit import of a parent package (running `pkg/__init__.py` before
`pkg.mod`) is not an edge: every submodule would otherwise form a cycle with an `__init__`
that imports it.

The rules (docs/contributing.md, "Import rules"): no cycles; keras_vit never imports trainers or configs, and
imports TensorFlow only inside functions (for gs:// paths, or as the running backend); no
project module is imported inside a function, and keras_vit imports other packages there only
where that is deliberate, so the real dependencies stay visible at the top of each file.
"""

import ast
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("keras_vit", "trainers", "configs", "benchmarks")

# Function-level imports of project modules allowed per package: none. An import inside a
# function hides a dependency from the top of the file, and is how a cycle usually gets in
# unnoticed. Raise a number only for a deliberate one, with the reason here.
# trainers: trainers/engines/__init__.py, which trainers/engine_env.py reads before Keras loads,
# imports the errors module (and with it the library and Keras) only to refuse an unknown engine.
# (It imports each engine's module, and with the jax engine's JAX, by the registry's name, only
# for a run on that engine: test_every_registered_engine_is_a_module_of_the_package.)
# benchmarks: counted among themselves only (test_benchmarks_import_each_other_at_the_top): a
# benchmark's process imports PyTorch before TensorFlow (benchmarks/contestants.py) and a child
# of another backend only its own framework, so the library and the trainers are imported inside
# the functions that build each contestant.
MAX_FUNCTION_LEVEL_PROJECT_IMPORTS = {"keras_vit": 0, "trainers": 1, "configs": 0}

# The function-level imports of other packages that keras_vit may have, and why.
DELIBERATE_LAZY_IMPORTS = {
    # gs:// and other URL paths go through tf.io.gfile; the library runs without TensorFlow.
    ("keras_vit.fileio", "tensorflow"),
    # Exports need TensorFlow and the runtimes that check them, the optional `export` extra.
    ("keras_vit.serving", "tensorflow"),
    ("keras_vit.export", "onnxruntime"),
    ("keras_vit.export", "ai_edge_litert"),
    # The ONNX conversion runs in a child process on Keras' PyTorch backend (which imports
    # torch there); the parent never imports torch, onnx and ONNX Script's optimizer only in the
    # child too.
    ("keras_vit.onnx_export", "torch"),
    ("keras_vit.onnx_export", "onnx"),
    ("keras_vit.onnx_export", "onnx_ir"),
    ("keras_vit.onnx_export", "onnxscript"),
    # Hugging Face checkpoints need safetensors and huggingface_hub, the optional `hub` extra.
    ("keras_vit.hf_layout", "safetensors"),
    ("keras_vit.hf_export", "safetensors"),
    ("keras_vit.hub", "huggingface_hub"),
    # Plots need matplotlib, an optional extra (`plots`).
    ("keras_vit.visualize.figures", "matplotlib"),
    # SciPy's zoom resizes a position-embedding table to another grid, which most loads keep:
    # scipy.ndimage was a tenth of a second of every command's start (keras_vit/startup.py).
    ("keras_vit.posembs.learned_1d", "scipy"),
    # The running backend's own module, to tell a tensor being traced from one with values:
    # only the branch of the backend in use runs, and Keras has imported that module already.
    ("keras_vit.preprocessing", "tensorflow"),
    ("keras_vit.preprocessing", "jax"),
    ("keras_vit.preprocessing", "torch"),
    # JAX's own attention (cuDNN's flash kernel), reached only on the JAX backend, which has
    # imported JAX already.
    ("keras_vit.fused_attention", "jax"),
    # The platform JAX compiles for (training's flattened projections and attention per head on a
    # CPU), asked only on the JAX backend, which has imported JAX already, and that attention.
    ("keras_vit.jax_cpu", "jax"),
    ("keras_vit.per_head_attention", "jax"),
    # TensorFlow's threads, devices and tracing state, asked only on the TensorFlow backend,
    # which has imported TensorFlow already (inference in parts of the rows and their attention,
    # the fused layer norm, the training step's compiled GELU and layer norms, its bias adds and
    # patch embedding, the float32 inference call compiled by XLA, and the oneDNN checks they make
    # before changing a traced graph).
    ("keras_vit.row_parts", "tensorflow"),
    ("keras_vit.xla_inference", "tensorflow"),
    ("keras_vit.onednn_graph", "tensorflow"),
    ("keras_vit.fused_layer_norm", "tensorflow"),
    ("keras_vit.fused_gelu", "tensorflow"),
    ("keras_vit.bias_add", "tensorflow"),
    ("keras_vit.compiled_layer_norm", "tensorflow"),
    ("keras_vit.part_attention", "tensorflow"),
    # OpenVINO and Keras' OpenVINO backend module, reached only on that backend (which has
    # imported both) or when an OpenVINO Core is asked for (the [openvino] and [bench] extras).
    ("keras_vit.openvino_predict", "keras"),
    ("keras_vit.openvino_predict", "openvino"),
    # The one import of Keras that starts its backend, inside keras_vit/startup.py's import_keras,
    # which __init__.py runs first: with the backend's start-up lines hidden, and one line naming
    # the extra to install when the backend is missing (startup.py itself is standard library only).
    ("keras_vit.startup", "keras"),
    # Not deliberate (keras_vit imports keras at the top of other modules anyway); here until
    # preprocessing.py imports it at the top of the file.
    ("keras_vit.preprocessing", "keras"),
}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module, dotted
    function_level: bool  # inside a def, so it runs only when that function is called
    line: int


def find_modules(root, packages):
    """{dotted module name: file path} of every .py file of the packages under root."""
    modules = {}
    for package in packages:
        for directory, subdirs, files in os.walk(os.path.join(root, package)):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                dotted = os.path.relpath(os.path.join(directory, name), root)[:-3].replace(os.sep, ".")
                modules[dotted.removesuffix(".__init__")] = os.path.join(directory, name)
    return modules


def _is_package(path):
    return os.path.basename(path) == "__init__.py"


def _absolute(module, path, node):
    """The absolute module an ImportFrom names (`from ..x import y` resolved)."""
    if not node.level:
        return node.module
    base = module if _is_package(path) else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{node.module}" if node.module else base


def _statements(tree):
    """(import statement, inside a function) for every import in the tree."""
    stack = [(tree, False)]
    while stack:
        node, in_function = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            stack.append((child, nested))


def all_imports(module, path):
    """Every import statement of `module`, project or not, as Import(target=the module named)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    found = []
    for node, in_function in _statements(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            names = [_absolute(module, path, node)]
        found.extend(Import(module, name, in_function, node.lineno) for name in names)
    return found


def project_edges(modules):
    """The imports between project modules, each resolved to the module it really loads."""
    edges = []
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        for node, in_function in _statements(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _absolute(module, path, node)
                # `from pkg import mod` loads pkg.mod; `from pkg import name` only pkg.
                targets = sorted(
                    {
                        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                        for alias in node.names
                    }
                )
            edges.extend(
                Import(module, target, in_function, node.lineno) for target in targets if target in modules
            )
    return edges


def find_cycle(edges):
    """One cycle of the graph as [a, b, ..., a], or None. Iterative depth-first search."""
    graph = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
    done, on_path = set(), []
    for start in sorted(graph):
        if start in done:
            continue
        stack = [(start, iter(sorted(graph.get(start, ()))))]
        on_path.append(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.pop()
                done.add(node)
            elif child in on_path:
                return on_path[on_path.index(child) :] + [child]
            elif child not in done:
                stack.append((child, iter(sorted(graph.get(child, ())))))
                on_path.append(child)
    return None


def _describe(edges_by_pair, cycle):
    """'a -> b (line 3 of a, in a function) -> a (line 1 of b, module level)'."""
    steps = [cycle[0]]
    for source, target in zip(cycle, cycle[1:]):
        edge = edges_by_pair[(source, target)]
        where = "in a function" if edge.function_level else "module level"
        steps.append(f"{target} (line {edge.line} of {source}, {where})")
    return " -> ".join(steps)


def _cycle_message(edges, cycle):
    return "import cycle: " + _describe({(e.source, e.target): e for e in edges}, cycle)


MODULES = find_modules(ROOT, PACKAGES)
EDGES = project_edges(MODULES)


def _package(module):
    return module.split(".")[0]


def _cycle_among(packages):
    edges = [e for e in EDGES if _package(e.source) in packages and _package(e.target) in packages]
    return edges, find_cycle(edges)


# --- the checks on this repository -------------------------------------------------------


def test_the_graph_covers_every_package():
    # A walk that found nothing would pass every check below.
    for module in (
        "keras_vit",
        "keras_vit.models",
        "keras_vit.weights",
        "trainers.finetune",
        "configs.finetune",
    ):
        assert module in MODULES
    assert ("keras_vit", "keras_vit.models") in {(e.source, e.target) for e in EDGES}


def test_keras_vit_has_no_import_cycle():
    edges, cycle = _cycle_among({"keras_vit"})
    assert cycle is None, _cycle_message(edges, cycle)


def test_no_import_cycle_across_keras_vit_trainers_and_configs():
    edges, cycle = _cycle_among(set(PACKAGES))
    assert cycle is None, _cycle_message(edges, cycle)


def test_keras_vit_imports_nothing_from_trainers_or_configs():
    wrong = [
        f"{e.source} line {e.line}: {e.target}"
        for e in EDGES
        if _package(e.source) == "keras_vit" and _package(e.target) != "keras_vit"
    ]
    assert not wrong, "the library must not depend on the trainers: " + "; ".join(wrong)


def test_configs_is_plain_data_that_imports_neither_the_trainers_nor_the_library():
    wrong = [
        f"{e.source} line {e.line}: {e.target}"
        for e in EDGES
        if _package(e.source) == "configs" and _package(e.target) != "configs"
    ]
    assert not wrong, "a preset is plain data (the schema is trainers/fields.py): " + "; ".join(wrong)
    allowed = {"ml_collections", *sys.stdlib_module_names}
    heavy = [
        f"{f.source} line {f.line}: {top}" for f, top in _external_imports("configs") if top not in allowed
    ]
    assert not heavy, "configs/ imports only the standard library and ml_collections: " + "; ".join(heavy)


def test_importing_a_preset_loads_neither_tensorflow_nor_keras():
    # A child process: this one has loaded both already. The process itself is the subject.
    check = "import configs.finetune, sys; print(sorted({'tensorflow', 'keras'} & set(sys.modules)))"
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def _external_imports(package):
    return [
        (found, found.target.split(".")[0])
        for module, path in MODULES.items()
        if _package(module) == package
        for found in all_imports(module, path)
        if found.target.split(".")[0] not in PACKAGES
    ]


def test_keras_vit_imports_tensorflow_only_inside_functions():
    tensorflow = [found for found, top in _external_imports("keras_vit") if top == "tensorflow"]
    at_module_level = [f"{f.source} line {f.line}" for f in tensorflow if not f.function_level]
    assert not at_module_level, f"keras_vit must import without TensorFlow: {at_module_level}"
    assert tensorflow, "no import of TensorFlow found at all: the check above looked at nothing"


def test_keras_vit_imports_inside_functions_are_the_deliberate_ones():
    lazy = {(found.source, top) for found, top in _external_imports("keras_vit") if found.function_level}
    unexpected = sorted(lazy - DELIBERATE_LAZY_IMPORTS)
    assert not unexpected, (
        f"imports inside functions hide dependencies: {unexpected}; move them "
        "to the top of the file, or add them to DELIBERATE_LAZY_IMPORTS with "
        "the reason"
    )


def test_every_registered_engine_is_a_module_of_the_package():
    from trainers.engines import REGISTRY

    assert all(r.module in MODULES and r.module.startswith("trainers.engines.") for r in REGISTRY.values())


def test_the_engine_registry_and_engine_env_import_only_the_standard_library():
    """trainers/engine_env.py picks Keras' backend from the registry before anything imports Keras."""
    for module in ("trainers.engines", "trainers.engine_env"):
        top_level = [f for f in all_imports(module, MODULES[module]) if not f.function_level]
        outside = [f.target for f in top_level if f.target.split(".")[0] not in sys.stdlib_module_names]
        assert outside in ([], ["trainers.engines"]), (module, outside)


def test_benchmarks_import_each_other_at_the_top():
    lazy = [
        f"{e.source} line {e.line}: {e.target}"
        for e in EDGES
        if e.function_level and _package(e.source) == _package(e.target) == "benchmarks"
    ]
    assert not lazy, "a benchmark module imported inside a function hides a dependency: " + "; ".join(lazy)


def _private_names_used_elsewhere(modules):
    """'module line N: other._name' for each use of another project module's private name."""
    found = []
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        imported = {}
        for node, _ in _statements(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(module, path, node)
                for alias in node.names:
                    if alias.name.startswith("_") and base in modules:
                        found.append(f"{module} line {node.lineno}: {base}.{alias.name}")
                    if f"{base}.{alias.name}" in modules:
                        imported[alias.asname or alias.name] = f"{base}.{alias.name}"
            else:
                for alias in node.names:
                    if alias.name in modules:
                        imported[alias.asname or alias.name] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in imported
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{module} line {node.lineno}: {imported[node.value.id]}.{node.attr}")
    return found


def test_benchmarks_use_no_private_name_of_another_module():
    benchmarks = {m: p for m, p in MODULES.items() if _package(m) == "benchmarks"}
    used = [use for use in _private_names_used_elsewhere(MODULES) if use.split()[0] in benchmarks]
    assert not used, "a private name is its module's own: make it public, or move it: " + "; ".join(used)


@pytest.mark.parametrize("package", MAX_FUNCTION_LEVEL_PROJECT_IMPORTS)
def test_function_level_imports_of_project_modules_stay_within_the_limit(package):
    lazy = [
        f"{e.source} line {e.line}: {e.target}"
        for e in EDGES
        if e.function_level and _package(e.source) == package
    ]
    limit = MAX_FUNCTION_LEVEL_PROJECT_IMPORTS[package]
    assert len(lazy) <= limit, (
        f"{len(lazy)} function-level imports of project modules in "
        f"{package} (at most {limit}):\n" + "\n".join(lazy)
    )


# --- the checker itself, on small made-up packages ---------------------------------------


def _write_package(tmp_path, files):
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return find_modules(str(tmp_path), ("pkg",))


def test_checker_finds_a_cycle_hidden_in_a_function(tmp_path):
    modules = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import a\n",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "thing = 1\ndef later():\n    from . import a\n    return a\n",
        },
    )
    edges = project_edges(modules)
    cycle = find_cycle(edges)
    assert cycle in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])
    lazy = [(e.source, e.target) for e in edges if e.function_level]
    assert lazy == [("pkg.b", "pkg.a")]
    assert "line 3 of pkg.b, in a function" in _cycle_message(edges, cycle)


def test_checker_sees_no_cycle_between_a_package_and_its_submodules(tmp_path):
    modules = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import a, b\nfrom pkg.b import VALUE\n",
            "pkg/a.py": "import pkg.b\nfrom pkg import b as other\n",
            "pkg/b.py": "import os\nVALUE = os.sep\n",
        },
    )
    edges = {(e.source, e.target) for e in project_edges(modules)}
    assert edges == {("pkg", "pkg.a"), ("pkg", "pkg.b"), ("pkg.a", "pkg.b")}
    assert find_cycle(project_edges(modules)) is None


def test_checker_finds_private_names_used_by_another_module(tmp_path):
    modules = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "_hidden = 1\nshown = 2\n",
            "pkg/b.py": "from pkg import a\nfrom pkg.a import _hidden\nx = a._hidden + a.shown + _hidden\n",
        },
    )
    assert sorted(_private_names_used_elsewhere(modules)) == [
        "pkg.b line 2: pkg.a._hidden",
        "pkg.b line 3: pkg.a._hidden",
    ]


def test_checker_tells_module_level_from_function_level(tmp_path):
    modules = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/m.py": """\
            import numpy as np

            class C:
                import json

                def method(self):
                    import tensorflow as tf
                    return tf
            """,
        },
    )
    found = {(f.target, f.function_level) for f in all_imports("pkg.m", modules["pkg.m"])}
    assert found == {("numpy", False), ("json", False), ("tensorflow", True)}
