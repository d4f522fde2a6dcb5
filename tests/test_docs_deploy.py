"""docs/guides/deploy.md's blocks: predicting, exporting, serving and the error samples, on a short
digits run.
"""

import dataclasses
import json
import os
import re
import shutil

import console_scripts
import numpy as np
import pytest
from docs_standins import (
    block,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    run_command,
    run_python,
)
from readme_blocks import ROOT, split_command

import keras_vit
from keras_vit import weights

# The guide's commands and blocks run on a short trainers.finetune run on the digits standing
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
    """An output sample with its numbers (which depend on the weights) and spacing taken out, also
    the padding NumPy puts inside brackets when its columns are wider than a row's numbers
    ("[... 1.0559072e-05 ]")."""
    spaced = " ".join(re.sub(r"\d+(\.\d*)?(e[-+]\d+)?", "N", text).split())
    return spaced.replace("[ ", "[").replace(" ]", "]")


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
    runtimes = block("onnx-litert")
    # Run once, in two parts: the ONNX Runtime and OpenVINO lines, then LiteRT's, which reuse `probs`.
    before_litert, litert = runtimes.text.split("runner = ")
    namespace, _ = run_python(dataclasses.replace(runtimes, text=before_litert))
    on_onnx_runtime = namespace["probs"]
    run_python(dataclasses.replace(runtimes, text="runner = " + litert), namespace)
    assert namespace["probs"].shape == (2, 10) and namespace["probs"] is not on_onnx_runtime
    np.testing.assert_allclose(on_onnx_runtime, namespace["probs"], atol=1e-5)  # LiteRT's
    # OpenVINO computes in bfloat16 on CPUs that have it: the same classes, probabilities to 2e-2.
    openvino_probs = namespace["probs_openvino"]
    assert openvino_probs.argmax(1).tolist() == namespace["probs"].argmax(1).tolist()
    np.testing.assert_allclose(openvino_probs, namespace["probs"], atol=2e-2)

    # saved_model_cli on the guide's input file: the sample's keys and shapes.
    np.save(
        "digits.npy", np.array([open("three.png", "rb").read(), open("eight.png", "rb").read()], dtype=bytes)
    )
    sample = block("saved-model-cli").text
    _, argv = split_command(sample.replace("\\\n", " ").split("#")[0].strip()[2:])
    args = [arg.replace("/tmp/digits_sm", str(deploy_dir / "vit" / "1")) for arg in argv[1:]]
    code, out, err = console_scripts.run(argv[0], args)
    assert code == 0, err[-3000:]
    expected = _normalised(sample[sample.index("Result for") :])
    assert _normalised(out[out.index("Result for") :]) == expected


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
