"""keras_vit.predict, keras_vit.images and keras_vit.labels on real photographs.

The photos are scikit-learn's china.jpg and flower.jpg (427 x 640), written as JPEG, PNG and
grayscale files. The resize is held against tf.image.resize and the trainers' evaluation ops.
"""

import json
import os

import numpy as np
import PIL.Image
import pytest
import tensorflow as tf
from fixtures import TINY
from sklearn.datasets import load_sample_image
from synthetic_checkpoints import TI16, vit_jax_params
from trainer_cli import run_main

import keras_vit
from keras_vit import images, labels, predict, preprocessing
from trainers.data import ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "..", "shared", "fixtures", "tiny_vit_vit_jax_layout.npz")
# tests/fixtures.py's tiny ViT with a second block, so that the block's layers repeat in the graph.
SHAPE = dict(TINY, num_layers=2)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    china, flower = load_sample_image("china.jpg"), load_sample_image("flower.jpg")
    paths = {
        "jpeg": folder / "china.jpg",
        "png": folder / "flower.png",
        "gray": folder / "china_gray.jpg",
        "rgba": folder / "flower_rgba.png",
    }
    PIL.Image.fromarray(china).save(paths["jpeg"], quality=90)
    PIL.Image.fromarray(flower).save(paths["png"])
    PIL.Image.fromarray(china).convert("L").save(paths["gray"], quality=90)
    PIL.Image.fromarray(flower).convert("RGBA").save(paths["rgba"])
    return {key: str(path) for key, path in paths.items()}


@pytest.fixture(scope="module")
def imagenet_model():
    """A ViT-Ti/16 at 32 px with a 1000-class head and random weights (so outputs differ)."""
    model = keras_vit.create_model("ViT-Ti_16", num_classes=1000, **SHAPE)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32"))
    return model


@pytest.mark.parametrize("size", [(224, 224), (16, 16), (37, 53), (100, 20)])
def test_resize_is_tf_image_resize_bilinear(size):
    x = np.random.default_rng(0).uniform(0, 255, (37, 53, 3)).astype(np.float32)
    expected = tf.image.resize(x, size, method="bilinear").numpy()
    np.testing.assert_allclose(images.resize(x, size), expected, atol=2e-3)  # of 255


def test_jpeg_decodes_to_the_trainers_pixels_exactly(photos):
    for key in ("jpeg", "gray", "png"):
        with open(photos[key], "rb") as f:
            data = f.read()
        np.testing.assert_array_equal(images.decode_image(data), ops.decode_image(tf.constant(data)).numpy())


def test_exif_orientation_is_applied(tmp_path):
    # A camera stores the sensor's pixels and tags how to turn them: 6 = rotate 90 degrees
    # clockwise to view. The decoded image is the upright one.
    china = load_sample_image("china.jpg")
    exif = PIL.Image.Exif()
    exif[0x0112] = 6  # Orientation
    path = tmp_path / "phone.png"
    PIL.Image.fromarray(china).save(path, exif=exif)
    decoded = images.read_image(str(path))
    np.testing.assert_array_equal(decoded, np.rot90(china, k=-1))


def test_load_image_gives_the_trainers_evaluation_pixels(photos):
    chain = ops.Chain(ops.eval_ops(32)[:2])  # decode, resize (the model scales to [-1, 1] itself)
    for key, levels in (("png", 2e-3), ("jpeg", 2e-3)):  # the same decoded pixels, the same resize
        with open(photos[key], "rb") as f:
            expected = chain(tf.constant(f.read())).numpy()
        loaded = keras_vit.load_image(photos[key], 32)
        assert loaded.shape == (1, 32, 32, 3) and loaded.dtype == np.float32
        np.testing.assert_allclose(loaded[0], expected, atol=levels)


def test_grayscale_and_alpha_become_rgb(photos):
    gray = images.read_image(photos["gray"])
    assert gray.shape == (427, 640, 3) and np.array_equal(gray[..., 0], gray[..., 2])
    np.testing.assert_array_equal(images.read_image(photos["rgba"]), images.read_image(photos["png"]))


