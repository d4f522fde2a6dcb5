"""Exports a classifier for serving: a TensorFlow SavedModel, ONNX, or LiteRT (TFLite).

    python -m keras_vit.export OUT --format=saved_model --workdir=runs/pets
    python -m keras_vit.export vit.onnx --format=onnx --model=ViT-B_16 --weights=imagenet21k+imagenet2012
    python -m keras_vit.export vit_int8.tflite --format=litert-int8 --workdir=runs/pets --eval_dir=DIR
    python -m keras_vit.export digits.onnx --format=onnx --model=digits.keras    # or --weights=digits.npz

The model comes any of the ways keras_vit.model_source lists.

Formats:
    saved_model  a directory for TensorFlow Serving: `serving_default` takes a batch of encoded
                 images (JPEG, PNG, GIF, BMP; any size) and returns the top-k class indices,
                 names and probabilities; `serving_pixels` takes float32 (B, H, W, 3) pixels.
    onnx         pixels -> probabilities, for onnxruntime (torch.onnx, on Keras' PyTorch backend in a
                 process of its own: keras_vit.onnx_export).
    litert       a float32 .tflite file, pixels -> probabilities (TFLite builtin ops only).
    litert-int8  the same with dynamic-range int8 weights (about 4x smaller).

Every artifact takes pixels in [0, 255] (the model scales them) resized to the model's size as
`keras_vit.images` does, and returns probabilities. It is written next to OUT under a
temporary name, run on sample images and compared with the Keras model, and renamed to OUT
only if the largest difference of the probabilities is within the format's tolerance: a
failed check leaves nothing behind. `--eval_dir=DIR` (a sub-folder of images per class, named
as the class) also measures both models' top-1 accuracy there. Needs TensorFlow, PyTorch,
onnxscript, onnx, onnxruntime and ai-edge-litert: pip install "keras-vision-transformer[export]".
"""

import argparse
import contextlib
import dataclasses
import gc
import importlib.util
import io
import os
import shutil
import sys
import tempfile

# Before Keras, whose import starts TensorFlow (and its log lines) on the default backend.
from keras_vit import _clash  # noqa: F401  (refuses a package mixed with another's files)

# isort: split
import keras
import numpy as np
import PIL.Image

from keras_vit import commands, fileio, images, labels, model_source, onnx_export, serving
from keras_vit.errors import blocked_output, error_line

USAGE_ERROR = commands.USAGE_ERROR
FORMATS = ("saved_model", "onnx", "litert", "litert-int8")
EXTENSIONS = {"onnx": ".onnx", "litert": ".tflite", "litert-int8": ".tflite"}
# Largest |difference| of a probability against the Keras model that passes the check. Float
# formats compute the same function, so only rounding separates them. int8 weights (and the
# int8 activations the dynamic-range kernels use) move probabilities by a few hundredths; the
# bound catches a broken conversion, and --eval_dir measures what int8 costs in accuracy.
TOLERANCE = {"saved_model": 1e-4, "onnx": 1e-4, "litert": 1e-4, "litert-int8": 0.25}
SAMPLE_IMAGES = 4
# What an ONNX export imports: it runs on Keras' PyTorch backend in a process of its own.
ONNX_MODULES = ("torch", "onnxscript", "onnx", "onnxruntime")
# An .onnx file is one protobuf message, which onnxruntime will not parse past 2 GiB ("Protobuf
# parsing failed": ViT-H/14's 2.5 GB of float32 weights in one file). Past this many bytes of
# weights the export writes them beside the graph, in OUT.onnx.data, as ONNX provides; the graph
# itself takes well under a MiB, the rest of the room is left to it.
ONNX_MAX_WEIGHT_BYTES = 2**31 - 2**24
ONNX_DATA_SUFFIX = ".data"
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


class ExportError(ValueError):
    """An export that cannot be made or failed its check; the message is one line."""


@dataclasses.dataclass
class Report:
    path: str
    format: str
    size_bytes: int
    max_difference: float
    tolerance: float
    accuracy: dict = None  # {"keras": ..., format: ..., "images": n} with eval_dir
    data_path: str = None  # an ONNX export's weights, where they are a file of their own

    def summary(self):
        lines = [
            f"wrote {self.path} ({self.format}, {self.size_bytes / 2**20:.2f} MiB): max |difference| of "
            f"the probabilities from the Keras model on {SAMPLE_IMAGES} sample images "
            f"{self.max_difference:.2e} (tolerance {self.tolerance:g})"
        ]
        if self.data_path:
            lines.append(f"its weights are in {self.data_path}, which goes wherever the .onnx file goes")
        if self.accuracy:
            a = self.accuracy
            lines.append(
                f"top-1 accuracy on {a['images']} labelled images: Keras {a['keras']:.4f}, "
                f"{self.format} {a[self.format]:.4f} (change {a[self.format] - a['keras']:+.4f})"
            )
        return "\n".join(lines)


