"""python -m keras_vit.visualize: figures and numbers from image files, and its one-line errors."""

import json
import os
import runpy
import sys
import warnings
from unittest import mock

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit import weights
from keras_vit.visualize import __main__ as cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = [f"{name}.png" for name in cli.FIGURES]
TINY = dict(patch_size=4, hidden_size=12, num_layers=2, num_heads=2, mlp_dim=8)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Two photos of other sizes than the model's, a JPEG and a PNG, and a file that is not an image."""
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (45, 30, 3), dtype=np.uint8)).save(folder / "a.jpg")
    Image.fromarray(rng.integers(0, 256, (20, 70), dtype=np.uint8)).save(folder / "b.png")  # grayscale
    (folder / "notes.jpg").write_text("not an image file")
    return folder


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """What a finished trainer run leaves: config.json, model.npz and class_names.json."""
    folder = tmp_path_factory.mktemp("run")
    model = keras_vit.create_model("ViT-Ti_16", image_size=16, num_classes=3, **TINY)
    weights.save_npz(model, str(folder / "model.npz"))
    (folder / "config.json").write_text(json.dumps({"model": "ViT-Ti_16", "image_size": 16}))
    (folder / "class_names.json").write_text(json.dumps(["cat", "dog", "owl"]))
    return folder


def test_workdir_writes_four_figures_and_the_numbers(photos, workdir, tmp_path, capsys):
    out = tmp_path / "figures"
    images = f"{photos / 'a.jpg'},{photos / 'b.png'}"
    assert cli.main([f"--workdir={workdir}", f"--images={images}", f"--out={out}"]) == 0
    assert sorted(os.listdir(out)) == sorted([*FIGURES, "numbers.json"])
    for name in FIGURES:
        with Image.open(out / name) as image:
            assert image.format == "PNG" and min(image.size) > 200
    numbers = json.loads((out / "numbers.json").read_text())
    assert numbers["image_size"] == [16, 16]
    assert np.array(numbers["rollout"]).shape == (2, 4, 4)
    assert np.array(numbers["attention_distance"]).shape == (2, 2)
    assert np.array(numbers["position_similarity"]).shape == (4, 4, 4, 4)
    assert np.array(numbers["components"]).shape == (12, 4, 4, 3)  # at most D components
    assert all(p.split(" ")[0] in ("cat", "dog", "owl") for p in numbers["predictions"])
    assert "wrote" in capsys.readouterr().out


def test_an_official_variant_at_another_size(photos, tmp_path):
    args = ["--model=ViT-Ti_16", "--weights=none", "--image_size=48", f"--images={photos / 'a.jpg'}"]
    args.append(f"--out={tmp_path}")
    assert cli.main([*args, "--num_components=3"]) == 0
    numbers = json.loads((tmp_path / "numbers.json").read_text())
    assert np.array(numbers["rollout"]).shape == (1, 3, 3)
    assert np.array(numbers["attention_distance"]).shape == (12, 3)
    assert np.array(numbers["components"]).shape == (3, 16, 16, 3)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model=ViT-Ti_16", "--weights=none", "--images=missing.jpg"], "cannot read the file"),
        (["--model=ViT-Ti_16", "--weights=none", "--images={photos}/notes.jpg"], "not an image file"),
        (["--model=ViT-Q_3", "--weights=none", "--images={photos}/a.jpg"], "unknown --model"),
        (["--images={photos}/a.jpg"], "name the model"),
        (
            ["--model=ViT-Ti_16", "--weights={workdir}/model.npz", "--images={photos}/a.jpg"],
            "does not fit --model=ViT-Ti_16",
        ),
        (["--workdir={photos}", "--images={photos}/a.jpg"], "not a trainer's workdir"),
        (["--workdir={workdir}", "--model=ViT-Ti_16", "--images={photos}/a.jpg"], "either --workdir or"),
        (
            ["--workdir={workdir}", "--image_size=32", "--images={photos}/a.jpg"],
            "--image_size is for --weights",
        ),
    ],
    ids=[
        "missing",
        "not-an-image",
        "unknown-model",
        "no-model",
        "other-variant",
        "not-a-workdir",
        "both",
        "size-of-a-run",
    ],
)
def test_bad_input_is_one_line_and_status_2(args, message, photos, workdir, tmp_path, capsys):
    args = [a.format(photos=photos, workdir=workdir) for a in args]
    assert cli.main([*args, f"--out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("out", ["{notes}", "{notes}/figures"])
def test_an_out_folder_that_cannot_be_made_is_one_line_before_the_model(photos, tmp_path, capsys, out):
    """--out a file, or under one: it was makedirs' own words ("[Errno 17] File exists",
    "[Errno 20] Not a directory"), after the model was built."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    out = out.format(notes=notes)
    args = ["--model=ViT-Ti_16", "--weights=none", f"--images={photos}/a.jpg", f"--out={out}"]
    assert cli.main(args) == 2
    assert capsys.readouterr().err == (
        f"error: {out} cannot be written: {notes} is a file, not a folder; choose another output path\n"
    )
    assert notes.read_text() == "mine\n"


def test_the_command_line_exits_2_without_a_traceback(tmp_path, capsys):
    """`python -m keras_vit.visualize` with an unreadable image: exit status 2 and one line, no
    traceback. Runs the package's __main__ as the interpreter does (runpy, in this process):
    catches a __main__ that drops main()'s status (exit 0) or lets the error escape."""
    args = ["--model=ViT-Ti_16", "--weights=none", "--images=nope.png", f"--out={tmp_path}"]
    with mock.patch.object(sys, "argv", ["visualize", *args]), pytest.raises(SystemExit) as exit:
        with warnings.catch_warnings():  # runpy's note that the module was imported before
            warnings.simplefilter("ignore", RuntimeWarning)
            runpy.run_module("keras_vit.visualize", run_name="__main__", alter_sys=True)
    stderr = capsys.readouterr().err
    assert exit.value.code == 2
    assert "Traceback" not in stderr and "cannot read the file" in stderr