def test_a_16_bit_png_decodes_to_tensorflows_pixels(tmp_path):
    # Pillow's own conversion to RGB clips 16-bit values past 255: the photo came out white.
    gray = PIL.Image.fromarray(load_sample_image("china.jpg")).convert("L")
    low_bits = np.random.default_rng(0).integers(0, 256, gray.size[::-1])
    sixteen = (np.asarray(gray).astype(np.uint16) << 8) | low_bits.astype(np.uint16)
    PIL.Image.fromarray(sixteen).save(tmp_path / "china16.png")
    with open(tmp_path / "china16.png", "rb") as f:
        expected = tf.io.decode_image(f.read(), channels=3).numpy()
    decoded = images.read_image(str(tmp_path / "china16.png"))
    np.testing.assert_array_equal(decoded, expected)
    np.testing.assert_array_equal(decoded[..., 1], np.asarray(gray))


def test_pixels_of_no_fixed_range_are_one_line(tmp_path):
    PIL.Image.fromarray(np.full((4, 4), 0.5, np.float32)).save(tmp_path / "float.tiff")
    PIL.Image.fromarray(np.full((4, 4), 70000, np.int32)).save(tmp_path / "wide.tiff")
    with pytest.raises(
        images.ImageError, match=r"float\.tiff: floating-point pixels have no fixed range; save"
    ):
        images.read_image(str(tmp_path / "float.tiff"))
    with pytest.raises(
        images.ImageError, match=r"wide\.tiff: pixels past 16 bits; save the image with 8 or 16"
    ):
        images.read_image(str(tmp_path / "wide.tiff"))


def test_a_large_photo_is_read_quietly_and_one_too_large_is_one_line(tmp_path, monkeypatch, recwarn):
    """Pillow warns past its pixel limit (a 100 M pixel photo printed DecompressionBombWarning)
    and refuses past twice it (a DecompressionBombError traceback). The limit is lowered here so
    that the images are small."""
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 1000)
    PIL.Image.new("RGB", (40, 40), (10, 20, 30)).save(tmp_path / "large.png")  # 1,600 pixels
    PIL.Image.new("RGB", (50, 50)).save(tmp_path / "too_large.png")  # 2,500
    assert images.read_image(str(tmp_path / "large.png"))[0, 0].tolist() == [10, 20, 30]
    assert not [w for w in recwarn if issubclass(w.category, PIL.Image.DecompressionBombWarning)]
    with pytest.raises(images.ImageError) as refused:
        images.read_image(str(tmp_path / "too_large.png"))
    assert str(refused.value) == (
        f"{tmp_path}/too_large.png: Image size (2500 pixels) exceeds limit of 2000 pixels, more than "
        "Pillow opens; shrink the image first"
    )


def test_classify_real_photos_with_imagenet_names(photos, imagenet_model):
    paths = [photos["jpeg"], photos["png"], photos["gray"]]
    results = predict.classify(imagenet_model, paths)
    # Three images are one batch, which classify runs eagerly (the next test holds it to predict).
    probs = np.asarray(imagenet_model(keras_vit.load_images(paths, imagenet_model), training=False))
    names = [name for _, name in preprocessing.imagenet_class_index()]
    for row, top in zip(probs, results):
        best = np.argsort(row)[::-1][:5]
        assert [index for index, _, _ in top] == list(best)
        assert [name for _, name, _ in top] == [names[i] for i in best]
        np.testing.assert_allclose([p for _, _, p in top], row[best], rtol=1e-6)
    assert results[0] != results[1]  # different photos, different answers
    # Arrays of any size work too, resized the same way.
    [from_array] = predict.classify(imagenet_model, [images.read_image(paths[0])], top=2)
    assert [i for i, _, _ in from_array] == [i for i, _, _ in results[0][:2]]
    np.testing.assert_allclose([p for *_, p in from_array], [p for *_, p in results[0][:2]], rtol=1e-5)


def test_a_model_that_returns_logits_is_given_their_softmax(photos, imagenet_model):
    # A model saved with classifier_activation=None (trained on logits) printed its logits as
    # percentages: -1584% for a class.
    logits_model = keras_vit.create_model("ViT-Ti_16", num_classes=1000, classifier_activation=None, **SHAPE)
    logits_model.set_weights(imagenet_model.get_weights())
    expected = predict.classify(imagenet_model, [photos["png"]], top=3)
    [found] = predict.classify(logits_model, [photos["png"]], top=3)
    assert [i for i, _, _ in found] == [i for i, _, _ in expected[0]]
    np.testing.assert_allclose([p for *_, p in found], [p for *_, p in expected[0]], rtol=1e-5)
    relu = keras_vit.create_model("ViT-Ti_16", num_classes=1000, classifier_activation="relu", **SHAPE)
    with pytest.raises(ValueError, match="head ends in 'relu', neither probabilities nor logits"):
        predict.classify(relu, [photos["png"]])


