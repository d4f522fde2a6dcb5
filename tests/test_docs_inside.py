"""docs/guides/inside.md's blocks: attention rollout and the visualize command line."""

import os

import pytest
from docs_standins import (
    SHORT_TINY,
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    pixels,
    replaced,
    run_command,
    run_python,
)
from readme_blocks import ROOT, split_command

import keras_vit


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
    code, _, err = run_command(pretrain, capsys, {"/tmp/vis_pre": run}, extra=SHORT_TINY)
    assert code == 0, err
    stand_ins = {"RUN": run, "/tmp/vis_pre": run, "docs/inputs/": os.path.join(ROOT, "docs", "inputs", "")}
    for index, written in enumerate([*block("visualize-commands").commands, on_the_run]):
        out = str(tmp_path / f"out{index}")
        command = replaced(written, {**stand_ins, "DIR": out, "docs/figures": out}, strict=False)
        _, argv = split_command(command)
        short = ["--image_size=64"] if "--model=" in command else []  # B/16 at 64 px, not 384
        assert visualize_cli.main(argv[3:] + short) == 0, written + capsys.readouterr().err
        assert sum(name.endswith(".png") for name in os.listdir(out)) == 4
