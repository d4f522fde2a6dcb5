"""keras_vit.export: SavedModel, ONNX and LiteRT files, each run by its own runtime.

The SavedModel is served by `saved_model_cli run` (its console script, run in the test's
process), as a serving user would run it, on real JPEGs; ONNX runs in onnxruntime and LiteRT in
ai-edge-litert's interpreter. Models are tiny (32 px, width 32, 2 blocks) so that each export
takes seconds.
"""

import json
import os

import autograph_conversions
import console_scripts
import numpy as np
import PIL.Image
import pytest
import tensorflow as tf
from fixtures import TINY
from sklearn.datasets import load_sample_image
from trainer_cli import TINY_MODEL, run_cli

import keras_vit
from benchmarks import export_memory
from keras_vit import export, images, predict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "..", "shared", "fixtures", "tiny_vit_vit_jax_layout.npz")
# tests/fixtures.py's tiny ViT with a second block, so that the block's layers repeat in the graph.
SHAPE = dict(TINY, num_layers=2)
NAMES = ["cat", "dog", "emu", "fox", "gnu"]


@pytest.fixture(scope="module")
def model():
    model = keras_vit.create_model("ViT-Ti_16", num_classes=len(NAMES), **SHAPE)
    head = model.get_layer("head")  # zero at initialisation: give the outputs something to show
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    china, flower = load_sample_image("china.jpg"), load_sample_image("flower.jpg")
    paths = [str(folder / "china.jpg"), str(folder / "flower_gray.jpg"), str(folder / "flower.png")]
    PIL.Image.fromarray(china).save(paths[0], quality=90)
    PIL.Image.fromarray(flower).convert("L").save(paths[1], quality=90)
    PIL.Image.fromarray(flower).save(paths[2])
    return paths


def test_the_serving_functions_are_traced_without_autograph(monkeypatch, tmp_path, model):
    """keras_vit/serving.py's functions trace the model as written: AutoGraph would parse and
    rewrite every function of keras_vit the model calls, at each export."""
    converted = autograph_conversions.recorded(monkeypatch)
    export.export(model, str(tmp_path / "served"), "saved_model", NAMES, top_k=3)
    assert not [name for name in converted if name.startswith("keras_vit.")]


@pytest.mark.slow
def test_saved_model_served_by_saved_model_cli_gives_predicts_top_k(tmp_path, model, photos):
    out = str(tmp_path / "served")
    report = export.export(model, out, "saved_model", NAMES, top_k=3)
    assert report.max_difference <= 1e-4 and report.size_bytes > 0
    inputs = tmp_path / "images.npy"  # the encoded files, as bytes (no pickle needed)
    np.save(inputs, np.array([open(path, "rb").read() for path in photos], dtype=bytes))
    outputs = tmp_path / "outputs"
    code, stdout, err = console_scripts.run(
        "saved_model_cli",
        [
            "run",
            f"--dir={out}",
            "--tag_set=serve",
            "--signature_def=serving_default",
            f"--inputs=images={inputs}",
            f"--outdir={outputs}",
        ],
    )
    assert code == 0, err[-3000:]
    classes = np.load(outputs / "classes.npy", allow_pickle=False)
    scores = np.load(outputs / "scores.npy", allow_pickle=False)
    expected = predict.classify(model, photos, NAMES, top=3)
    np.testing.assert_array_equal(classes, [[i for i, _, _ in top] for top in expected])
    np.testing.assert_allclose(scores, [[p for *_, p in top] for top in expected], atol=1e-5)
    served_names = stdout.split("Result for output key names:")[1].split("Result for")[0]
    for top in expected:
        assert str([name.encode() for _, name, _ in top]).replace(",", "") in served_names

    # The pixel signature, in-process; and --overwrite replaces the directory whole.
    loaded = tf.saved_model.load(out)
    pixels = keras_vit.load_images(photos, model)
    served = loaded.signatures["serving_pixels"](pixels=tf.constant(pixels))
    np.testing.assert_allclose(served["probabilities"].numpy(), model.predict(pixels, verbose=0), atol=1e-6)
    with pytest.raises(export.ExportError, match="exists; pass --overwrite"):
        export.export(model, out, "saved_model", NAMES)
    export.export(model, out, "saved_model", NAMES, top_k=2, overwrite=True)
    assert tf.saved_model.load(out).signatures["serving_default"].structured_outputs["classes"].shape[1] == 2
    assert sorted(os.listdir(tmp_path)) == ["images.npy", "outputs", "served"]  # no temporary left