def test_a_batch_size_seen_once_runs_eagerly_and_repeated_sizes_predict(monkeypatch):
    """classify's chunks of 16: the two full ones through `predict` (one graph, traced once), the
    last image of 33 in an eager call; a later batch of that size through `predict` (a loop over
    single images traces once), a new small size eagerly, a larger one through `predict`;
    `predict`'s probabilities every way. Catches an eager path that differs from `predict`
    (dropout on, another dtype), a return to tracing a graph for a batch seen once (2.5 s for
    ViT-Ti/16 at batch 1 in `python -m keras_vit.predict`), a loop that never leaves the eager
    calls (8x slower per image after the first), and a large batch run eagerly (ViT-B/16 at batch
    8 ran 1.4x slower so on the Xeon)."""
    model = keras_vit.create_model("ViT-Ti_16", num_classes=10, dropout_rate=0.5, **SHAPE)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape).astype("float32"))
    pixels = np.random.default_rng(2).uniform(0, 255, (33, 32, 32, 3)).astype("float32")
    expected = model.predict(pixels, verbose=0)
    predicted = []
    real_predict = model.predict
    monkeypatch.setattr(model, "predict", lambda x, **kw: predicted.append(len(x)) or real_predict(x, **kw))

    def classify(images):
        predicted.clear()
        results = predict.classify(model, list(images), top=10)
        return [[p for _, _, p in sorted(top)] for top in results]  # by class index

    # The head's large weights give probabilities down to 1e-14, whose float32 rounding is their
    # logit's times the logit's size (an eager call and the graph differed by 1.1e-5 relative at
    # 2.2e-14 in one run): below 1e-12 they are compared absolutely. The large ones move by the
    # rounding of another batch size's products, amplified so too (1.4e-5 relative at 0.2, one image
    # against the same image in a batch of 32, under XLA on a CPU without AVX-512 with the tests'
    # two workers running). A path that differs (dropout on, another dtype) moves them by far more.
    close = dict(rtol=1e-4, atol=1e-12)
    np.testing.assert_allclose(classify(pixels), expected, **close)
    assert predicted == [16, 16]
    np.testing.assert_allclose(classify(pixels[:1]), expected[:1], **close)
    assert predicted == [1]
    np.testing.assert_allclose(classify(pixels[1:3]), expected[1:3], **close)
    assert predicted == []
    # Past a few images the graph repays its tracing: predicted from the first batch.
    size = predict.EAGER_MAX_BATCH + 1
    np.testing.assert_allclose(classify(pixels[3 : 3 + size]), expected[3 : 3 + size], **close)
    assert predicted == [size]


def test_class_names_shipped_given_or_numbered(tmp_path):
    names21k = labels.class_names(21843)
    assert len(names21k) == 21843 and names21k[0] == "organism, being"
    wnids = [wnid for wnid, _ in labels.imagenet21k_class_index()]
    assert len(set(wnids)) == 21843 and wnids[359] == "n01440764"  # ImageNet-1k's class 0, tench
    assert names21k[359].startswith("tench")
    assert labels.class_names(1000)[0] == "tench" and labels.class_names(3) == [
        "class 0",
        "class 1",
        "class 2",
    ]
    text = tmp_path / "labels.txt"
    text.write_text("cat\ndog \n\n")
    assert labels.class_names(2, str(text)) == ["cat", "dog"]
    with pytest.raises(labels.LabelsError, match="2 class names for a model with 3 outputs"):
        labels.class_names(3, str(text))


def test_any_size_model_loads_at_its_weights_size(photos):
    shape = {key: value for key, value in SHAPE.items() if key != "image_size"}
    model = keras_vit.create_model("ViT-Ti_16", image_size=(None, None), base_image_size=48, **shape)
    assert images.target_size(model) == (48, 48)
    assert keras_vit.load_image(photos["jpeg"], model).shape == (1, 48, 48, 3)


@pytest.fixture(scope="module")
def imagenet_weights(tmp_path_factory):
    """A ViT-Ti/16 checkpoint in the official layout at 32 px with a 1000-class head."""
    path = tmp_path_factory.mktemp("weights") / "ti16_imagenet.npz"
    np.savez(path, **vit_jax_params(0, image_size=32, num_classes=1000, **TI16))
    return str(path)


