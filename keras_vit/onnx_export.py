"""ONNX files through Keras' PyTorch backend and torch.export, in a process of their own.

    python -m keras_vit.onnx_export FOLDER OUT.onnx [--external_data]    (run by keras_vit.export)

Keras' ONNX export on the TensorFlow backend goes through tf2onnx, whose optimizer deep-copies
the whole graph, weights included, before each of its passes and per iteration; the copies
form reference cycles that only the garbage collector frees, so they pile up: its memory grows
with the number of blocks times their weights (25 bytes per byte of weights for 24 blocks,
`python -m benchmarks.export_memory --growth`; ViT-B/16 at 384 px took about 21 GB).
Here the model, saved as its config and a `.weights.h5` file, is loaded in a child process on Keras' PyTorch
backend, where torch.export traces it (the weights stay the model's tensors, never copied
into a graph) and torch.onnx translates the trace (`optimize` folds the few constants there
are). The weights are written as ONNX external data, one tensor at a time,
then streamed into a single self-contained `.onnx` file (`embed_external_data`), so no step
holds a second copy of all the weights; past the 2 GiB one file holds (`--external_data`), they
stay in `OUT.onnx.data` beside it. A child process, because Keras fixes its backend per
process; it ends before the parent checks the file, so their peaks do not add up.
"""

import json
import os
import site
import subprocess
import sys
import tempfile

# Before Keras, whose import starts its backend.
from keras_vit import _clash  # noqa: F401  (refuses a package mixed with another's files)

# isort: split
import keras

from keras_vit import commands, errors

BACKEND = "torch"
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.weights.h5"
# The graph's input and output: the names the SavedModel's pixel signature uses too.
INPUT_NAME, OUTPUT_NAME = "pixels", "probabilities"
# torch.export specialises a dimension of size 1, so the trace runs on two images; the batch
# dimension stays symbolic in the file.
TRACE_BATCH = 2
# The child's argument for an export whose weights go beside the graph, in `OUT.onnx.data`.
EXTERNAL_FLAG = "--external_data"
# Wire types and field numbers of the ONNX protobuf messages the merge writes (onnx.proto3).
_LENGTH_DELIMITED = 2
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_COPY_CHUNK = 1 << 24