@pytest.mark.slow  # the conversion runs in a child process on Keras' PyTorch backend
def test_onnx_runs_in_onnxruntime_like_keras(tmp_path, model, photos):
    import onnxruntime

    out = str(tmp_path / "vit.onnx")
    report = export.export(model, out, "onnx", NAMES)
    assert report.max_difference <= 1e-4
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    pixels = keras_vit.load_images(photos, model)
    [probs] = session.run(None, {session.get_inputs()[0].name: pixels})
    np.testing.assert_allclose(probs, model.predict(pixels, verbose=0), atol=1e-4)


@pytest.mark.slow  # 15 s: two LiteRT conversions
def test_litert_float_and_int8_with_accuracy_on_a_labelled_folder(tmp_path, model, photos):
    from ai_edge_litert.interpreter import Interpreter

    labelled = tmp_path / "labelled"  # crops of the photos, filed under the class Keras gives
    pixels = keras_vit.load_images(photos, model)
    for index, (path, label) in enumerate(zip(photos * 2, [0, 1, 2, 3, 4, 0])):
        (labelled / NAMES[label]).mkdir(parents=True, exist_ok=True)
        crop = images.read_image(path)[index * 30 : index * 30 + 200, index * 40 : index * 40 + 300]
        PIL.Image.fromarray(crop).save(labelled / NAMES[label] / f"{index}.png")

    out = str(tmp_path / "vit.tflite")
    report = export.export(model, out, "litert", NAMES, eval_dir=str(labelled))
    runner = Interpreter(model_path=out).get_signature_runner()
    [probs] = runner(pixels=pixels).values()
    np.testing.assert_allclose(probs, model.predict(pixels, verbose=0), atol=1e-4)
    assert report.accuracy["images"] == 6 and report.accuracy["litert"] == report.accuracy["keras"]
    crops = keras_vit.load_images(sorted(str(p) for p in labelled.glob("*/*.png")), model)
    truth = [NAMES.index(p.parent.name) for p in sorted(labelled.glob("*/*.png"))]
    keras_accuracy = np.mean(model.predict(crops, verbose=0).argmax(-1) == truth)
    assert report.accuracy["keras"] == pytest.approx(keras_accuracy)

    small = str(tmp_path / "vit_int8.tflite")
    int8 = export.export(model, small, "litert-int8", NAMES, eval_dir=str(labelled))
    assert int8.size_bytes < 0.7 * report.size_bytes
    assert 0 < int8.max_difference <= export.TOLERANCE["litert-int8"]
    assert "top-1 accuracy on 6 labelled images: Keras" in int8.summary()
    [probs8] = Interpreter(model_path=small).get_signature_runner()(pixels=pixels).values()
    np.testing.assert_allclose(probs8, probs, atol=export.TOLERANCE["litert-int8"])


