"""Every code block of README.md and of the documentation's pages (docs/**/*.md) runs here, so
the docs and the code cannot drift apart.

A block is fetched by the name its mark gives it (see tests/readme_blocks.py and
docs/contributing.md, "The documentation"): `block(NAME)` for a block a test runs or an output
sample it compares, `unrunnable(NAME, REASON)` for the few that cannot run on a CPU machine
without network, whose test still checks every flag they use, and `region(NAME)` for the blocks
of a generated region. Python blocks run as written (with local stand-ins: a Keras cache of
synthetic official checkpoints, TFDS data_dirs prepared offline by ../shared/tools/fake_tfds.py,
temporary paths for /tmp/... and /data/...); commands run with the same stand-ins plus flags that
make them short; output samples are compared with what the code prints.

A block without a mark, a mark no test fetches, a fetched name no page has and a name used twice
fail test_every_block_has_a_test, one line each, naming the page, the line and the heading.
"""

import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import huggingface_hub.constants
import keras
import numpy as np
import pytest
import readme_blocks
import synthetic_checkpoints as synth
import tensorflow_datasets as tfds
from readme_blocks import ROOT, split_command
from trainer_cli import TINY_MODEL, free_ports, make_fake_tfds, read_results

import keras_vit
from configs import finetune as finetune_config
from keras_vit import _clash, checkpoints, weights
from trainers import demo, flags, memory
from trainers.data import tfds_prepare
from trainers.errors import TrainerError

# A trainer run reduced to seconds: two steps of a one-block ViT at 32 px.
SHORT = ["--total_steps=2", "--warmup_steps=1", "--batch_size=8", "--steps_per_loop=1", "--eval_every=0"]
SHORT_TINY = TINY_MODEL + SHORT

BLOCKS = readme_blocks.read()


def block(name):
    """The block marked `<!-- runnable: NAME -->` or `<!-- sample: NAME -->`."""
    return readme_blocks.named(BLOCKS, name, "block")


def unrunnable(name, reason):
    """The block marked `<!-- unrunnable: NAME -->`; `reason` says why it cannot run here."""
    assert reason, f"say why {name!r} cannot run here"
    return readme_blocks.named(BLOCKS, name, "unrunnable")


def region(name):
    """The blocks of the generated region `<!-- NAME:begin ...`, in order."""
    found = [b for b in BLOCKS if b.region == name]
    assert found, f"the docs have no generated region {name!r} with code blocks"
    return found


def test_every_block_has_a_test():
    problems = readme_blocks.problems(BLOCKS, readme_blocks.claims(__file__))
    assert not problems, "\n".join(problems)


def test_a_new_block_is_named_with_its_heading_and_page(tmp_path):
    new = (
        "\n## Serving\n\nStart it:\n\n```bash\npython -m keras_vit.serve --port=8500 \\\n    --model=x\n```\n"
    )
    (tmp_path / "deploy.md").write_text("# Deploy\n" + new, encoding="utf-8")
    found = BLOCKS + readme_blocks.read([str(tmp_path / "deploy.md")])
    (problem,) = readme_blocks.problems(found, readme_blocks.claims(__file__))
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
    claims = readme_blocks.claims(__file__) + readme_blocks.claims(str(tests))
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


# --- stand-ins -------------------------------------------------------------------------------


def replaced(text, replacements, strict=True):
    """text with each placeholder replaced; strict: a placeholder the text lacks is an error (drift)."""
    for old, new in replacements.items():
        assert old in text or not strict, f"{old!r} is no longer in the docs' text {text[:80]!r}"
        text = text.replace(old, new)
    return text


def run_python(python_block, namespace=None, replacements=None):
    """Runs a Python block of the docs as a notebook cell: (namespace, value of its last expression)."""
    source = replaced(python_block.text, replacements or {})
    tree = ast.parse(source)
    namespace = {} if namespace is None else namespace
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, python_block.where, "exec"), namespace)
    value = None
    if last is not None:
        value = eval(compile(ast.Expression(last.value), python_block.where, "eval"), namespace)
    return namespace, value


def pixels(*shape):
    return np.random.default_rng(0).uniform(0, 255, shape).astype("float32")


@pytest.fixture(scope="module")
def registry_cache(tmp_path_factory):
    """KERAS_HOME whose cache holds synthetic files of registry entries, written when asked for."""
    home = tmp_path_factory.mktemp("keras_home")
    os.makedirs(home / "models")

    def put(name, variant):
        entry = checkpoints.lookup(name, variant)
        path = home / "models" / entry.file_name
        if not path.exists():
            params = synth.vit_jax_params(
                0,
                image_size=entry.image_size,
                num_classes=entry.num_classes,
                representation_size=entry.representation_size,
                **keras_vit.VARIANTS[variant],
            )
            synth.save(path, params)
        return str(home)

    return put


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    """A TFDS data_dir with oxford_iiit_pet (10 per class) and cifar10 (25 per class)."""
    data_dir = tmp_path_factory.mktemp("tfds")
    make_fake_tfds(data_dir, "oxford_iiit_pet", per_class=10, test_per_class=1)
    make_fake_tfds(data_dir, "cifar10", per_class=25, test_per_class=2)
    return str(data_dir)


@pytest.fixture
def default_tfds(monkeypatch, tfds_dir):
    """TFDS's default data_dir (what commands without --data_dir read) is the stand-in one."""
    monkeypatch.setenv("TFDS_DATA_DIR", tfds_dir)
    monkeypatch.setattr(tfds.core.constants, "DATA_DIR", tfds_dir)
    return tfds_dir


@pytest.fixture(autouse=True)
def fresh_keras():
    yield
    keras.backend.clear_session()


def run_command(command, capsys, replacements=None, extra=()):
    """Runs a `python -m MODULE ...` command of the docs in-process: (exit code, stdout, stderr)."""
    env, argv = split_command(replaced(command, replacements or {}, strict=False))
    assert not env and argv[:2] == ["python", "-m"], command
    module = importlib.import_module(argv[2])
    args = [a for a in argv[3:] if a != "..."] + list(extra)
    if argv[2].startswith("trainers."):  # absl-style: argv[0] is the program
        args = [argv[2].rsplit(".", 1)[1], *args]
    capsys.readouterr()
    code = module.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def trainer_config(command, replacements=None):
    """The config a trainer command resolves, through the trainer's own flag parser."""
    _, argv = split_command(replaced(command, replacements or {}, strict=False))
    module = importlib.import_module(argv[2])
    program = argv[2].rsplit(".", 1)[1]
    return flags.parse_flags([program, *[a for a in argv[3:] if a != "..."]], module.get_config)


# --- Two commands, Install, Tests, Layout ----------------------------------------------------


