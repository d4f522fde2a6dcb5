"""What `pip install keras-vision-transformer` and its extras install, against what the code imports.

The requirements come from running setup.py with `setuptools.setup` replaced by a recorder;
the imports are read from the sources with `ast` (test_import_graph.py), so a new import in
keras_vit, trainers/ or configs/ without its distribution in setup.py fails here. Then the
library is used in a fresh interpreter on the JAX backend in which TensorFlow, TFDS and
scikit-learn cannot be imported, as in an environment that installed the library alone.
The distribution name is checked to be the same in setup.py, every install command a user
copies (README, notebooks, error hints), and never the index's unrelated `keras-vit`.
"""

import glob
import importlib.metadata
import os
import re
import runpy
import subprocess
import sys
from unittest import mock

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from test_import_graph import PACKAGES, all_imports, find_modules

import keras_vit
from keras_vit import startup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")

# Import name -> the distribution that provides it, for every non-standard-library module the
# code and the tests import. A new one must be added here (and to setup.py).
DISTRIBUTIONS = {
    "PIL": "pillow",
    "absl": "absl-py",
    "h5py": "h5py",
    "huggingface_hub": "huggingface-hub",
    "jax": "jax",
    "jupyter_client": "jupyter-client",
    "keras": "keras",
    "keras_hub": "keras-hub",
    "matplotlib": "matplotlib",
    "ml_collections": "ml-collections",
    "ml_dtypes": "ml-dtypes",
    "nbclient": "nbclient",
    "nbformat": "nbformat",
    "onnx": "onnx",
    "onnx_ir": "onnx-ir",
    "onnxscript": "onnxscript",
    "onnxruntime": "onnxruntime",
    "openvino": "openvino",
    "optax": "optax",
    "ai_edge_litert": "ai-edge-litert",
    "numpy": "numpy",
    "packaging": "packaging",
    "pytest": "pytest",
    "safetensors": "safetensors",
    "scipy": "scipy",
    "sklearn": "scikit-learn",
    "tensorboard": "tensorboard",
    "tensorflow": "tensorflow",
    "tensorflow_datasets": "tensorflow-datasets",
    "timm": "timm",
    "torch": "torch",
    "transformers": "transformers",
}
# Ours: the index's "keras-vit" is an unrelated project (keras_vit/_clash.py).
DISTRIBUTION = "keras-vision-transformer"
# Keras backends: keras_vit imports one inside a function only when it is the running backend.
BACKENDS = {"tensorflow", "jax", "torch", "openvino"}
# The training stack a JAX or PyTorch user of the library must not get.
TRAINING_ONLY = {
    "tensorflow",
    "tensorflow-datasets",
    "tensorboard",
    "scikit-learn",
    "absl-py",
    "ml-collections",
    "importlib-resources",
}
# In [train] though nothing here imports it: tfds.builder does, and TFDS does not declare it.
UNDECLARED_TFDS_DEPENDENCY = "importlib-resources"


@pytest.fixture(scope="module")
def setup_kwargs():
    """The keyword arguments setup.py passes to setuptools.setup."""
    recorded = {}
    with (
        pytest.MonkeyPatch.context() as patch,
        mock.patch("setuptools.setup", lambda **kwargs: recorded.update(kwargs)),
    ):
        patch.chdir(ROOT)  # setup.py reads README.md from the working directory
        runpy.run_path(os.path.join(ROOT, "setup.py"))
    return recorded


def _names(requirements, extras):
    """Canonical distribution names of requirement strings, self-referencing extras expanded."""
    names = set()
    for text in requirements:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == DISTRIBUTION:
            for extra in requirement.extras:
                names |= _names(extras[extra], extras)
        else:
            names.add(canonicalize_name(requirement.name))
    return names


@pytest.fixture(scope="module")
def requires(setup_kwargs):
    """{"install": names, extra: names, ...}."""
    extras = setup_kwargs["extras_require"]
    found = {name: _names(reqs, extras) for name, reqs in extras.items()}
    found["install"] = _names(setup_kwargs["install_requires"], extras)
    return found