@pytest.mark.parametrize(
    "format, name", [pytest.param("onnx", "vit.onnx", marks=pytest.mark.slow), ("saved_model", "served")]
)
def test_a_failed_check_is_an_error_and_leaves_nothing(tmp_path, model, monkeypatch, format, name):
    monkeypatch.setitem(export.TOLERANCE, format, -1.0)
    with pytest.raises(export.ExportError, match="does not match the Keras model.*nothing was written"):
        export.export(model, str(tmp_path / name), format, NAMES)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_onnx_weights_past_one_files_limit_go_beside_the_graph(tmp_path, model, monkeypatch):
    """onnxruntime parses no .onnx file past 2 GiB: ViT-H/14's export (2.5 GB of float32) ran the
    whole conversion, then failed its check with "Protobuf parsing failed" (tried by hand on a
    2.4 GB file written the way the export writes one). Past the limit, which counts bytes, the
    weights now go to OUT.onnx.data beside the graph, and onnxruntime runs the pair."""
    weight_bytes = 4 * model.count_params()
    monkeypatch.setattr(export, "ONNX_MAX_WEIGHT_BYTES", weight_bytes - 1)
    path = str(tmp_path / "vit.onnx")
    # A file already where the weights go is refused as OUT itself is (it was replaced unasked).
    (tmp_path / "vit.onnx.data").write_bytes(b"not the export's")
    with pytest.raises(
        export.ExportError, match="vit.onnx.data exists, where this export writes its weights"
    ):
        export.export(model, path, "onnx", NAMES)
    assert (tmp_path / "vit.onnx.data").read_bytes() == b"not the export's"
    report = export.export(model, path, "onnx", NAMES, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["vit.onnx", "vit.onnx.data"]  # no scratch left behind
    # All but the smallest tensors (onnx_ir keeps those of 256 bytes or less in the graph).
    assert os.path.getsize(path + ".data") > 0.9 * weight_bytes
    graph_bytes = os.path.getsize(path)
    assert report.size_bytes == os.path.getsize(path) + os.path.getsize(path + ".data")
    assert report.max_difference <= export.TOLERANCE["onnx"] and report.data_path == path + ".data"
    assert f"its weights are in {path}.data" in report.summary()
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("vit.onnx", "vit.onnx.data"):  # the pair works wherever it goes together
        os.rename(tmp_path / name, moved / name)
    pixels = np.random.default_rng(1).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(moved / "vit.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        session.run(None, {"pixels": pixels})[0], model.predict(pixels, verbose=0), atol=1e-4
    )
    with pytest.raises(export.ExportError, match="two files .its weights, past 2 GiB, in vit.onnx.data"):
        export.export(model, "ram://exports/vit.onnx", "onnx", NAMES)
    # At the limit, one file; written over the pair, it takes the pair's data file with it (left
    # behind, that file outlived the graph that read it).
    monkeypatch.setattr(export, "ONNX_MAX_WEIGHT_BYTES", weight_bytes)
    assert export.export(model, str(moved / "vit.onnx"), "onnx", NAMES, overwrite=True).data_path is None
    assert os.listdir(moved) == ["vit.onnx"]
    # The one file is the pair's graph and the weights: the pair's graph held none of them (a
    # bound on the graph alone would depend on its number of operations).
    assert os.path.getsize(moved / "vit.onnx") - graph_bytes > 0.9 * weight_bytes


# Blocks of the larger model per converter: ONNX's costs 2.6 bytes per byte of weights at 12 blocks
# as at 24 (2.56-2.69, docs/guides/deploy.md), so 12 leave a per-block copy (12 or more) well above the bound
# of half of them and take 10 s less; LiteRT's 5.4 needs 24 for a bound of 12 to stand clear.
GROWTH_LAYERS = {"onnx": 12, "litert": export_memory.GROWTH_LAYERS}


@pytest.mark.slow
@pytest.mark.parametrize("format", ["onnx", "litert"])
def test_export_memory_grows_with_the_weights_not_with_the_weights_times_the_blocks(format):
    # Each export in a child process of its own (the peak is per process): a model of 12 or 24
    # blocks (width 256) against one of 1 block; the export's peak memory above what the process
    # held before it, per extra byte of weights (benchmarks/export_memory.py). A converter that
    # copies the weights once or a few times costs a few bytes (measured: ONNX 2.6, LiteRT 5.4);
    # one that copies them per block costs as many as the blocks or more (tf2onnx, the ONNX
    # converter before: 25 at 24 blocks). The lower bound catches a measure that misses the
    # export's own memory (a poller that stopped, a peak taken from the wrong process). The two
    # converters that rewrite the graph; the SavedModel is TensorFlow's own checkpoint of each
    # variable (2.5), and its peak is in benchmarks/export_memory.py's table.
    # Over the bound, measured once more: a process's peak can carry a few hundred MB of its own
    # (once, in a whole fresh-clone run beside the other worker: 804 MB for the 12-block ONNX export
    # where four runs gave 600 MB, 8.5 bytes a byte), while a converter that copies per block is
    # over the bound at every run. The lower bound's faults are not noise: no second measure.
    layers = GROWTH_LAYERS[format]
    bound = layers / 2
    found = export_memory.growth(format, layers=layers)
    if found.get("per_weight_byte", 0) >= bound:
        found = {**export_memory.growth(format, layers=layers), "first": found}
    assert "error" not in found, found
    assert 0.5 < found["per_weight_byte"] < bound, found


def _main(capsys, *argv):
    code = export.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{tmp}/m.onnx", "--format=keras2", "--model=ViT-Ti_16", "--weights={fixture}"], "unknown --format"),
        (["{tmp}/m.tflite", "--format=onnx", "--model=ViT-Ti_16", "--weights={fixture}"], "ending in .onnx"),
        # A SavedModel folder was written under the name of the other format's file.
        (
            ["{tmp}/m.onnx", "--format=saved_model", "--model=ViT-Ti_16", "--weights={fixture}"],
            "a saved_model export is a folder; pass --format=onnx for a .onnx file, or a folder name",
        ),
        (
            ["{tmp}/m.onnx", "--format=onnx", "--model=ViT-Ti_16", "--weights={fixture}"],
            "does not fit --model=ViT-Ti_16",
        ),
        (
            ["{tmp}", "--format=saved_model", "--model=ViT-Ti_16", "--weights={fixture}"],
            "exists; pass --overwrite",
        ),
        (["{tmp}/m.onnx", "--format=onnx", "--workdir={tmp}"], "not a trainer's workdir"),
        (["{tmp}/m.onnx", "--format=onnx", "--model=ViT-Ti_16"], "needs --weights"),
    ],
)
def test_bad_input_is_one_line_and_status_2(capsys, tmp_path, argv, message):
    code, out, err = _main(capsys, *(arg.format(tmp=tmp_path, fixture=FIXTURE) for arg in argv))
    assert code == 2 and not out
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "name, format, make, message",
    [
        ("served", "saved_model", "folder", "holds no SavedModel (2 other entries): --overwrite replaces"),
        ("served", "saved_model", "file", "is a file, not a SavedModel's folder"),
        ("m.onnx", "onnx", "folder", "is a folder, not a onnx file"),
    ],
)
def test_overwrite_replaces_an_earlier_export_only(capsys, tmp_path, name, format, make, message):
    """`export . --format=saved_model --overwrite` replaced the working directory: everything in
    it was lost."""
    out = tmp_path / name
    if make == "folder":
        (out / "sub").mkdir(parents=True)
        (out / "notes.txt").write_text("mine\n")
    else:
        out.write_text("mine\n")
    argv = [str(out), f"--format={format}", f"--weights={FIXTURE}", "--overwrite"]
    code, stdout, err = _main(capsys, *argv)
    assert code == 2 and not stdout
    assert err.startswith(f"error: {out} {message}") and err.count("\n") == 1, err
    assert (out / "notes.txt" if make == "folder" else out).read_text() == "mine\n"