def export(model, path, format, class_names=None, top_k=5, overwrite=False, eval_dir=None):
    """Writes `model` (a keras_vit model taking pixels, ending in softmax or sigmoid) to `path`
    in `format`, checks it against the model, and returns a Report.

    `class_names`: a list or a labels file; None: the shipped ImageNet names for 1000 or
    21,843 classes, else "class i". `eval_dir`: see the module's docstring.
    """
    external = format == "onnx" and _onnx_data_beside(model)  # OUT.onnx.data beside the graph
    _check(model, path, format, overwrite, external)
    # An earlier export of two files whose graph this one replaces: its data file would outlive it.
    stale_data = format == "onnx" and overwrite and not external and fileio.exists(path)
    names = labels.class_names(model.num_classes, class_names)
    sample = _sample_pixels(model)
    labelled = _read_labelled(eval_dir, names, model) if eval_dir else None
    report = {}

    def write_and_check(target):
        _write(model, target, format, names, top_k, external)
        # The Keras model runs after the conversion: the memory its forward pass leaves with this
        # process is not held while the ONNX conversion's process has its own peak.
        expected = np.asarray(model.predict(sample, verbose=0))
        run = _runner(target, format)
        difference = float(np.max(np.abs(run(sample) - expected)))
        if format == "saved_model":  # the served path too: PNG bytes through serving_default
            difference = max(difference, _byte_signature_difference(run.served, model, sample))
        if not difference <= TOLERANCE[format]:  # NaN fails too
            raise ExportError(
                f"{format} export does not match the Keras model: max |difference| of the "
                f"probabilities {difference:.2e} > {TOLERANCE[format]:g}; nothing was written"
            )
        report["difference"] = difference
        report["size"] = _size(target) + (os.path.getsize(target + ONNX_DATA_SUFFIX) if external else 0)
        if labelled is not None:
            report["accuracy"] = _accuracy(model, run, labelled, format)

    if format == "saved_model":
        _write_directory_atomic(path, write_and_check, overwrite)
    elif external:
        _write_pair_atomic(path, write_and_check)
    else:
        fileio.write_atomic(path, write_and_check)
    if stale_data and fileio.isfile(path + ONNX_DATA_SUFFIX):
        fileio.remove(path + ONNX_DATA_SUFFIX)
    data_path = path + ONNX_DATA_SUFFIX if external else None
    return Report(
        path,
        format,
        report["size"],
        report["difference"],
        TOLERANCE[format],
        report.get("accuracy"),
        data_path,
    )


def check_output(path, format, overwrite=False):
    """ExportError for an unknown format, or an output path it cannot be written to."""
    if format not in FORMATS:
        raise ExportError(f"unknown format {format!r}; use one of {', '.join(FORMATS)}")
    if format in EXTENSIONS and not str(path).endswith(EXTENSIONS[format]):
        raise ExportError(f"{path}: a {format} export is a file ending in {EXTENSIONS[format]}")
    if format == "saved_model":
        named = next((f for f, ext in EXTENSIONS.items() if str(path).endswith(ext)), None)
        if named:  # a SavedModel folder named like the other format's file
            raise ExportError(
                f"{path}: a saved_model export is a folder; pass --format={named} for a "
                f"{EXTENSIONS[named]} file, or a folder name"
            )
    if format == "saved_model" and fileio.is_remote(path):
        raise ExportError(f"{path}: write the SavedModel to a local directory, then copy it")
    if fileio.exists(path):
        if not overwrite:
            raise ExportError(f"{path} exists; pass --overwrite to replace it, or another output path")
        _check_replaceable(path, format)
    blocking = fileio.file_in_the_way(path)
    if blocking:
        raise ExportError(blocked_output(path, blocking))


def _check_replaceable(path, format):
    """--overwrite replaces an earlier export: never a folder of other files (`export . --overwrite`
    would have replaced the working directory, everything in it lost), nor a file by a folder."""
    is_dir = fileio.isdir(path)
    if format != "saved_model":
        if is_dir:
            raise ExportError(f"{path} is a folder, not a {format} file; choose another output path")
        return
    if not is_dir:
        raise ExportError(f"{path} is a file, not a SavedModel's folder; choose another output path")
    entries = fileio.listdir(path)
    if entries and not {"saved_model.pb", "saved_model.pbtxt"} & set(entries):
        raise ExportError(
            f"{path} holds no SavedModel ({len(entries)} other entries): --overwrite replaces an earlier "
            "export only; choose another output path"
        )