def _keras_requirements():
    """What installing Keras brings along (h5py, absl-py, ml-dtypes, ...)."""
    return {
        canonicalize_name(Requirement(text).name)
        for text in importlib.metadata.requires("keras")
        if "extra ==" not in text
    }


def _distributions(packages, root=ROOT, local=()):
    """{distribution: where it is imported} for the non-project imports of the packages."""
    found = {}
    for module, path in find_modules(root, packages).items():
        for imported in all_imports(module, path):
            top = imported.target.split(".")[0]
            if top in PACKAGES or top in local or top in sys.stdlib_module_names:
                continue
            assert top in DISTRIBUTIONS, (
                f"{module} line {imported.line} imports {top!r}: add its "
                "distribution to DISTRIBUTIONS here and to setup.py"
            )
            where = f"{module} line {imported.line}"
            found.setdefault((canonicalize_name(DISTRIBUTIONS[top]), imported.function_level), []).append(
                where
            )
    return found


def _read_distributions(packages):
    """The distributions whose files the packages read without importing them
    (`importlib.metadata.distribution("NAME")`: the digits, from scikit-learn's copy)."""
    found = set()
    for path in find_modules(ROOT, packages).values():
        with open(path, encoding="utf-8") as f:
            found |= set(re.findall(r'metadata\.distribution\("([\w.-]+)"\)', f.read()))
    return {canonicalize_name(name) for name in found}


# --- setup.py against the sources ---------------------------------------------------------


def test_the_library_installs_without_the_training_stack(requires, setup_kwargs):
    assert requires["install"] >= {"keras", "numpy", "scipy", "pillow"}
    assert not requires["install"] & TRAINING_ONLY, sorted(requires["install"] & TRAINING_ONLY)
    keras = next(Requirement(r) for r in setup_kwargs["install_requires"] if r.startswith("keras"))
    assert "3.13.1" not in keras.specifier and "3.13.2" in keras.specifier  # known safe_mode bypasses


def test_the_library_requires_what_keras_vit_imports(requires):
    found = _distributions(("keras_vit",))
    available = requires["install"] | _keras_requirements()
    optional = set().union(*(names for extra, names in requires.items() if extra != "install"))
    for (distribution, function_level), where in sorted(found.items()):
        if function_level:  # the deliberate lazy ones (test_import_graph.py), all optional
            assert distribution in available | optional | BACKENDS, (distribution, where)
        else:
            assert distribution in available, (
                f"keras_vit imports {distribution} ({where[0]}) "
                "but `pip install keras-vision-transformer` does not install it"
            )
    assert ("h5py", False) in found and "h5py" in _keras_requirements()  # the table is in use


def test_train_extra_is_what_trainers_and_configs_import(requires):
    # Imports inside functions count too (the TFDS loaders run them), and files read from a
    # distribution without importing it (the digits).
    needed = {distribution for distribution, _ in _distributions(("trainers", "configs"))}
    needed |= _read_distributions(("trainers", "configs"))
    missing = needed - requires["install"] - requires["train"]
    assert not missing, f"trainers/configs import {sorted(missing)}: add them to [train] in setup.py"
    unused = requires["train"] - needed - {UNDECLARED_TFDS_DEPENDENCY}
    assert not unused, f"[train] installs {sorted(unused)}, which nothing in trainers/configs imports"
    assert UNDECLARED_TFDS_DEPENDENCY in requires["train"]
    assert {"tensorflow", "tensorflow-datasets", "scikit-learn"} <= requires["train"]