@pytest.mark.slow
def test_command_line_json_on_photos(photos, imagenet_weights):
    paths = [photos["jpeg"], photos["png"], photos["gray"]]
    # Through main(argv) in this process (tests/test_startup.py runs the command in its own).
    proc = run_main(
        "keras_vit.predict", [*paths, "--model=ViT-Ti_16", f"--weights={imagenet_weights}", "--json"]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    document = json.loads(proc.stdout)
    model = keras_vit.create_model("ViT-Ti_16", weights=imagenet_weights)
    expected = predict.classify(model, paths)
    assert [entry["image"] for entry in document] == paths
    for entry, top in zip(document, expected):
        assert [(p["index"], p["name"]) for p in entry["predictions"]] == [(i, n) for i, n, _ in top]
        np.testing.assert_allclose(
            [p["probability"] for p in entry["predictions"]], [p for *_, p in top], rtol=1e-5
        )


def _main(capsys, *argv):
    code = predict.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_weights_of_another_variant_are_one_line_and_status_2(capsys, photos):
    # The fixture is a 48-wide, 2-block ViT, not a ViT-Ti/16.
    code, out, err = _main(capsys, photos["jpeg"], "--model=ViT-Ti_16", f"--weights={FIXTURE}")
    assert code == 2 and not out and err.startswith("error: ") and "does not fit --model=ViT-Ti_16" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{setup}", "--model=ViT-Ti_16", "--weights={weights}"], "not an image file Pillow can read"),
        (["{missing}", "--model=ViT-Ti_16", "--weights={weights}"], "cannot read the file"),
        (["{jpeg}", "--model=ViT-Ti_16"], "--model=ViT-Ti_16 needs --weights"),
        (["{jpeg}"], "name the model"),
        (["{jpeg}", "--model=ViT-Q_1", "--weights={weights}"], "unknown --model 'ViT-Q_1'"),
        (["{jpeg}", "--workdir={jpeg}", "--model=ViT-Ti_16"], "either --workdir or --model"),
        (["{jpeg}", "--workdir={tmp}"], "not a trainer's workdir"),
        (
            ["{jpeg}", "--model=ViT-Ti_16", "--weights={weights}", "--labels={labels}"],
            "2 class names for a model with 1000",
        ),
    ],
)
def test_bad_input_is_one_line_and_status_2(capsys, photos, imagenet_weights, tmp_path, argv, message):
    labels_file = tmp_path / "two.txt"
    labels_file.write_text("a\nb\n")
    values = dict(
        photos,
        setup=os.path.join(ROOT, "setup.py"),
        missing=str(tmp_path / "nope.jpg"),
        weights=imagenet_weights,
        tmp=str(tmp_path),
        labels=str(labels_file),
    )
    code, out, err = _main(capsys, *(arg.format(**values) for arg in argv))
    assert code == 2 and not out
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_command_line_text_output_with_labels(capsys, photos, imagenet_weights, tmp_path):
    names = tmp_path / "names.txt"
    names.write_text("".join(f"thing {i}\n" for i in range(1000)))
    argv = [photos["jpeg"], photos["gray"], "--model=ViT-Ti_16", f"--weights={imagenet_weights}"]
    code, out, err = _main(capsys, *argv, f"--labels={names}")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{photos['jpeg']}:" and lines[6] == f"{photos['gray']}:" and len(lines) == 12
    assert all(line.startswith("  ") and "%  thing " in line and "(class " in line for line in lines[1:6])


def test_classify_works_on_jax_without_tensorflow(jax_without_tensorflow):
    """predict.classify on JAX where TensorFlow is not installed gives the classes and
    probabilities it gives on TensorFlow, for a JPEG and a PNG: catches an
    image path that needs tf.io, or a resize or normalisation that differs between the backends.
    (The child, tests/jax_without_tensorflow.py, is shared with test_fileio and test_packaging.)"""
    on_jax = jax_without_tensorflow.part("classify")["top"]
    weights, paths = jax_without_tensorflow.inputs["weights"], jax_without_tensorflow.inputs["paths"]
    on_tensorflow = predict.classify(keras_vit.create_model("ViT-Ti_16", weights=weights), paths)
    assert len(on_jax) == len(on_tensorflow) == 2
    for jax_top, tf_top in zip(on_jax, on_tensorflow):
        assert [i for i, _, _ in jax_top] == [i for i, _, _ in tf_top]
        np.testing.assert_allclose([p for *_, p in jax_top], [p for *_, p in tf_top], atol=1e-5)