def _check(model, path, format, overwrite, external):
    check_output(path, format, overwrite)
    if keras.backend.backend() != "tensorflow":
        raise ExportError(
            f"exporting runs on the TensorFlow backend, not {keras.backend.backend()}: "
            "set KERAS_BACKEND=tensorflow"
        )
    if not getattr(model, "include_top", False) or not getattr(model, "include_preprocessing", False):
        raise ExportError(
            "export a classifier that takes pixels: include_top=True, include_preprocessing=True"
        )
    if model.classifier_activation not in ("softmax", "sigmoid"):
        raise ExportError(
            "export a model that returns probabilities (classifier_activation 'softmax' or 'sigmoid')"
        )
    serving.tensorflow()  # the install hints before any work
    if format == "onnx":
        _require(*ONNX_MODULES)
        if external and fileio.is_remote(path):
            raise ExportError(
                f"{path}: this model's ONNX export is two files (its weights, past 2 GiB, in "
                f"{os.path.basename(path)}.data); write them to a local path, then copy both"
            )
        if external and not overwrite and fileio.exists(path + ONNX_DATA_SUFFIX):
            raise ExportError(
                f"{path}{ONNX_DATA_SUFFIX} exists, where this export writes its weights; pass "
                "--overwrite to replace it, or another output path"
            )


def _onnx_data_beside(model):
    """Whether the model's ONNX export keeps its weights in a file of their own (OUT.onnx.data)."""
    weight_bytes = sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in model.weights)
    return weight_bytes > ONNX_MAX_WEIGHT_BYTES


def _sample_pixels(model):
    """Reproducible sample images: a smooth gradient and uniform noise, pixels in [0, 255]."""
    height, width = images.target_size(model)
    rng = np.random.default_rng(0)
    noise = rng.uniform(0, 255, (SAMPLE_IMAGES - 1, height, width, 3))
    ramp = np.linspace(0, 255, height * width * 3).reshape(1, height, width, 3)
    return np.concatenate([ramp, noise]).astype(np.float32)


def _write(model, target, format, names, top_k, external=False):
    tf = serving.tensorflow()
    if format == "saved_model":
        serving.save_serving_model(model, target, names, top_k)
    elif format == "onnx":
        onnx_export.write(model, target, external=external)
    else:
        with tempfile.TemporaryDirectory(prefix="keras_vit-") as scratch:
            serving.save_pixel_model(model, os.path.join(scratch, "model"))
            converter = tf.lite.TFLiteConverter.from_saved_model(os.path.join(scratch, "model"))
            # from_saved_model restored every variable to read the signatures; those copies hang
            # in reference cycles until collected: free them before the converter's own peak.
            gc.collect()
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # runs anywhere
            if format == "litert-int8":
                converter.optimizations = [tf.lite.Optimize.DEFAULT]  # dynamic-range int8 weights
            elif hasattr(converter, "_experimental_use_buffer_offset"):
                # The float32 weights after the flatbuffer, each at its offset (as files over
                # 2 GB must be; LiteRT and TensorFlow Lite 2.14 or later read them): else the
                # converter's Python side parses and rebuilds the whole file to deduplicate its
                # buffers, which holds about two more copies of the weights.
                converter._experimental_use_buffer_offset = True
            with open(target, "wb") as f:
                f.write(converter.convert())


def _require(*modules):
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"this export needs {', '.join(missing)}: {serving.INSTALL_HINT}")