def write(model, path, external=False):
    """Writes `model` (a Keras model on any backend) to `path` as one self-contained ONNX file,
    or, `external`, as `path` with its weights in `path`.data beside it (ONNX's form for models
    past the 2 GiB a single protobuf holds).

    ValueError with the child's last line if the conversion fails."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # On the CPU even where PyTorch sees a GPU: tracing needs no accelerator, and the weights
    # are written from host memory.
    env = dict(os.environ, KERAS_BACKEND=BACKEND, KERAS_TORCH_DEVICE="cpu")
    if package_parent not in {*site.getsitepackages(), site.getusersitepackages()}:
        # A checkout this process imports from, perhaps by a sys.path entry the child lacks.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="keras_vit-onnx-") as scratch:
        # The config and a .weights.h5 file, which h5py writes and reads one variable at a time
        # (a .keras archive is assembled, and read back, in memory whole).
        config, weights = os.path.join(scratch, CONFIG_FILE), os.path.join(scratch, WEIGHTS_FILE)
        with open(config, "w", encoding="utf-8") as f:
            json.dump(keras.saving.serialize_keras_object(model), f)
        model.save_weights(weights)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "keras_vit.onnx_export",
                scratch,
                path,
                *([EXTERNAL_FLAG] if external else []),
            ],
            env=env,
            capture_output=True,
            text=True,
        )
    if proc.returncode:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()] or ["no output"]
        raise ValueError(
            f"the ONNX conversion on Keras' PyTorch backend failed (exit {proc.returncode}): {lines[-1]}"
        )


def convert(folder, path, external=False):
    """In this process, on the PyTorch backend: the model `write` saved in `folder` -> `path`
    (`external`: its weights in `path`.data)."""
    if keras.backend.backend() != BACKEND:
        raise ValueError(
            f"the ONNX conversion runs on KERAS_BACKEND={BACKEND}, not {keras.backend.backend()}"
        )
    import torch  # Keras' backend here, imported already

    with open(os.path.join(folder, CONFIG_FILE), encoding="utf-8") as f:
        model = keras.saving.deserialize_keras_object(json.load(f), safe_mode=True)
    model.load_weights(os.path.join(folder, WEIGHTS_FILE))
    height, width = model.input_shape[1:3]

    class Pixels(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, pixels):
            return self.model(pixels, training=False)

    pixels = torch.zeros((TRACE_BATCH, height, width, 3))
    with torch.no_grad():
        program = torch.onnx.export(
            Pixels(model).eval(),
            (pixels,),
            dynamo=True,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes={INPUT_NAME: {0: torch.export.Dim("batch")}},
            optimize=False,
            verbose=False,
        )
    optimize(program.model)
    if external:  # torch.onnx names the data file after the graph's: `path`.data
        program.save(path, external_data=True)
        return
    # In the parent's scratch folder, which it removes even if this process dies.
    graph = os.path.join(folder, "model.onnx")
    program.save(graph, external_data=True)
    del program
    embed_external_data(graph, path)


def optimize(model):
    """torch.onnx's `optimize=True` (ONNX Script's optimizer) less its pattern rewrites, in place
    on the ONNX IR `model`: the shape arithmetic folded to constants, the constants lifted to
    initializers, unused and repeated nodes removed. The rewrites try each of their rules on
    every node, in a time that grows faster than the number of blocks (7 of 26 s of the
    conversion for 24 blocks of width 256; ViT-L/16's export took 58 s with them, 48 s without),
    and changed nothing here: 9 nodes of shape arithmetic fewer of a ViT's 1,154, the same
    outputs and the same onnxruntime speed."""
    import onnx_ir
    from onnx_ir.passes import common
    from onnxscript import optimizer

    common.InlinePass()(model)
    for _ in range(2):  # the optimizer's own two rounds, the second only if the first folded
        if not optimizer.fold_constants_ir(model, onnx_shape_inference=True).modified:
            break
        common.RemoveUnusedNodesPass()(model)
    onnx_ir.passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.NameFixPass(),
    )(model)


def embed_external_data(graph_path, path):
    """The ONNX model at `graph_path`, whose tensors are external data beside it, written to
    `path` as one file with the tensors inside, streamed: one tensor in memory at a time.

    A protobuf parser merges repeated occurrences of a message field, and appends the repeated
    fields inside them: the file is the model without those tensors, then one `graph` record
    per tensor holding just that `initializer`, which every ONNX reader reads as one graph.
    """
    import onnx

    model = onnx.load(graph_path, load_external_data=False)
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    inline = [t for t in model.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    del model.graph.initializer[:]
    model.graph.initializer.extend(inline)
    folder = os.path.dirname(graph_path)
    with open(path, "wb") as out:
        out.write(model.SerializeToString())
        for tensor in external:
            place = {entry.key: entry.value for entry in tensor.external_data}
            offset, length = int(place.get("offset", 0)), int(place["length"])
            tensor.ClearField("external_data")
            tensor.data_location = onnx.TensorProto.DEFAULT
            head = tensor.SerializeToString() + _key(_TENSOR_RAW_DATA) + _varint(length)
            initializer = _key(_GRAPH_INITIALIZER) + _varint(len(head) + length)
            graph_length = len(initializer) + len(head) + length
            out.write(_key(_MODEL_GRAPH) + _varint(graph_length) + initializer + head)
            with open(os.path.join(folder, place["location"]), "rb") as data:
                data.seek(offset)
                _copy(data, out, length)


def _copy(source, target, length):
    while length:
        chunk = source.read(min(length, _COPY_CHUNK))
        if not chunk:
            raise ValueError(f"{source.name}: external data ends early")
        target.write(chunk)
        length -= len(chunk)


def _key(field):
    return _varint(field << 3 | _LENGTH_DELIMITED)


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    external = EXTERNAL_FLAG in args
    folder, path = [arg for arg in args if arg != EXTERNAL_FLAG]
    try:
        convert(folder, path, external=external)
    except Exception as err:  # the parent reports the last line
        print(f"error: {type(err).__name__}: {errors.first_line(err, limit=2000)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