@pytest.mark.slow
def test_first_hour_commands(tmp_path, capsys, monkeypatch):
    """The block runs top to bottom as written, with fewer steps and a smaller stand-in."""
    from keras_vit import export as export_cli
    from keras_vit import predict as predict_cli
    from keras_vit.visualize import __main__ as visualize_cli

    first_hour = block("first-hour")
    assert first_hour.heading == "First hour on a CPU" and len(first_hour.commands) == 8
    prose = first_hour.before
    assert "expect an accelerator" in prose and "official" in prose and "ImageNet-21k weights" in prose
    # A clone of the repository alone runs it: what it reads is in the package or tracked in git
    # (the pets stand-in is made by trainers.prepare), nothing outside the repository.
    assert "../" not in first_hour.text and "shared" not in first_hour.text
    tracked = subprocess.run(
        ["git", "ls-files", "docs/inputs"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for path in re.findall(r"docs/inputs/[\w.-]+\.png", first_hour.text):
        assert path in tracked, f"{path} is not in the repository"
    stand_ins = {
        "runs/cpu": str(tmp_path / "cpu"),
        "docs/inputs/": os.path.join(ROOT, "docs", "inputs", ""),
    }
    shorter = {  # flags appended to each command (the last value of a flag wins)
        "trainers.finetune --dataset=digits": ["--total_steps=20", "--warmup_steps=2", "--steps_per_loop=10"],
        "trainers.finetune --dataset=oxford_iiit_pet": [
            "--total_steps=4",
            "--warmup_steps=1",
            "--steps_per_loop=2",
        ],
        "trainers.prepare --dataset=oxford_iiit_pet": ["--stand_in=1"],
    }
    workdir = tmp_path / "cpu"
    for written in first_hour.commands:
        command = replaced(written, stand_ins, strict=False)
        extra = next((flags for key, flags in shorter.items() if key in written), [])
        _, argv = split_command(command)
        if argv[0] == "tensorboard":
            executable = shutil.which("tensorboard", path=os.path.dirname(sys.executable))
            proc = subprocess.run(
                [executable, *argv[1:], "--inspect"], capture_output=True, text=True, timeout=120
            )
            assert proc.returncode == 0 and "loss" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
        elif argv[2].startswith("trainers."):
            code, _, err = run_command(command, capsys, extra=extra)
            assert code == 0, written + err
        else:
            cli = {"keras_vit.predict": predict_cli, "keras_vit.export": export_cli}.get(
                argv[2], visualize_cli
            )
            capsys.readouterr()
            assert cli.main(argv[3:]) == 0, written + capsys.readouterr().err
            out = capsys.readouterr().out
            if argv[2] == "keras_vit.predict":
                assert "digit_0.png:" in out and "digit_1.png:" in out, out
    assert read_results(workdir / "digits")["steps"] == 20
    assert read_results(workdir / "pets")["steps"] == 4
    stand_in = tfds.builder("oxford_iiit_pet", data_dir=str(workdir / "fakepets")).info.splits
    assert (stand_in["train"].num_examples, stand_in["test"].num_examples) == (37, 37)  # --stand_in=1
    assert "25shot_accuracy" in read_results(workdir / "digits_fewshot")
    assert os.path.getsize(workdir / "digits.onnx") > 0
    assert sum(name.endswith(".png") for name in os.listdir(workdir / "digits_figures")) == 4


PYTEST = ".venv/bin/python -m pytest "


def test_make_targets():
    expected = {
        "make demo": ["-m trainers.demo --workdir=runs/demo"],
        "make test": [
            "ruff check .",
            "ruff format --check .",
            "mkdocs build --strict",
            "-m pytest",
            "--dist=loadfile",
        ],
        "make format": ["ruff format ."],
    }
    commands = block("two-commands").commands + block("tests").commands
    makes = [command for command in commands if not command.startswith(PYTEST)]  # test_pytest_commands
    assert len(makes) == 4
    for command in makes:
        assert command in expected, command
        plan = subprocess.run(
            ["make", "-n", "-C", ROOT, command.split()[1]], capture_output=True, text=True, check=True
        ).stdout
        for step in expected[command]:
            assert step in plan, f"`{command}` no longer runs {step!r}:\n{plan}"


def test_pip_installs_name_real_extras():
    reason = "installs from the package registry"
    commands = [
        *unrunnable("install", reason).commands,
        *unrunnable("install-from-clone", reason).commands,
        # The first command of these blocks; their tests run the rest.
        block("benchmarks-cpu").commands[0],
        block("benchmarks-gpu").commands[0],
        block("tfds").commands[0],
        block("export").commands[0],
    ]
    assert all(command.startswith("pip install ") for command in commands), commands
    setup = open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read()
    name = re.search(r"name=\"([^\"]+)\"", setup).group(1)
    assert name == "keras-vision-transformer"  # not "keras-vit": an unrelated project's name
    # Other packages a command of the docs installs beside ours, and why.
    others = {"jax[cuda13]": "JAX's CUDA build, for benchmarks.accelerator on a GPU"}
    for command in commands:
        _, argv = split_command(command)
        target = argv[-1]
        assert target.split("[")[0] in (name, "."), command
        packages = [a for a in argv[2:-1] if not a.startswith("-") and a != target]
        assert set(packages) <= set(others), command
        for extra in re.findall(r"\[(\w+)\]", target):
            assert re.search(rf"[\"']{extra}[\"']\s*:", setup), f"setup.py has no [{extra}] extra"


def test_no_backend_sample():
    # Install's sample is the line `import keras_vit` prints (tests/test_packaging.py runs it in a
    # fresh environment without the backend).
    from keras_vit import startup

    assert block("no-backend").text.strip() == startup.no_backend_message("jax", {"KERAS_BACKEND": "jax"}, {})


def test_clash_fix_commands():
    # The install page's fix is the one the clash message prints (tests/test_clash.py triggers it).
    fix = unrunnable("clash-fix", "changes the installed packages").commands
    said = _clash.message("/site-packages/keras_vit", ["vit.py"])
    assert len(fix) == 2 and all(f"`{command}`" in said for command in fix), (fix, said)


@pytest.mark.slow
def test_pytest_commands():
    commands = [command for command in block("tests").commands if command.startswith(PYTEST)]
    assert len(commands) == 2  # the rest are test_make_targets'
    for command in commands:
        _, argv = split_command(command)
        proc = subprocess.run(
            [sys.executable, *argv[1:], "--collect-only", "-q", "-p", "no:cacheprovider"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, command + proc.stdout[-2000:] + proc.stderr[-2000:]
        collected = re.search(r"(\d+)(?:/\d+)? tests? collected", proc.stdout)
        assert collected and int(collected.group(1)) > 0, command


def test_layout_block():
    text = block("layout").text
    for folder in re.findall(r"^(\w+)/ ", text, re.MULTILINE):
        assert os.path.isdir(os.path.join(ROOT, folder)), folder
    keras_vit_line = re.search(r"^keras_vit/ +([\s\S]*?)\ntrainers/", text).group(1)
    names = re.sub(r"\([^)]*\)", "", re.sub(r"the library[^:]*:", "", keras_vit_line))
    for name in filter(None, (n.strip() for n in re.split(r"[,;/\s]+|\band\b", names))):
        assert _module_exists("keras_vit", name), f"keras_vit/{name} is in the layout of docs/contributing.md"
    for line in re.findall(r"^ {17}(\S[^\n]*?)  +\S", text, re.MULTILINE):
        for name in re.split(r"[,\s]+", line.replace("data/", "data").replace("evaluators/", "evaluators")):
            if name:
                assert _module_exists("trainers", name), (
                    f"trainers/{name} is in the layout of docs/contributing.md"
                )


def _module_exists(package, name):
    base = os.path.join(ROOT, package, name)
    return os.path.exists(base + ".py") or os.path.isdir(base)


# --- Quickstart, scaling, checkpoints, any size, visualize ------------------------------------


def test_quickstart():
    quickstart = block("quickstart")
    assert quickstart.page == "README.md"
    ns, _ = run_python(quickstart)
    assert tuple(ns["probs"].shape) == (1, 1000)


@pytest.mark.slow
def test_quickstart_continued():
    ns, _ = run_python(block("quickstart-continued"))
    assert tuple(ns["probs"].shape) == (1, 1000)
    assert ns["tokens"].output_shape == (None, 197, 384) and ns["pooled"].output_shape == (None, 384)
    assert [m.shape for m in ns["maps"]] == [(2, 4, 65, 65)] * 4
    assert ns["model"].num_classes == 10 and ns["model"].count_params() > 90e6  # the R50 hybrid


def test_constructor_signature():
    ns, model = run_python(block("constructor"), {"keras_vit": keras_vit})
    assert model.output_shape == (None, 1000) and model.image_size == (224, 224)


@pytest.mark.slow
def test_scaling_inputs(registry_cache, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", registry_cache("imagenet21k+imagenet2012", "ViT-B_16"))
    images = pixels(1, 384, 384, 3)
    ns, _ = run_python(block("scaling-inputs"), {"keras_vit": keras_vit, "images": images})
    # `preds` is the raw model's on preprocess_input(images): the same as the default model's.
    np.testing.assert_allclose(ns["preds"], ns["model"].predict(images, verbose=0), atol=1e-5)


@pytest.mark.slow
def test_pretrained_checkpoints(registry_cache, monkeypatch, tmp_path, capsys):
    for name, variant in (
        ("imagenet21k+imagenet2012", "ViT-B_16"),
        ("augreg-imagenet21k", "ViT-B_16"),
        ("imagenet21k", "ViT-L_16"),
    ):
        monkeypatch.setenv("KERAS_HOME", registry_cache(name, variant))
    on_disk = synth.save(tmp_path / "ViT-B_16.npz", synth.vit_jax_params(1, image_size=224, **synth_b16()))
    ns, _ = run_python(
        block("pretrained"), {"images": pixels(1, 384, 384, 3)}, {"/data/ViT-B_16.npz": on_disk}
    )
    top3 = ast.literal_eval(capsys.readouterr().out.strip().splitlines()[-1].replace("np.float32", ""))
    assert len(top3) == 1 and len(top3[0]) == 3  # (class id, name, score) for the one image
    assert ns["features"].output_shape == (None, 1024)  # the L/16 file's pre-logits kept
    assert ns["model"].num_classes == 10


def synth_b16():
    return keras_vit.VARIANTS["ViT-B_16"]


@pytest.mark.slow
def test_any_size_block(registry_cache, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", registry_cache("imagenet21k+imagenet2012", "ViT-B_16"))
    namespace = {
        "keras_vit": keras_vit,
        "images_384": pixels(1, 384, 384, 3),
        "images_160x320": pixels(1, 160, 320, 3),
    }
    ns, out = run_python(block("any-size"), namespace)
    assert tuple(out.shape) == (1, 1000)
    assert ns["model"].token_grid((160, 320)) == (10, 20)


def test_visualize_block():
    model = keras_vit.ViT_Ti16(input_shape=(None, None, 3))
    ns, _ = run_python(block("visualize"), {"model": model, "images": pixels(1, 64, 96, 3)})
    assert ns["rollout"].shape == (1, 4, 6)
    assert ns["distance"].shape == (12, 3)
    assert ns["similarity"].shape == (14, 14, 14, 14)


@pytest.mark.slow
def test_visualize_commands(registry_cache, monkeypatch, tmp_path, capsys):
    from PIL import Image

    from keras_vit.visualize import __main__ as visualize_cli

    monkeypatch.setenv("KERAS_HOME", registry_cache("imagenet21k+imagenet2012", "ViT-B_16"))
    monkeypatch.chdir(tmp_path)
    Image.fromarray(pixels(300, 200, 3).astype("uint8")).save("a.jpg")
    Image.fromarray(pixels(50, 90, 3).astype("uint8")).save("b.png")
    run = str(tmp_path / "run")
    pretrain, on_the_run = block("visualize-run").commands
    code, _, err = run_command(pretrain, capsys, {"/tmp/vis_pre": run}, extra=SHORT)
    assert code == 0, err
    stand_ins = {"RUN": run, "/tmp/vis_pre": run, "docs/inputs/": os.path.join(ROOT, "docs", "inputs", "")}
    for index, written in enumerate([*block("visualize-commands").commands, on_the_run]):
        out = str(tmp_path / f"out{index}")
        command = replaced(written, {**stand_ins, "DIR": out, "docs/figures": out}, strict=False)
        _, argv = split_command(command)
        short = ["--image_size=64"] if "--model=" in command else []  # B/16 at 64 px, not 384
        assert visualize_cli.main(argv[3:] + short) == 0, written + capsys.readouterr().err
        assert sum(name.endswith(".png") for name in os.listdir(out)) == 4


# --- Pretrained checkpoints: downloads, converting, errors ------------------------------------


def test_download_error_sample(tmp_path, monkeypatch):
    (sample,) = block("download-error").text.strip().splitlines()

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(weights.CheckpointError) as err:
        weights.fetch(checkpoints.lookup("imagenet21k", "ViT-B_16"), cache_dir=str(tmp_path))
    message = str(err.value).replace(str(tmp_path), "/root/.keras")
    pattern = re.escape(sample).replace(re.escape("(...)"), r"\(.+\)")
    assert re.fullmatch(pattern, message), message
    assert os.listdir(tmp_path / "models") == []


@pytest.mark.slow
def test_convert_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    official = synth.vit_jax_params(2, image_size=224, **synth_b16())
    synth.save(tmp_path / "ViT-B_16.npz", official)
    small = synth.vit_jax_params(3, image_size=32, **synth.TI16)
    synth.save(tmp_path / "big_vision.npz", synth.to_big_vision(small))
    for command in block("convert").commands:
        _, argv = split_command(command)
        if argv[3] == "finetuned.weights.h5":  # a keras_vit weights file: the one written above
            shutil.copy("vit_b16.weights.h5", "finetuned.weights.h5")
        code, out, err = run_command(command, capsys)
        assert code == 0, command + err
        assert os.path.exists(argv[4])
    for name, expected in (("finetuned.npz", official), ("vit_jax.npz", small)):
        with np.load(name) as written:
            assert set(written.files) == set(expected), name
            for key in expected:
                np.testing.assert_array_equal(written[key], expected[key])


def _warm_hub_cache(monkeypatch, cache, repo, folder):
    """huggingface_hub offline, with `folder` as its cached snapshot of `repo`."""
    snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
    shutil.copytree(folder, snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_hub_block(tmp_path, monkeypatch):
    # A timm-format ViT-Ti/16 (random, 1000 classes) written by keras_vit's exporter stands in
    # for the Hub file; tests/test_hf_checkpoints.py holds such files against timm itself.
    folder = tmp_path / "vit_tiny_patch16_224"
    keras_vit.hf_export.save_pretrained(keras_vit.ViT_Ti16(), folder, to="timm")
    _warm_hub_cache(monkeypatch, tmp_path / "hub", "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k", folder)
    paths = {name: str(tmp_path / name[5:]) for name in ("/tmp/vit_ti16_timm", "/tmp/vit_ti16_hf")}
    ns, _ = run_python(
        block("hub"),
        {},
        {"/data/vit_tiny_patch16_224": str(folder), **paths},
    )
    assert ns["model"].class_names == keras_vit.labels.imagenet_names(1000)
    assert ns["model_384"].grid_size == (24, 24)
    for path in paths.values():
        assert sorted(os.listdir(path))[:2] == ["config.json", "model.safetensors"]


def test_hub_convert_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    params = synth.vit_jax_params(6, image_size=224, num_classes=3, **synth.TI16)
    synth.save(tmp_path / "finetuned.npz", params)
    (tmp_path / "labels.txt").write_text("cat\ndog\nbird\n")
    run = tmp_path / "pets"  # a finished trainers.finetune workdir
    run.mkdir()
    synth.save(run / "model.npz", params)
    (run / "config.json").write_text(json.dumps({"model": "ViT-Ti_16", "image_size": 224}))
    (run / "class_names.json").write_text(json.dumps(["cat", "dog", "bird"]))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network here
    for command in block("hub-convert").commands:
        _, argv = split_command(command)
        code, out, err = run_command(command, capsys, {"/tmp/pets": str(run)})
        if any(arg.startswith("--push_to_hub") for arg in argv):
            # Written, then refused by the Hub in one line (offline).
            assert code == 2 and err.startswith("error: could not push pets_vit to my-name/vit-b16-pets"), err
            assert err.count("\n") == 1
        else:
            assert code == 0, command + err
        with open(os.path.join(argv[4], "config.json")) as f:
            config = json.load(f)
        names = config.get("label_names") or list(config.get("id2label", {}).values())
        # The .npz alone has no class names (timm's config then has none); --labels and the
        # workdir's class_names.json give them.
        unnamed = argv[3] == "finetuned.npz" and "--labels" not in command
        assert names == ([] if unnamed else ["cat", "dog", "bird"]), command


def test_weights_error_samples(tmp_path):
    wrong_shape, unknown, unreadable = block("weights-errors").text.strip().splitlines()
    s16 = synth.vit_jax_params(4, image_size=32, **keras_vit.VARIANTS["ViT-S_16"])
    ckpt = synth.save(tmp_path / "ckpt.npz", s16)
    broken = tmp_path / "ViT-B_16.npz"
    broken.write_bytes(b"not a zip file")
    for weights_arg, sample in ((ckpt, wrong_shape), ("imagenet22k", unknown), (str(broken), unreadable)):
        with pytest.raises(Exception) as err:
            keras_vit.ViT_B16(weights=weights_arg)
        assert str(err.value).replace(str(tmp_path), "/data") == sample


# --- Training ---------------------------------------------------------------------------------


@pytest.fixture
def small_presets(monkeypatch):
    """configs.finetune.get_config gives the real preset, shrunk to a two-step run of a tiny ViT."""
    original = finetune_config.get_config

    def small(dataset="oxford_iiit_pet"):
        config = flags.parse_flags(["finetune", f"--dataset={dataset}", *SHORT_TINY], original)
        config.unlock()
        return config

    monkeypatch.setattr(finetune_config, "get_config", small)


def test_finetune_from_python(small_presets, default_tfds, tmp_path):
    workdir = str(tmp_path / "pets")
    ns, _ = run_python(block("finetune-python"), replacements={"/tmp/pets": workdir})
    assert ns["results"] == read_results(workdir)  # "the dict also written to WORKDIR/results.json"
    assert set(ns["results"]["eval"]) == {"minival", "test"} and ns["results"]["steps"] == 2


def test_colab_tpu_block(small_presets, tfds_dir, tmp_path):
    replacements = {"/content/tfds": tfds_dir, "/content/runs/pets": str(tmp_path / "pets")}
    with pytest.raises(TrainerError) as err:  # every field is accepted; then: no TPU here
        run_python(block("colab-tpu"), replacements=replacements)
    assert str(err.value).startswith("no TPU found (--tpu=local")
    assert not os.path.exists(tmp_path / "pets")


@pytest.mark.slow
def test_sweep_command(tfds_dir, tmp_path, capsys):
    (command,) = block("sweep").commands
    workdir = tmp_path / "sweep"
    replacements = {"$DATA": tfds_dir, "/tmp/pets_sweep": str(workdir)}
    code, out, err = run_command(command, capsys, replacements, [*SHORT_TINY, "--sweep_lrs=0.01,0.03"])
    assert code == 0, err
    results = read_results(workdir)
    assert results["chosen_lr"] in (0.01, 0.03) and set(results["minival_accuracy"]) == {"0.01", "0.03"}
    assert os.path.exists(workdir / "final" / "model.npz")


def test_accelerator_commands_refuse_without_one(tfds_dir, tmp_path, capsys):
    import tensorflow as tf

    replacements = {
        "$DATA": tfds_dir,
        "gs://BUCKET": str(tmp_path / "bucket"),
        "/tmp/pets": str(tmp_path / "pets"),
        "/data/imagenet": str(tmp_path / "imagenet"),
    }
    commands = [*block("gpu").commands, *block("tpu").commands, *block("pretrain-tpu").commands]
    assert len(commands) == 3
    for command in commands:
        config = trainer_config(command, replacements)  # every flag parses, with its value
        accelerator = config.strategy
        if accelerator == "gpu" and tf.config.list_physical_devices("GPU"):
            continue
        code, out, err = run_command(command, capsys, replacements)
        expected = (
            "no TPU found (--tpu=local"
            if accelerator == "tpu"
            else "--strategy=gpu but TensorFlow sees no GPU"
        )
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, command + err
    assert not os.path.exists(tmp_path / "pets") and not os.path.exists(tmp_path / "bucket")


def test_finetune_from_own_npz(default_tfds, tmp_path, capsys):
    """--weights=FILE alone: the architecture comes from the file (a pre-training run's export)."""
    mine = dict(patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64)
    bucket = tmp_path / "bucket" / "runs" / "vit_b16"
    os.makedirs(bucket)
    synth.save(bucket / "model.npz", synth.vit_jax_params(5, image_size=32, representation_size=32, **mine))
    (command,) = block("finetune-own-npz").commands
    workdir = tmp_path / "pets_from_mine"
    replacements = {"gs://BUCKET": str(tmp_path / "bucket"), "/tmp/pets_from_mine": str(workdir)}
    code, out, err = run_command(command, capsys, replacements, [*SHORT, "--image_size=32"])
    assert code == 0, err
    config = json.loads((workdir / "config.json").read_text())
    assert {k: config[k] for k in mine} == mine
    assert read_results(workdir)["steps"] == 2


def test_masked_patch_command(tmp_path, capsys):
    (command,) = block("masked-patch").commands
    workdir = tmp_path / "digits_mpp"
    code, out, err = run_command(command, capsys, {"/tmp/digits_mpp": str(workdir)}, SHORT_TINY)
    assert code == 0, err
    config = json.loads((workdir / "config.json").read_text())
    assert (config["objective"], config["masked_target"]) == ("masked_patch", "mean_color")
    assert 0 <= read_results(workdir)["eval"]["test"]["masked_patch_accuracy"] <= 1
    assert "masked_patch_accuracy" in out


def test_tensorboard_command(tmp_path):
    import tensorflow as tf

    (command,) = unrunnable("tensorboard", "a server that runs until stopped").commands
    _, argv = split_command(command)
    executable = shutil.which(argv[0], path=os.path.dirname(sys.executable))
    assert executable, "tensorboard is not installed beside this Python (the [train] extra)"
    with tf.summary.create_file_writer(str(tmp_path / "train")).as_default():
        tf.summary.scalar("loss", 0.5, step=1)
    logdir = argv[1].replace("WORKDIR", str(tmp_path))
    proc = subprocess.run([executable, logdir, "--inspect"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "loss" in proc.stdout, proc.stdout + proc.stderr


def test_trainer_error_samples(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tfds_prepare, "_network_available", lambda: False)  # as on a machine offline
    unknown, warmup, not_divisible, not_prepared = block("trainer-errors").text.strip().splitlines()
    empty = tmp_path / "data"
    os.makedirs(empty)
    for args, sample in (
        (["--dataset=digitz", "--total_steps=10"], unknown),
        (["--dataset=oxford_iiit_pet", f"--data_dir={empty}", "--total_steps=10"], warmup),
        (["--dataset=digits", "--strategy=cpu", "--cpu_devices=2", "--batch_size=15"], not_divisible),
        (["--dataset=cifar10", f"--data_dir={empty}"], not_prepared),
    ):
        code, _, err = run_command(
            f"python -m trainers.finetune --workdir={tmp_path / 'run'}", capsys, extra=args
        )
        assert code == 2 and err.strip().replace(str(empty), "/data") == sample
    assert os.listdir(empty) == [] and not os.path.exists(tmp_path / "run")  # nothing written

    sample = block("not-prepared").text.strip()
    with pytest.raises(TrainerError) as err:
        importlib.import_module("trainers.data").get_spec("cifar100", data_dir=str(empty))
    assert str(err.value).replace(str(empty), "/data/tfds") == sample


def test_tfds_block(tfds_dir, tmp_path, capsys):
    replacements = {"/data/tfds": tfds_dir, "/tmp/pets": str(tmp_path / "pets")}
    _, prepare, finetune = block("tfds").commands  # the pip install: test_pip_installs_name_real_extras
    code, out, err = run_command(prepare, capsys, replacements)  # prepared already: no network needed
    assert code == 0 and f"oxford_iiit_pet was already prepared in {tfds_dir}" in out, err
    code, out, err = run_command(finetune, capsys, replacements, SHORT_TINY)
    assert code == 0, err
    assert set(read_results(tmp_path / "pets")["eval"]) == {"minival", "test"}


def test_imagenet_prepared_on_first_use(tmp_path, capsys):
    """Run with a manual_dir that lacks the tars: the trainer tries to prepare ImageNet from it.

    (Preparing even the stand-in ImageNet takes minutes; tests/test_prepare.py does it.)
    """
    (command,) = block("imagenet-first-use").commands
    tars, data_dir = tmp_path / "imagenet_tars", tmp_path / "tfds"
    os.makedirs(tars)
    replacements = {"/data/imagenet_tars": str(tars), "/data/tfds": str(data_dir)}
    code, _, err = run_command(command, capsys, replacements, [f"--workdir={tmp_path / 'run'}"])
    assert code == 2, err
    assert f"imagenet2012 is not prepared in {data_dir} (its manual download files are missing)" in err
    assert not os.path.exists(tmp_path / "run")


def test_voc_command_flags():
    reason = "voc has no offline stand-in (multi-label TFDS data is tested in tests/test_multilabel.py)"
    (command,) = unrunnable("voc", reason).commands
    config = trainer_config(command)
    assert (config.dataset, config.loss, config.batch_size, config.total_steps) == (
        "voc/2007",
        "sigmoid",
        512,
        2000,
    )


def folder_from_tree(tree, root, per_class=6):
    """Writes the image folder a tree sample of the docs draws (its file names, then more of them)."""
    from PIL import Image

    layout, split = {}, None
    for line in tree.splitlines()[1:]:
        entry = re.match(r"^ {2}(\w+)/", line)
        cls = re.match(r"^ {4}(\w+)/\s*(.*)$", line)
        assert entry or (cls and split is not None), f"not a folder-tree line: {line!r}"
        if entry:
            split = layout.setdefault(entry.group(1), {})
        else:
            names = [n for n in cls.group(2).split() if n != "..."]
            split[cls.group(1)] = names + [f"{i:04d}.jpg" for i in range(len(names) + 1, per_class + 1)]
    for split, classes in layout.items():
        for label, (cls, names) in enumerate(sorted(classes.items())):
            os.makedirs(root / split / cls)
            for i, name in enumerate(names):  # one colour per class, sizes vary
                Image.fromarray(np.full((24 + i, 20, 3), 60 + 120 * label, np.uint8)).save(
                    root / split / cls / name
                )
    return {split: sorted(classes) for split, classes in layout.items()}


def console_pattern(sample_line):
    """A sample console line with every number free: the format, not the values, must match."""
    parts = re.split(r"(\d+(?:\.\d+)?)", sample_line)
    return "".join(r"\d+(?:\.\d+)?" if i % 2 else re.escape(p) for i, p in enumerate(parts))


# --- Position embeddings -----------------------------------------------------------------------


def test_posemb_block(tmp_path):
    ns, value = run_python(
        block("posemb"), replacements={"/tmp/relative.npz": str(tmp_path / "relative.npz")}
    )
    assert value == ("relative", (6, 6))
    tables = [w for w in ns["larger"].weights if w.path.endswith("relative_embedding")]
    assert [tuple(t.shape) for t in tables] == [(11, 11, 3, 64)] * 2


@pytest.mark.slow
def test_posemb_commands(capsys, tmp_path):
    """A sincos_2d run, then fine-tuning from its model.npz (which stores no position weights)."""
    pretrain, finetune = block("posemb-commands").commands
    places = {"/tmp/sincos": str(tmp_path / "sincos")}
    code, _, err = run_command(pretrain, capsys, places, extra=SHORT)
    assert code == 0, err
    stored = np.load(tmp_path / "sincos" / "model.npz", allow_pickle=False).files
    assert not any("posembed" in key for key in stored)
    code, _, err = run_command(finetune, capsys, places, extra=SHORT)
    assert code == 0, err
    assert read_results(str(tmp_path / "sincos_ft"))["steps"] == 2


# --- Batches that do not fit -------------------------------------------------------------------
# The training guide's run is ViT-Ti/16 at 384 px on 23 GB (nine minutes here); the test runs the same
# command on a one-block model at 32 px, with the available RAM set so that auto must make the
# same choice (16 micro-batches of 32), and compares the printed lines with the sample's.

TINY_SHAPE = TINY_MODEL[2:]  # its shape flags, without --model and --weights


@pytest.mark.slow
def test_accum_auto_card_command(tfds_dir, tmp_path, capsys, monkeypatch):
    (command,) = block("accum-auto").commands
    sample = block("accum-auto-output").text.strip().splitlines()
    config = trainer_config(command + " " + " ".join(TINY_SHAPE), {"/tmp/fakepets": tfds_dir})
    model = keras_vit.create_model(
        config.model, num_classes=37, **{a[2:].split("=")[0]: int(a.split("=")[1]) for a in TINY_SHAPE}
    )
    need = memory.estimate(model, image_size=32)
    pipeline = memory.input_pipeline_bytes(512, 32)
    # Between what micro-batches of 32 and of 64 need: auto must choose 32, as in the guide's run.
    budget = (need.total(32) + need.total(64)) / 2 + pipeline
    monkeypatch.setattr(memory, "_available_ram", lambda: int(budget / memory.USABLE_FRACTION))
    replacements = {"/tmp/fakepets": tfds_dir, "/tmp/card": str(tmp_path / "card")}
    code, out, err = run_command(command, capsys, replacements, TINY_SHAPE)
    assert code == 0, err
    printed = [line for line in out.splitlines() if line.startswith(("batch:", "step 1/", "step 2/"))]
    assert len(printed) == len(sample), out
    # What --mixed_precision=auto picked says why in words that depend on this machine's CPU.
    reason = re.compile(r"\(auto: [^)]*\)")
    for line, expected in zip(printed, sample):
        line, expected = reason.sub("(auto: REASON)", line), reason.sub("(auto: REASON)", expected)
        assert re.fullmatch(console_pattern(expected), line), (expected, line)
    assert "= 16 micro-batches of 32 (gradients summed); accum_steps auto: 16" in printed[0]
    assert read_results(tmp_path / "card")["steps"] == 2


def test_accum_nothing_fits_sample(tfds_dir, tmp_path, capsys):
    nothing_fits = block("nothing-fits")
    sample = nothing_fits.text.strip()
    # The prose: the card's command (ViT-B/16 at 384 px) with --weights=none, --device_memory_gb=2
    # and float32 (so the sample is the same on a CPU where auto would pick bfloat16).
    assert "--device_memory_gb=2" in nothing_fits.before and "--mixed_precision=none" in nothing_fits.before
    code, _, err = run_command(
        f"python -m trainers.finetune --dataset=oxford_iiit_pet --data_dir={tfds_dir} --weights=none "
        f"--mixed_precision=none --device_memory_gb=2 --workdir={tmp_path / 'run'}",
        capsys,
    )
    assert code == 2 and err.strip() == sample
    assert not os.path.exists(tmp_path / "run")


def test_memory_benchmark_table():
    """The table's estimates are what trainers.memory estimates today, for the models it names."""
    rows = block("memory-table").text.strip().splitlines()[1:]
    assert len(rows) >= 4
    for row in rows:
        case, parameters, measured, estimated, ratio = row.split()
        variant, size, batch = case.split(":")
        model = keras_vit.create_model(
            variant,
            image_size=int(size),
            num_classes=37,
            include_preprocessing=False,
            classifier_activation=None,
        )
        assert model.count_params() == int(parameters.replace(",", "")), case
        assert float(estimated) == round(
            memory.estimate(model, image_size=int(size)).total(int(batch)) / 1e9, 2
        ), case
        assert float(estimated) >= float(measured), case  # an upper bound, as the guide says
        assert float(ratio) == pytest.approx(float(estimated) / float(measured), abs=0.011), case


@pytest.mark.slow
def test_engine_commands(tmp_path):
    """The jax engine's commands, shortened, in child processes (Keras' backend is per process)."""
    commands = block("jax-engine").commands
    assert len(commands) == 2
    for command, replicas in zip(commands, (1, 2)):
        workdir = tmp_path / f"jax{replicas}"
        stand_ins = {"/tmp/digits_jax2": str(workdir), "/tmp/digits_jax": str(workdir)}
        _, argv = split_command(replaced(command, stand_ins, strict=False))
        proc = subprocess.run(
            [sys.executable, *argv[1:], *SHORT],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=ROOT),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "hardware: jax engine, JAX data parallel: " in proc.stdout
        assert read_results(workdir)["replicas"] == replicas


def test_config_described_run(tmp_path, capsys):
    (command,) = block("config-described").commands
    config = trainer_config(command)
    assert set(json.loads(config.evals)) == {"test", "top5"} and config.pp_train.endswith("|mixup(0.2)")
    workdir = tmp_path / "reg_demo"
    code, _, err = run_command(command, capsys, {"/tmp/reg_demo": str(workdir)}, SHORT)
    assert code == 0, err
    results = read_results(workdir)
    assert results["eval"]["test"]["examples"] == 360 and 0 <= results["top5/top5_accuracy"] <= 1


def test_augreg_block(tmp_path, capsys):
    (command,) = block("augreg").commands
    config = trainer_config(command)
    assert (config.augreg, config.randaug, config.mixup, config.stochastic_depth) == (
        "medium2",
        "2,10",
        "level",
        0.1,
    )
    workdir = tmp_path / "digits_augreg"
    code, _, err = run_command(command, capsys, {"/tmp/digits_augreg": str(workdir)}, SHORT_TINY)
    assert code == 0, err
    assert read_results(workdir)["steps"] == 2


def test_folder_run(tmp_path, capsys):
    folder = tmp_path / "pets_folder"
    classes = folder_from_tree(block("folder-tree").text, folder)
    assert classes == {"train": ["cat", "dog"], "test": ["cat", "dog"]}
    workdir = tmp_path / "folder_run"
    replacements = {"/data/pets_folder": str(folder), "/tmp/folder_run": str(workdir)}
    (command,) = block("folder-run").commands
    code, out, err = run_command(command, capsys, replacements, SHORT_TINY)
    assert code == 0, err
    results = read_results(workdir)
    assert set(results["eval"]) == {"minival", "test"} and results["skipped_images"] == 0
    assert results["eval"]["test"]["examples"] == 12  # test/cat and test/dog of the tree


@pytest.mark.slow
def test_console_sample(tmp_path, capsys):
    """The sample is what the command named just above it prints, line for line, numbers aside."""
    console = block("console")
    (command,) = re.findall(r"`(python -m trainers\.\w+ [^`]*)`\s+printed", console.before)
    workdir = re.search(r"--workdir=(\S+)", command).group(1)
    code, out, err = run_command(command.replace(workdir, str(tmp_path / "run")), capsys)
    assert code == 0, err
    printed = [line for line in out.replace(str(tmp_path / "run"), workdir).splitlines() if line.strip()]
    sample = console.text.strip().splitlines()
    assert len(printed) == len(sample), "\n".join(printed)
    # What --mixed_precision=auto picked says why in words that depend on this machine's CPU.
    reason = re.compile(r"\(auto: [^)]*\)")
    for line, expected in zip(printed, sample):
        line, expected = reason.sub("(auto: REASON)", line), reason.sub("(auto: REASON)", expected)
        assert re.fullmatch(console_pattern(expected), line), (expected, line)


def test_multilabel_folder_sample(tmp_path):
    from PIL import Image

    from trainers import data

    rng = np.random.default_rng(0)
    for cls in ("cat", "outdoor"):  # the same names in both classes, different images
        os.makedirs(tmp_path / "train" / cls)
        for i in range(2):
            image = rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)
            Image.fromarray(image).save(tmp_path / "train" / cls / f"{i:04d}.jpg")
    sample = block("multilabel-folder").text.strip().splitlines()
    copies = [line.split()[0].replace("PATH", str(tmp_path)) for line in sample]
    Image.fromarray(np.full((16, 16, 3), 7, np.uint8)).save(copies[0])
    for copy in copies[1:]:
        shutil.copy(copies[0], copy)
    spec = data.get_spec(f"folder:{tmp_path}")
    assert spec.multi_label and spec.class_names == ["cat", "outdoor"]
    assert spec.num_examples["train"] == 5  # x.jpg once, labelled cat and outdoor; 0000/0001.jpg twice each


def test_data_python_api(tfds_dir):
    replacements = {  # the guide's 384 px batches of 512 would need gigabytes here
        "/data/tfds": tfds_dir,
        "image_size=384": "image_size=32",
        '"size": 384': '"size": 32',
        "global_batch_size=512": "global_batch_size=8",
    }
    ns, _ = run_python(block("data-api"), replacements=replacements)
    spec = ns["spec"]
    assert spec.num_classes == 37 and len(spec.class_names) == 37 and spec.skipped == 0
    strategy, train_fn = ns["strategy"], ns["train_fn"]
    images, labels = next(iter(ns["data"].distribute(strategy, train_fn)))
    images = strategy.experimental_local_results(images)
    assert sum(int(x.shape[0]) for x in images) == 8 and tuple(images[0].shape[1:]) == (32, 32, 3)
    test_weights = sum(
        float(np.sum(w))
        for _, _, ws in ns["data"].distribute(strategy, ns["test_fn"])
        for w in strategy.experimental_local_results(ws)
    )
    assert test_weights == spec.num_examples["test"] == 37  # padding has weight 0


@pytest.mark.slow
def test_two_workers_block(tmp_path):
    commands = block("two-workers").commands
    assert len(commands) == 2
    ports = free_ports(2)
    workdir = tmp_path / "mw"
    procs = []
    for written in commands:
        command = replaced(
            written,
            {"localhost:12345": f"localhost:{ports[0]}", "localhost:12346": f"localhost:{ports[1]}"},
        )
        env, argv = split_command(command.replace("/tmp/mw", str(workdir)))
        assert set(env) == {"TF_CONFIG"} and argv[:2] == ["python", "-m"]
        full_env = dict(
            os.environ, PYTHONPATH=ROOT, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", **env
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, *argv[1:], *SHORT, "--eval_every=0"],
                cwd=ROOT,
                env=full_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out[-3000:]
    results = read_results(workdir)
    assert results["replicas"] == 2 and results["steps"] == 2


# --- Few-shot linear probes -------------------------------------------------------------------


@pytest.mark.slow
def test_fewshot_commands(tmp_path, registry_cache, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_HOME", registry_cache("imagenet21k", "ViT-B_16"))
    small = tmp_path / "small_tfds"  # features of hundreds of images per command take minutes here
    make_fake_tfds(small, "cifar10", per_class=1, test_per_class=1)
    make_fake_tfds(small, "oxford_iiit_pet", per_class=1, test_per_class=1)
    pre = tmp_path / "pre"
    os.makedirs(pre)  # a pre-training run's export: Ti/16 with its pre-logits layer
    ti16 = synth.vit_jax_params(6, image_size=224, num_classes=10, representation_size=192, **synth.TI16)
    synth.save(pre / "model.npz", ti16)
    # Feature batches are padded to --batch_size (256), and the padding costs as much as the images
    # (most of the command's time for B/16 at 224 px): one batch of exactly each split's images
    # (10 of cifar10, 37 of oxford_iiit_pet) has none.
    one_shot = [f"--data_dir={small}", "--shots=1", "--seeds=1"]
    expected = {  # dataset -> (extra flags, feature dimension, shots)
        "cifar10": ([*one_shot, "--batch_size=10"], 768, (1,)),  # the pre-logits of the imagenet21k file
        "oxford_iiit_pet": ([*one_shot, "--batch_size=37"], 192, (1,)),  # the pre-logits of the run
        "digits:5-9": ([], 8 * 8 * 3, (1, 5, 10, 25)),  # the raw pixels
    }
    commands = block("fewshot").commands
    assert len(commands) == len(expected)
    for command in commands:
        config = trainer_config(command, {"/tmp/pre": str(pre)})
        extra, dim, shots = expected[config.dataset]
        workdir = str(tmp_path / os.path.basename(config.workdir))
        replacements = {"/tmp/pre": str(pre), config.workdir: workdir}
        code, out, err = run_command(command, capsys, replacements, extra)
        assert code == 0, command + err
        results = read_results(workdir)
        assert results["feature_dim"] == dim, command
        for k in shots:
            assert 0 <= results[f"{k}shot_accuracy"] <= 1 and f"{k}shot_accuracy_std" in results


@pytest.mark.slow
def test_fewshot_evaluator_block(default_tfds):
    model = keras_vit.ViT(
        image_size=224, patch_size=32, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, num_classes=10
    )
    _, results = run_python(block("fewshot-evaluator"), {"model": model})
    for k in (1, 5, 10, 25):
        assert 0 <= results[f"fewshot/cifar10/{k}shot_accuracy"] <= 1
        assert f"fewshot/cifar10/{k}shot_accuracy_std" in results


# --- The demo, benchmarks ---------------------------------------------------------------------


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


# --- Deploy ----------------------------------------------------------------------------------
# The section's commands and blocks run on a short trainers.finetune run on the digits standing
# in for /tmp/digits (its numbers differ from the guide's 1,500-step run, so output samples
# are compared line by line in shape, and exactly where they do not depend on the weights).


@pytest.fixture(scope="module")
def deploy_dir(tmp_path_factory):
    """The files the Deploy section names: cat.jpg and dog.png (scikit-learn's photographs),
    /tmp/digits (a copy of a 20-step digits run), /tmp/digits_test (the guide's own block writes it),
    three.png and eight.png from it."""
    import finetuned_runs
    import PIL.Image
    from sklearn.datasets import load_sample_image

    folder = tmp_path_factory.mktemp("deploy")
    PIL.Image.fromarray(load_sample_image("china.jpg")).save(folder / "cat.jpg", quality=90)
    PIL.Image.fromarray(load_sample_image("flower.jpg")).save(folder / "dog.png")
    shutil.copytree(finetuned_runs.digits_workdir(tmp_path_factory), folder / "digits")
    run_python(block("digits-test-images"), {}, {"/tmp/digits_test": str(folder / "digits_test")})
    for name, digit in (("three.png", "3"), ("eight.png", "8")):
        shutil.copy(
            folder / "digits_test" / digit / sorted(os.listdir(folder / "digits_test" / digit))[0],
            folder / name,
        )
    return folder


def _deploy_paths(folder):
    return {"/tmp/digits": str(folder / "digits")}


def _normalised(text):
    """An output sample with its numbers (which depend on the weights) and spacing taken out."""
    return " ".join(re.sub(r"\d+(\.\d*)?(e[-+]\d+)?", "N", text).split())


@pytest.mark.slow
def test_deploy_predict_blocks(deploy_dir, registry_cache, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_HOME", registry_cache("imagenet21k+imagenet2012", "ViT-B_16"))
    monkeypatch.chdir(deploy_dir)
    on_photos, on_run = block("predict").commands
    code, out, err = run_command(on_photos, capsys)
    assert code == 0, err
    names = [name for _, name in keras_vit.preprocessing.imagenet_class_index()]
    lines = out.splitlines()
    assert lines[0] == "cat.jpg:" and lines[6] == "dog.png:" and len(lines) == 12
    assert all(line.rsplit("  (class ", 1)[0].split("%  ", 1)[1] in names for line in lines[1:6])
    code, out, err = run_command(on_run, capsys, {"photos/*.jpg": "cat.jpg", **_deploy_paths(deploy_dir)})
    assert code == 0, err
    [entry] = json.loads(out)
    assert entry["image"] == "cat.jpg" and [p["name"] for p in entry["predictions"]][0] in "0123456789"
    namespace, top = run_python(block("predict-python"), {}, _deploy_paths(deploy_dir))
    assert namespace["probs"].shape == (1, 1000) and len(top) == 1 and len(top[0]) == 3


@pytest.mark.slow
def test_deploy_predict_sample(deploy_dir, monkeypatch, capsys):
    monkeypatch.chdir(deploy_dir)
    sample = block("predict-output").text.strip().splitlines()
    code, out, err = run_command(sample[0][2:], capsys, _deploy_paths(deploy_dir))
    assert code == 0, err
    assert _normalised(out.strip()) == _normalised("\n".join(sample[1:]))


@pytest.mark.slow
def test_deploy_export_blocks(deploy_dir, monkeypatch, capsys):
    monkeypatch.chdir(deploy_dir)
    paths = _deploy_paths(deploy_dir)
    # The pip install: test_pip_installs_name_real_extras; the B/16 export: test_deploy_unrunnable_commands.
    _, command, _ = block("export").commands
    for format, out in (("onnx", "digits.onnx"), ("litert", "digits.tflite")):
        code, stdout, err = run_command(command, capsys, {"OUT": out, "FORMAT": format, **paths})
        assert code == 0 and stdout.startswith(f"wrote {out} ({format}, "), err
    saved_model, _, _ = block("serving").commands  # docker, curl: test_deploy_unrunnable_commands
    code, stdout, err = run_command(saved_model, capsys, {"/tmp/vit": str(deploy_dir / "vit"), **paths})
    assert code == 0 and "(saved_model, " in stdout, err
    namespace, _ = run_python(block("onnx-litert"))
    assert namespace["probs"].shape == (2, 10)

    # saved_model_cli on the guide's input file: the sample's keys and shapes.
    np.save(
        "digits.npy", np.array([open("three.png", "rb").read(), open("eight.png", "rb").read()], dtype=bytes)
    )
    sample = block("saved-model-cli").text
    _, argv = split_command(sample.replace("\\\n", " ").split("#")[0].strip()[2:])
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    argv = [cli, *[arg.replace("/tmp/digits_sm", str(deploy_dir / "vit" / "1")) for arg in argv[1:]]]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = _normalised(sample[sample.index("Result for") :])
    assert _normalised(proc.stdout[proc.stdout.index("Result for") :]) == expected


@pytest.mark.slow
def test_deploy_model_file_blocks(deploy_dir, monkeypatch, capsys):
    # A .keras file and the run's weights file alone give the run's own probabilities, numbered.
    monkeypatch.chdir(deploy_dir)
    paths = {"/tmp/digits": str(deploy_dir / "digits")}
    run_python(block("save-keras-file"), {}, paths)
    on_the_run = "python -m keras_vit.predict three.png --workdir=/tmp/digits"
    code, expected, err = run_command(on_the_run, capsys, paths)
    assert code == 0, err
    for command in block("predict-model-files").commands:
        code, out, err = run_command(command, capsys, paths)
        assert code == 0, err
        assert out == re.sub(r"  (\d)  \(class ", r"  class \1  (class ", expected)


@pytest.mark.slow
def test_deploy_error_samples(deploy_dir, monkeypatch, capsys):
    from keras_vit import export, predict

    workdir = str(deploy_dir / "digits")
    exists, unknown, not_image, wrong, no_model = block("deploy-errors").text.strip().splitlines()
    monkeypatch.chdir(ROOT)
    assert predict.main(["setup.py", f"--workdir={workdir}"]) == 2
    assert capsys.readouterr().err.strip() == not_image
    monkeypatch.chdir(deploy_dir)
    (deploy_dir / "digits.onnx").touch(exist_ok=True)
    runs = [
        (export.main, ["digits.onnx", "--format=onnx", f"--workdir={workdir}"], exists),
        (export.main, ["x.onnx", "--format=tfjs", f"--workdir={workdir}"], unknown),
        (predict.main, ["three.png", "--model=ViT-B_16", f"--weights={workdir}/model.npz"], wrong),
        (predict.main, ["three.png"], no_model),
    ]
    for main, argv, sample in runs:
        capsys.readouterr()
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == sample.replace("/tmp/digits", workdir)


def test_deploy_random_b16_block(tmp_path):
    namespace, _ = run_python(
        block("random-b16"),
        {},
        {"/tmp/b16_random.npz": str(tmp_path / "b16.npz")},
    )
    described = weights.describe(str(tmp_path / "b16.npz"))
    assert described["num_classes"] == 1000 and described["image_size"] == (224, 224)


@pytest.mark.slow
def test_deploy_unrunnable_commands(tmp_path, deploy_dir, capsys):
    """The B/16 export (minutes on a CPU) parses to the point of writing; the docker and curl
    commands agree with each other and with what the SavedModel's signature takes."""
    import base64

    from keras_vit import export

    _, _, command = block("export").commands  # cannot run: exports a ViT-B/16, minutes on a CPU
    code, _, err = run_command(command, capsys, {"OUT": str(tmp_path), "FORMAT": "saved_model"})
    assert code == 2 and "exists; pass --overwrite" in err  # every flag parsed, the output refused
    # Cannot run: docker needs docker and TensorFlow Serving's image; curl, a running TensorFlow Serving.
    _, docker, curl = block("serving").commands
    name = re.search(r"MODEL_NAME=(\w+)", docker).group(1)
    assert f"/v1/models/{name}:predict" in curl and "-v /tmp/vit:/models/vit" in docker
    body = re.search(r"-d \"(.*)\"", curl).group(1).replace('\\"', '"')
    body = json.loads(body.replace("$(base64 -w0 three.png)", base64.b64encode(b"x").decode()))
    assert list(body) == ["instances"] and list(body["instances"][0]) == ["b64"]
    out = str(deploy_dir / "vit" / "1")  # test_deploy_export_blocks writes it, if it ran
    if not os.path.exists(out):
        model = keras_vit.run_dir.load_run(str(deploy_dir / "digits")).model
        export.export(model, out, "saved_model", [str(d) for d in range(10)])
    import tensorflow as tf

    served = tf.saved_model.load(out).signatures["serving_default"]
    png = (deploy_dir / "three.png").read_bytes()
    result = served(images=tf.constant([base64.b64decode(base64.b64encode(png))]))
    assert sorted(result) == ["classes", "names", "scores"] and result["classes"].shape == (1, 5)