def _runner(target, format):
    """A function float32 pixels -> probabilities that runs the artifact at `target`."""
    if format == "saved_model":
        tf = serving.tensorflow()
        loaded = tf.saved_model.load(target)
        signature = loaded.signatures["serving_pixels"]

        def run(x):
            return signature(pixels=tf.constant(x))["probabilities"].numpy()

        run.served = loaded.signatures["serving_default"]  # for the check of the byte signature
        return run
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(target, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda x: session.run(None, {name: x})[0]
    runner = litert_interpreter(target).get_signature_runner()
    return lambda x: next(iter(runner(pixels=x).values()))


def _byte_signature_difference(served, model, sample):
    """Max |difference| of serving_default's top-k probabilities on the sample, PNG-encoded."""
    tf = serving.tensorflow()
    pixels = np.round(sample).astype(np.uint8)
    scores = served(images=tf.constant([encode_png(x) for x in pixels]))["scores"].numpy()
    expected = np.sort(model.predict(pixels.astype(np.float32), verbose=0), axis=-1)[:, ::-1]
    return float(np.max(np.abs(scores - expected[:, : scores.shape[1]])))


def litert_interpreter(path):
    """A LiteRT interpreter for a .tflite file: ai-edge-litert's, else TensorFlow's own."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # tf.lite.Interpreter is deprecated but still ships with TensorFlow
        Interpreter = serving.tensorflow().lite.Interpreter
    return Interpreter(model_path=path)


def _size(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return os.path.getsize(path)


def _write_pair_atomic(path, fill):
    """fill(tmp/NAME) writes NAME and NAME.data in a temporary directory next to `path` (the
    graph finds its data by that name); the data file is then renamed into place, and the graph
    last, so a reader never finds a new graph without its data."""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=fileio.TEMP_PREFIX, suffix=f"-{name}", dir=parent)
    try:
        target = os.path.join(scratch, name)
        fill(target)
        os.replace(target + ONNX_DATA_SUFFIX, path + ONNX_DATA_SUFFIX)
        os.replace(target, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _write_directory_atomic(path, fill, overwrite):
    """fill(tmp_dir) into a temporary directory next to `path`, then renamed to `path`."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=fileio.TEMP_PREFIX, suffix=f"-{os.path.basename(path)}", dir=parent)
    old = None
    try:
        target = os.path.join(scratch, "new")
        fill(target)
        if overwrite and os.path.exists(path):
            old = os.path.join(scratch, "old")
            os.rename(path, old)
        os.rename(target, path)
    except BaseException:
        if old is not None and not os.path.exists(path):
            os.rename(old, path)  # put the previous export back
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _read_labelled(folder, names, model):
    """(pixels, class indices) of DIR/<class name>/<image> for every class folder in DIR."""
    if not os.path.isdir(folder):
        raise ExportError(f"{folder}: no such directory; pass a folder with one sub-folder per class")
    index = {name: i for i, name in enumerate(names)}
    pixels, targets = [], []
    for class_dir in sorted(os.listdir(folder)):
        if not os.path.isdir(os.path.join(folder, class_dir)):
            continue
        if class_dir not in index:
            raise ExportError(
                f"{folder}/{class_dir}: not a class name of the model; name each sub-folder after "
                f"its class (e.g. {names[0]!r})"
            )
        for name in sorted(os.listdir(os.path.join(folder, class_dir))):
            if name.lower().endswith(_IMAGE_SUFFIXES):
                pixels.append(images.resize(images.read_image(os.path.join(folder, class_dir, name)), model))
                targets.append(index[class_dir])
    if not targets:
        raise ExportError(f"{folder}: no images in class sub-folders")
    return np.stack(pixels), np.array(targets)


def _accuracy(model, run, labelled, format, batch=32):
    pixels, targets = labelled
    keras_top, export_top = [], []
    for start in range(0, len(targets), batch):
        chunk = pixels[start : start + batch]
        keras_top.append(np.argmax(model.predict(chunk, verbose=0), axis=-1))
        export_top.append(np.argmax(run(chunk), axis=-1))
    return {
        "images": len(targets),
        "keras": float(np.mean(np.concatenate(keras_top) == targets)),
        format: float(np.mean(np.concatenate(export_top) == targets)),
    }


def encode_png(pixels):
    """uint8 (h, w, 3) -> PNG bytes (lossless, so decoding gives the same pixels back)."""
    buffer = io.BytesIO()
    PIL.Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_vit.export",
        description="Export a ViT classifier as a SavedModel, ONNX or LiteRT file, checked against Keras.",
    )
    parser.add_argument("out", help="output: a directory for saved_model, a .onnx or .tflite file")
    parser.add_argument("--format", required=True, help=f"one of {', '.join(FORMATS)}")
    model_source.add_arguments(parser)
    parser.add_argument("--top_k", type=int, default=5, help="classes the SavedModel returns per image")
    parser.add_argument("--eval_dir", default=None, help="a folder of class sub-folders: measure top-1")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    args = parser.parse_args(argv)
    try:
        if args.format not in FORMATS:
            raise ExportError(f"unknown --format {args.format!r}; use one of {', '.join(FORMATS)}")
        if args.top_k < 1:
            raise ExportError(f"--top_k must be at least 1, got {args.top_k}")
        check_output(args.out, args.format, args.overwrite)  # before the model is loaded
        model_source.check_arguments(args)
        source = model_source.load(args)
        with contextlib.redirect_stdout(sys.stderr):  # converters print; stdout is the report
            report = export(
                source.model,
                args.out,
                args.format,
                source.class_names,
                top_k=args.top_k,
                overwrite=args.overwrite,
                eval_dir=args.eval_dir,
            )
    except (ValueError, ImportError, OSError) as err:  # OSError: e.g. a folder it may not write in
        print(f"error: {error_line(err, limit=2000)}", file=sys.stderr)
        return USAGE_ERROR
    print(report.summary())
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