def test_an_output_under_a_file_is_one_line_that_says_what_to_do(capsys, tmp_path):
    """It was makedirs' own words, "error: [Errno 17] File exists: '.../notes.txt'"."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    code, out, err = _main(capsys, str(notes / "m.onnx"), "--format=onnx", f"--weights={FIXTURE}")
    assert code == 2 and not out
    expected = f"{notes}/m.onnx cannot be written: {notes} is a file, not a folder"
    assert err == f"error: {expected}; choose another output path\n"


@pytest.mark.slow
@pytest.mark.parametrize("fake_tfds_dir", ["oxford_iiit_pet"], indirect=True)
def test_a_finetuned_workdir_exports_with_its_class_names(tmp_path, photos, capsys, fake_tfds_dir):
    workdir = tmp_path / "pets"
    args = [
        "--dataset=oxford_iiit_pet",
        f"--data_dir={fake_tfds_dir}",
        f"--workdir={workdir}",
        "--total_steps=4",
        "--warmup_steps=1",
        "--eval_every=0",
        "--batch_size=8",
        *TINY_MODEL,
    ]
    proc = run_cli("finetune", args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(workdir / "class_names.json") as f:
        breeds = json.load(f)
    assert len(breeds) == 37 and "Abyssinian" in breeds

    out = tmp_path / "pets_model"
    code, stdout, err = _main(capsys, str(out), "--format=saved_model", f"--workdir={workdir}")
    assert code == 0, err
    assert stdout.startswith(f"wrote {out} (saved_model, ") and "tolerance 0.0001" in stdout

    served = tf.saved_model.load(str(out)).signatures["serving_default"]
    result = served(images=tf.constant([open(photos[0], "rb").read()]))
    names = [name.decode() for name in result["names"].numpy()[0]]
    classes = result["classes"].numpy()[0]
    assert names == [breeds[i] for i in classes] and len(names) == 5
    expected = predict.classify(keras_vit.run_dir.load_run(str(workdir)).model, photos[:1], breeds)[0]
    assert [i for i, _, _ in expected] == list(classes)