def test_test_extra_installs_the_trainers_and_what_the_tests_import(requires):
    assert requires["test"] >= requires["train"] | {"pytest", "pytest-timeout", "jax", "ruff"}
    # benchmarks/ is the repository's own (tests/test_benchmarks.py runs it), not a distribution.
    local = {name[:-3] for name in os.listdir(TESTS) if name.endswith(".py")} | {"benchmarks"}
    found = _distributions(("tests",), local=local)
    # `make test` installs these extras.
    available = requires["install"] | requires["test"] | requires["plots"] | _keras_requirements()
    missing = {d: where for (d, _), where in found.items() if d not in available}
    assert not missing, f"tests import what `make test` does not install: {missing}"


def test_bench_extra_installs_what_the_benchmarks_import(requires):
    found = _distributions(("benchmarks",), local={"benchmarks"})
    available = requires["install"] | requires["train"] | requires["bench"] | _keras_requirements()
    missing = {d: where for (d, _), where in found.items() if d not in available}
    assert not missing, f"benchmarks/ imports what [bench] and [train] do not install: {missing}"
    assert {"keras-hub", "timm", "torch"} <= requires["bench"]


def _install_commands():
    """(where, distribution, extras) of every install command a user copies: the `pip install`
    lines of README.md and of the documentation's pages, the notebooks' PACKAGE, and the hints
    that errors print."""
    found = []
    for page in ["README.md", *sorted(glob.glob("docs/**/*.md", root_dir=ROOT, recursive=True))]:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for target in re.findall(r"pip install (?:-\S+ )*\"?([\w.-]+(?:\[[\w,]+\])?)", line):
                    found.append((f"{page} line {number}", target))
    for name in sorted(os.listdir(os.path.join(ROOT, "colab"))):
        with open(os.path.join(ROOT, "colab", name), encoding="utf-8") as f:
            for target in re.findall(r'PACKAGE = \\"([\w.-]+(?:\[[\w,]+\])?)', f.read()):
                found.append((f"colab/{name}", target))
    for module, path in find_modules(ROOT, PACKAGES).items():
        with open(path, encoding="utf-8") as f:
            for target in re.findall(r"pip install \\?\"?([\w.-]+\[[\w,]+\])", f.read()):
                found.append((module, target))
    commands = []
    for where, target in found:
        name, _, extras = target.partition("[")
        commands.append((where, name, extras.rstrip("]").split(",") if extras else []))
    return commands


def test_every_install_command_names_this_distribution(setup_kwargs):
    assert setup_kwargs["name"] == DISTRIBUTION
    ours = [c for c in _install_commands() if canonicalize_name(c[1]) in (DISTRIBUTION, "keras-vit")]
    # The README's three, the notebooks' four, and the export, plots and train hints at least.
    assert len(ours) >= 10 and {c[0].split()[0] for c in ours} >= {"README.md", "colab/quickstart.ipynb"}
    for where, name, extras in ours:
        assert canonicalize_name(name) == DISTRIBUTION, f"{where} installs {name!r}, not {DISTRIBUTION!r}"
        for extra in extras:
            assert extra in setup_kwargs["extras_require"], f"{where}: setup.py has no [{extra}] extra"
    hints = {
        where for where, _, extras in ours if extras and not where.startswith(("README", "docs/", "colab"))
    }
    assert {"keras_vit.serving", "keras_vit.visualize.figures", "trainers"} <= hints, hints


def test_the_index_page_links_to_files_that_exist_on_github(setup_kwargs):
    """The package index shows the README alone: a relative link there (docs/install.md, #a-section)
    leads nowhere, so its copy names each file and section on GitHub, and each file exists."""
    home = setup_kwargs["url"]
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        assert re.search(r"^repo_url: (\S+)$", f.read(), re.MULTILINE).group(1) == home
    description = setup_kwargs["long_description"]
    links = re.findall(r"\]\(([^)\s]+)\)", description)
    files = [link for link in links if link.startswith(f"{home}/blob/main/")]
    assert f"{home}/blob/main/docs/install.md" in files and f"{home}#where-everything-else-lives" in links
    for link in links:
        assert link.startswith(("https://", "http://")), f"a relative link on the index page: {link}"
    for link in files:
        path = link[len(f"{home}/blob/main/") :].partition("#")[0]
        assert os.path.exists(os.path.join(ROOT, path)), link
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    # Only the links change: the README with them made relative again is the same text.
    assert (
        re.sub(re.escape(f"{home}/blob/main/") + "|" + re.escape(home) + "(?=#)", "", description) == readme
    )


