"""keras_vit.model_source and model_files: every tool takes its model the same ways, a custom shape
is read from the file, and the flags that name no model are the same one line in every tool."""

import json
import os

import keras
import numpy as np
import PIL.Image
import pytest
from fixtures import DISTINCT, tiny_hybrid

import keras_vit
from keras_vit import export, model_files, model_source, predict, weights
from keras_vit.visualize import __main__ as visualize

IMAGE_SIZE = 16  # DISTINCT's 4 px patches: a 4 x 4 grid
NAMES = [f"kind {i}" for i in range(DISTINCT["num_classes"])]


@pytest.fixture(scope="module")
def custom(tmp_path_factory):
    """A custom shape (4 px patches, width 24 in 3 heads, 2 blocks, MLP 48, 5 classes), saved as
    .keras, .npz and .weights.h5, and two photos of other sizes."""
    folder = tmp_path_factory.mktemp("custom")
    keras.utils.set_random_seed(1)
    model = keras_vit.ViT(image_size=IMAGE_SIZE, **DISTINCT)
    head = model.get_layer("head")  # zero at initialisation: give the outputs something to show
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32"))
    files = {
        "keras": str(folder / "custom.keras"),
        "npz": str(folder / "custom.npz"),
        "h5": str(folder / "custom.weights.h5"),
    }
    model.save(files["keras"])
    weights.save_npz(model, files["npz"])
    model.save_weights(files["h5"])
    rng = np.random.default_rng(2)
    photos = [str(folder / "a.png"), str(folder / "b.jpg")]
    PIL.Image.fromarray(rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(photos[0])
    PIL.Image.fromarray(rng.integers(0, 256, (20, 50, 3), dtype=np.uint8)).save(photos[1])
    return model, files, photos


def _run(main, argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _expected_probabilities(model, photos):
    return model.predict(keras_vit.load_images(photos, model), verbose=0)


@pytest.mark.parametrize(
    "flags",
    [["--model={keras}"], ["--weights={keras}"], ["--weights={npz}"], ["--weights={h5}"]],
    ids=["keras-as-model", "keras-alone", "npz-alone", "weights-h5-alone"],
)
def test_predict_reads_a_custom_shape_from_the_file(custom, capsys, flags):
    model, files, photos = custom
    argv = [*photos, *(flag.format(**files) for flag in flags), "--json", f"--top={len(NAMES)}"]
    code, out, err = _run(predict.main, argv, capsys)
    assert code == 0, err
    expected = _expected_probabilities(model, photos)
    for row, entry in zip(expected, json.loads(out)):
        got = {p["index"]: p["probability"] for p in entry["predictions"]}
        np.testing.assert_allclose([got[i] for i in range(len(NAMES))], row, rtol=1e-5, atol=1e-7)
        assert [p["name"] for p in entry["predictions"]][:1] == [f"class {int(np.argmax(row))}"]


def test_predict_prints_the_class_names_a_keras_file_carries(custom, capsys, monkeypatch):
    model, files, photos = custom
    load_keras = model_files.load_keras

    def with_names(path, **kwargs):  # a .keras file whose model records its class names
        loaded = load_keras(path, **kwargs)
        loaded.class_names = NAMES
        return loaded

    monkeypatch.setattr(model_files, "load_keras", with_names)
    code, out, err = _run(predict.main, [photos[0], f"--model={files['keras']}", "--top=1"], capsys)
    assert code == 0, err
    best = int(np.argmax(_expected_probabilities(model, photos[:1])[0]))
    assert out.splitlines()[1].endswith(f"  {NAMES[best]}  (class {best})")


def test_export_a_keras_file_of_a_custom_shape(custom, capsys, tmp_path):
    _, files, _ = custom
    out = tmp_path / "custom.tflite"
    code, stdout, err = _run(export.main, [str(out), "--format=litert", f"--model={files['keras']}"], capsys)
    assert code == 0, err
    assert stdout.startswith(f"wrote {out} (litert,") and out.is_file()


def test_visualize_a_keras_file_of_a_custom_shape(custom, capsys, tmp_path):
    _, files, photos = custom
    argv = [f"--model={files['keras']}", f"--images={photos[0]}", f"--out={tmp_path}", "--num_components=2"]
    code, _, err = _run(visualize.main, argv, capsys)
    assert code == 0, err
    numbers = json.loads((tmp_path / "numbers.json").read_text())
    assert numbers["image_size"] == [IMAGE_SIZE, IMAGE_SIZE]
    assert np.array(numbers["rollout"]).shape == (1, 4, 4)
    assert np.array(numbers["attention_distance"]).shape == (2, 3)  # 2 blocks of 3 heads
    assert np.array(numbers["components"]).shape == (2, 4, 4, 3)  # 4 px patch filters


def test_weights_of_another_shape_than_the_variant_say_to_leave_out_model(custom, capsys):
    _, files, photos = custom
    code, out, err = _run(predict.main, [photos[0], "--model=ViT-Ti_16", f"--weights={files['npz']}"], capsys)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert err.strip() == (
        f"error: {files['npz']}: does not fit --model=ViT-Ti_16 (the file has patch_size=4, "
        "hidden_size=24, num_layers=2, mlp_dim=48); leave out --model and the file's "
        "shapes decide the architecture"
    )


# Flags that name no model, or two: the tool's own flags are added after them.
BAD_SOURCES = [
    ([], "name the model: " + model_source.WAYS),
    (["--model=ViT-Ti_16"], "--model=ViT-Ti_16 needs --weights"),
    (["--model=ViT-Q_1", "--weights=none"], "unknown --model 'ViT-Q_1'; pass a .keras file or"),
    (["--weights=imagenet21k"], "--weights=imagenet21k names no architecture"),
    (["--weights=none"], "--weights=none names no architecture"),
    (["--workdir=W", "--weights={keras}"], "pass either --workdir or --model/--weights, not both"),
    (["--model={keras}", "--weights={npz}"], "is a whole model, weights included: leave out --weights"),
]


@pytest.mark.parametrize("tool", ["predict", "export", "visualize"])
@pytest.mark.parametrize("flags, message", BAD_SOURCES)
def test_every_tool_says_the_same_line_for_flags_that_name_no_model(
    custom, capsys, tmp_path, tool, flags, message
):
    _, files, photos = custom
    flags = [flag.format(**files) for flag in flags]
    argv = {
        "predict": [photos[0], *flags],
        "export": [str(tmp_path / "m.onnx"), "--format=onnx", *flags],
        "visualize": [*flags, f"--images={photos[0]}", f"--out={tmp_path / 'figures'}"],
    }[tool]
    main = {"predict": predict.main, "export": export.main, "visualize": visualize.main}[tool]
    code, out, err = _run(main, argv, capsys)
    assert code == 2 and not out
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert message.format(**files) in err
    assert os.listdir(tmp_path) == []


def test_a_hybrid_weights_file_says_its_stem_and_half_width(tmp_path):
    # tests/fixtures.py's hybrid stem is of width 0.5: 32 channels at the root, not 64.
    keras.utils.set_random_seed(3)
    model = tiny_hybrid(num_classes=4)
    path = str(tmp_path / "hybrid.npz")
    weights.save_npz(model, path)
    loaded = model_files.from_weights(path)
    assert (loaded.resnet_layers, loaded.resnet_width) == ((1, 1), 0.5)
    x = np.random.default_rng(0).uniform(0, 255, (1, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))


def test_a_file_without_position_weights_cannot_say_its_size(tmp_path):
    model = keras_vit.ViT(image_size=IMAGE_SIZE, posemb="sincos_2d", **DISTINCT)
    path = str(tmp_path / "sincos.npz")
    weights.save_npz(model, path)
    with pytest.raises(
        weights.CheckpointError, match="stores no position embeddings .* pass the run's --workdir"
    ):
        model_files.from_weights(path)
    # Given the size and the type (as a run's config.json gives them), it loads.
    loaded = model_files.from_weights(path, image_size=IMAGE_SIZE, posemb="sincos_2d")
    x = np.random.default_rng(0).uniform(0, 255, (1, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))


def test_a_keras_file_of_a_model_taking_minus_one_to_one_is_given_pixels(custom, tmp_path):
    model, _, _ = custom
    scaled = keras_vit.ViT(image_size=IMAGE_SIZE, include_preprocessing=False, **DISTINCT)
    scaled.set_weights(model.get_weights())
    path = str(tmp_path / "scaled.keras")
    scaled.save(path)
    loaded = model_files.load_keras(path)
    assert loaded.include_preprocessing
    x = np.random.default_rng(0).uniform(0, 255, (2, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(scaled(x / 127.5 - 1)), atol=1e-6)


def test_a_keras_file_is_loaded_in_safe_mode(tmp_path):
    ran = tmp_path / "ran"  # the Lambda's code writes it when it runs
    model = keras.Sequential(
        [keras.Input((2,)), keras.layers.Lambda(lambda x, path=str(ran): (open(path, "w").close(), x)[1])]
    )
    path = str(tmp_path / "lambda.keras")
    model.save(path)
    ran.unlink()  # building the model ran it once
    with pytest.raises(weights.CheckpointError, match=r"lambda.keras: not a .keras file keras_vit can load"):
        model_files.load_keras(path)
    assert not ran.exists()
    plain = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    plain.save(str(tmp_path / "plain.keras"))
    with pytest.raises(weights.CheckpointError, match="holds a Sequential, not a keras_vit.ViT"):
        model_files.load_keras(str(tmp_path / "plain.keras"))


def test_weights_naming_a_workdir_is_the_workdir(custom, capsys, tmp_path):
    """Catches `--weights=WORKDIR` reading the run's model.npz alone: it must bring the run's
    class names and resolution as `--workdir=WORKDIR` does."""
    model, files, photos = custom
    workdir = tmp_path / "run"
    workdir.mkdir()
    weights.save_npz(model, str(workdir / "model.npz"))
    (workdir / "config.json").write_text(json.dumps({"model": "ViT-Ti_16", "image_size": IMAGE_SIZE}))
    (workdir / "class_names.json").write_text(json.dumps(NAMES))
    outputs = []
    for flag in (f"--weights={workdir}", f"--workdir={workdir}"):
        code, out, err = _run(predict.main, [*photos, flag, "--json", f"--top={len(NAMES)}"], capsys)
        assert code == 0, err
        outputs.append(json.loads(out))
    assert outputs[0] == outputs[1]
    top = [entry["predictions"][0]["name"] for entry in outputs[0]]
    assert top == [NAMES[int(np.argmax(row))] for row in _expected_probabilities(model, photos)]
