"""`predict` and `evaluate` of keras_vit's models on Keras' OpenVINO backend: compiled for each
input shape, at the model's own precision, by one OpenVINO Core per process, and again when the
weights change.

Keras' OpenVINO backend compiles `predict`'s graph with the batch left open and with OpenVINO's
defaults, which on a CPU with bfloat16 instructions (AMX, AVX-512 BF16) compute a float32
model in bfloat16; and it keeps that graph after `set_weights` or `load_weights`, whose new
values it never sees (a weight is a constant of the graph there). Here the graph is built from
the model's current weights for the shape of the batch (batch included, as `torch.compile`
specialises a module), compiled with `INFERENCE_PRECISION_HINT` from the model's compute dtype,
and rebuilt when a weight holds another value than the one it was compiled with. `evaluate`
and `test_on_batch` there took their outputs from the same graph as Keras' `predict`, so they
run keras_vit's too (`test_step`).
"""

import functools

import keras
import numpy as np

# The model's compute dtype, as OpenVINO's inference precision.
PRECISION_HINTS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
# The batch a `predict` runs and its shorter last batch: each shape has a compiled copy of the
# weights, so no more than these are kept.
MAX_COMPILED_SHAPES = 2


@functools.cache
def core():
    """The process's one OpenVINO Core. The CPU plugin swaps the signal stack of the thread that
    makes a Core and puts back the one it found when the Core is freed, so Cores freed in the
    order they were made leave the thread a freed stack and the next signal kills the process."""
    import openvino

    return openvino.Core()


def precision_hint(model):
    """OpenVINO's inference precision for `model`'s compute dtype (float32 under mixed_bfloat16's
    variables is still bfloat16 arithmetic)."""
    dtype = keras.backend.standardize_dtype(model.dtype_policy.compute_dtype)
    if dtype not in PRECISION_HINTS:
        raise ValueError(
            f"predict on OpenVINO computes in {', '.join(PRECISION_HINTS)}, not {dtype}: build the model "
            "under one of those dtype policies"
        )
    return PRECISION_HINTS[dtype]


class CompiledPredict:
    """The `predict_function` of a keras_vit model on Keras' OpenVINO backend: called with a list
    of steps, each the (x,) or (x, y, sample_weight) of one batch, as Keras' own."""

    def __init__(self, model):
        self.model = model
        self.compiled = {}  # (shape, dtype): (compiled model, output structure), oldest first
        self.weight_values = None

    def __call__(self, steps):
        outputs = [self.run(keras.utils.unpack_x_y_sample_weight(step)[0]) for step in steps]
        if len(outputs) == 1:
            return outputs[0]
        return keras.tree.map_structure(lambda *parts: np.concatenate(parts), *outputs)

    def run(self, x):
        x = np.asarray(x)
        values = [variable.value for variable in self.model.weights]
        if (
            self.weight_values is None
            or len(values) != len(self.weight_values)
            or any(now is not then for now, then in zip(values, self.weight_values))
        ):
            # a weight was assigned since the graphs were built: they hold its old value
            self.compiled.clear()
            self.weight_values = values
        key = (x.shape, x.dtype.str)
        if key not in self.compiled:
            if len(self.compiled) >= MAX_COMPILED_SHAPES:
                del self.compiled[next(iter(self.compiled))]
            self.compiled[key] = self.compile(x.shape, x.dtype)
        compiled, structure = self.compiled[key]
        return keras.tree.pack_sequence_as(structure, list(compiled(x).to_tuple()))

    def compile(self, shape, dtype):
        import openvino
        import openvino.opset16 as opset
        from keras.src.backend.openvino.core import OpenVINOKerasTensor, get_device

        images = opset.parameter(list(shape), openvino.Type(dtype))
        outputs = self.model(OpenVINOKerasTensor(images.output(0)), training=False)
        results = [opset.result(output.output) for output in keras.tree.flatten(outputs)]
        graph = openvino.Model(results, [images])
        compiled = core().compile_model(
            graph, get_device(), {"INFERENCE_PRECISION_HINT": precision_hint(self.model)}
        )
        return compiled, outputs


def test_step(model, data):
    """Keras' OpenVINO `test_step` (the loss, its running mean and the compiled metrics of one
    batch), with the outputs of `model`'s own compiled graph (the `predict_function` above)."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    y_pred = model.make_predict_function().run(x)
    # Keras' own trainer for this backend does the same with the same private members: the loss
    # as compile() made it, and the tracker behind the "loss" entry of evaluate's logs.
    loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False)
    model._loss_tracker.update_state(np.asarray(loss), sample_weight=np.shape(x)[0])
    return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