def test_each_backend_has_its_extra_named_as_keras_names_it(requires):
    # `pip install "keras-vision-transformer[jax]"`: the name KERAS_BACKEND takes, which the
    # one line of `import keras_vit` without a backend names (keras_vit/startup.py).
    assert set(startup.BACKEND_MODULES) == BACKENDS
    for backend in BACKENDS:
        assert requires[backend] == {backend}, (backend, requires[backend])
    assert not requires["install"] & BACKENDS  # the library alone leaves the choice to the user


def test_the_install_page_lists_every_extra(setup_kwargs):
    with open(os.path.join(ROOT, "docs", "install.md"), encoding="utf-8") as f:
        page = f.read()
    table = page[page.index("## Extras") : page.index("## The `keras-vit` package")]
    listed = set(re.findall(r"`\[(\w+)\]`", table))
    assert listed == set(setup_kwargs["extras_require"]), listed ^ set(setup_kwargs["extras_require"])


def test_the_version_is_written_once(setup_kwargs):
    """keras_vit/_version.py holds it; setup.py reads that file, keras_vit.__version__ imports it,
    and the changelog's first release heading names it."""
    with open(os.path.join(ROOT, "keras_vit", "_version.py"), encoding="utf-8") as f:
        (version,) = re.findall(r'^__version__ = "([^"]+)"$', f.read(), re.MULTILINE)
    assert setup_kwargs["version"] == version == keras_vit.__version__
    assert Version(version) >= Version("0.2.0")  # 0.2.0 breaks 0.1.0's checkpoints (the changelog)
    with open(os.path.join(ROOT, "docs", "changelog.md"), encoding="utf-8") as f:
        headings = re.findall(r"^## (.+)$", f.read(), re.MULTILINE)
    assert headings[0].split()[0] == version, headings[0]
    for module, path in find_modules(ROOT, PACKAGES).items():
        with open(path, encoding="utf-8") as f:
            assert not re.search(r"__version__ = ", f.read()) or module == "keras_vit._version", module
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        assert version not in f.read()


def _make_rule(makefile, target):
    """(prerequisites, recipe lines) of a Makefile rule."""
    match = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)*)", makefile, re.MULTILINE)
    assert match, target
    return match.group(1), match.group(2)


def test_make_install_is_the_first_hour_and_the_tests_add_their_extras():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        makefile = f.read()
    extras = {}
    for stamp in ("$(STAMP)", "$(TEST_STAMP)"):
        prerequisites, recipe = _make_rule(makefile, stamp)
        (installed,) = re.findall(r'pip install .*-e "\.\[([a-z,]+)\]"', recipe)
        extras[stamp] = set(installed.split(","))
        # Both reinstall when setup.py changes (the test stamp through the first).
        assert "setup.py" in prerequisites.split("|")[0] or "$(STAMP)" in prerequisites, stamp
    # `make install`: the README's First hour (trainers, export); not the suite's or the docs' extras.
    assert extras["$(STAMP)"] == {"train", "export"}
    # [docs]: `make test` builds the documentation site (`make docs`) before the tests.
    assert extras["$(TEST_STAMP)"] >= {"test", "plots", "docs"}
    assert _make_rule(makefile, "install")[0].split() == ["$(STAMP)"]
    for target in ("test", "test-fast", "docs", "lint"):
        assert "$(TEST_STAMP)" in _make_rule(makefile, target)[0].split(), target
    assert "$(STAMP)" in _make_rule(makefile, "demo")[0].split()


# --- the library without TensorFlow -------------------------------------------------------


