"""docs/guides/data.md's blocks: TFDS data_dirs, ImageNet, image folders, the data Python API and
two workers.
"""

import os
import re
import shutil

import numpy as np
import pytest
from docs_standins import (
    SHORT,
    SHORT_TINY,
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    replaced,
    run_command,
    run_python,
    trainer_config,
    unrunnable,
)
from readme_blocks import split_command
from trainer_cli import free_ports, read_results, start_cli, wait_all


@pytest.mark.slow  # 17 s: the block's training runs
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
    procs, logs = [], []
    for index, written in enumerate(commands):
        command = replaced(
            written,
            {"localhost:12345": f"localhost:{ports[0]}", "localhost:12346": f"localhost:{ports[1]}"},
        )
        env, argv = split_command(command.replace("/tmp/mw", str(workdir)))
        assert set(env) == {"TF_CONFIG"} and argv[:3] == ["python", "-m", "trainers.finetune"]
        logs.append(tmp_path / f"worker{index}.log")
        procs.append(start_cli("finetune", [*argv[3:], *SHORT, "--eval_every=0"], env, str(logs[-1])))
    wait_all(procs, logs)
    results = read_results(workdir)
    assert results["replicas"] == 2 and results["steps"] == 2