def test_the_library_works_on_jax_with_no_tensorflow_installed(jax_without_tensorflow):
    """On JAX, with TensorFlow, TFDS, TensorBoard, scikit-learn and ml_collections impossible to
    import (an environment that installed the library alone): a ViT builds, saves its weights,
    loads them into another model and builds from the file alone with the same logits, and
    `weights.describe` reads the file; none of those packages is imported on the way. Catches a
    dependency of the library on a trainer or test package. (The child, tests/
    jax_without_tensorflow.py, is shared with test_fileio and test_predict.)"""
    jax_without_tensorflow.part("library")


# --- a fresh environment: the library, then each backend's extra -------------------------------

_FRESH_PROGRAM = (
    "import keras_vit\n"  # first, as the Quickstart does
    "import keras, numpy as np\n"
    "model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, "
    "mlp_dim=64, num_classes=3)\n"
    "print(keras.backend.backend(), keras_vit.__version__, tuple(model(np.zeros((1, 32, 32, 3))).shape))\n"
)


@pytest.fixture(scope="module")
def fresh_library(tmp_path_factory, setup_kwargs):
    """A new virtual environment with what `pip install .` of a clone puts there: the wheel built
    from the sources (no dependencies fetched), and the library's requirements, linked from this
    environment (tests/fresh_venv.py). Its python, and a folder per backend extra with what that
    extra adds."""
    import shutil

    import fresh_venv

    root = tmp_path_factory.mktemp("fresh")
    python, site = fresh_venv.create(str(root / "venv"))
    source = root / "source"  # a copy: building in the checkout would leave build/ there
    for name in ("keras_vit", "trainers", "configs"):
        shutil.copytree(os.path.join(ROOT, name), source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "README.md"):
        shutil.copy(os.path.join(ROOT, name), source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "--target", site, str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    owners = fresh_venv.top_level_owners()
    library = fresh_venv.requirement_closure(setup_kwargs["install_requires"])
    fresh_venv.link_distributions(library, site, owners)
    extras = {}
    for backend in startup.BACKEND_MODULES:
        extras[backend] = str(root / "extras" / backend)
        os.makedirs(extras[backend])
        added = fresh_venv.requirement_closure(setup_kwargs["extras_require"][backend], skip=library)
        fresh_venv.link_distributions(added, extras[backend], owners)
    os.makedirs(root / "home")  # the programs' working directory and home: nothing importable there
    return python, extras, root / "home"


def _run_fresh(python, cwd, backend, extra_folder=None, args=("-c", _FRESH_PROGRAM)):
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),  # no ~/.keras/keras.json of the machine's user
        "KERAS_BACKEND": backend,
        "PYTHONNOUSERSITE": "1",
        "JAX_PLATFORMS": "cpu",
        "CI": "true",  # `import openvino` sends no usage telemetry (tests/conftest.py)
    }
    if extra_folder:
        env["PYTHONPATH"] = extra_folder
    return subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # builds a wheel, then starts each backend in a fresh interpreter: about a minute
def test_a_fresh_install_says_which_extra_brings_the_backend_then_works_with_it(fresh_library, setup_kwargs):
    python, extras, home = fresh_library
    for backend, folder in extras.items():
        proc = _run_fresh(python, home, backend)
        assert proc.returncode == 1, proc.stderr[-3000:]
        # One line, no traceback: the backend is named, with the extra that installs it.
        assert proc.stderr == startup.no_backend_message(backend, {"KERAS_BACKEND": backend}, {}) + "\n"
        proc = _run_fresh(python, home, backend, folder)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout == f"{backend} {setup_kwargs['version']} (1, 3)\n", proc.stdout
        assert proc.stderr == "", proc.stderr[-3000:]  # quiet on every backend
    # The trainers, without their extra: the line names [train], which brings TensorFlow and TFDS.
    proc = _run_fresh(python, home, "", args=("-m", "trainers.finetune", "--dataset=digits"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr == startup.no_backend_message("tensorflow", {}, {"trainers": None}) + "\n"
