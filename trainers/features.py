"""Frozen representations for linear probes: which tensor of a ViT is "the feature", and
computing it over a whole split with any tf.distribute strategy or the jax engine's mesh.

The feature is what the head sees: the tanh pre-logits when the model has a representation
layer, else the pooled output of the encoder (the class token, or the mean of the patch tokens
for classifier "gap"). "pixels" is the raw-image baseline: the resized image, flattened.
"""

import keras
import numpy as np
import tensorflow as tf

from trainers import data, engines
from trainers.console import Progress
from trainers.errors import IncompatibleModelError

PIXELS = "pixels"


def representation_model(model):
    """A keras.Model from the model's input to its representation (B, D), sharing its weights.

    Models built with include_top=False and a pooling already output it; otherwise the
    sub-model ends at the input of the head, which is the pre-logits output when the model
    has them and the pooled encoder output when not.
    """
    if hasattr(model, "representation_model"):  # keras_vit.ViT knows its own (gap: no class token)
        return model.representation_model()
    if len(model.outputs) == 1 and len(model.outputs[0].shape) == 2 and not _has_layer(model, "head"):
        return model
    for name in ("head", "pre_logits"):
        if _has_layer(model, name):
            layer = model.get_layer(name)
            tensor = layer.input if name == "head" else layer.output
            return keras.Model(model.inputs, tensor, name=f"{model.name}_representation")
    raise IncompatibleModelError(
        f"model {model.name!r} has no 'head' or 'pre_logits' layer and does not output "
        f"a pooled (batch, dims) representation; build it with include_top=False and pooling='token'"
    )


def _has_layer(model, name):
    try:
        model.get_layer(name)
        return True
    except ValueError:
        return False


class FeatureExtractor:
    """Computes the representation of every example of a split, dropping the padding.

    Built once per model (the compiled step is reused on every call, so calling it again after
    more training steps costs no retracing).
    """

    def __init__(self, model, strategy=None, console=None):
        """`console`: a trainers.console.Console that shows the extraction's progress."""
        self.strategy = strategy or tf.distribute.get_strategy()
        self.console = console
        self._step = None
        if isinstance(model, str):
            if model != PIXELS:
                raise IncompatibleModelError(f"unknown feature mode {model!r}; pass a model or {PIXELS!r}")
            # Raw pixels need no device and no compiled step: each is one more tf.function traced
            # from the same code, and TensorFlow warns on stderr about "retracing" once a
            # process has traced it five times in a few calls (a pre-training run and the
            # probes of four models, as in the demo).
            return
        # The engine's compiled forward pass (trainers/engines/).
        self._step = engines.of(self.strategy).feature_step(representation_model(model), self.strategy)

    def __call__(self, spec, split, *, image_size, batch_size, ops=None):
        """(features float32 (n, d), labels int64 (n,)) of the whole `split`, in the split's order.
        `ops`: the image ops (a run's --pp_eval); None: resize to `image_size`."""
        if spec.multi_label:
            raise data.DatasetError(
                data.multi_label_refusal(
                    spec, "a linear probe", "probe a single-label dataset (e.g. cifar10, oxford_iiit_pet)"
                )
            )
        sizing = {"image_size": image_size} if ops is None else {"ops": list(ops)}
        input_fn = data.make_input_fn(spec, split, global_batch_size=batch_size, training=False, **sizing)
        if self._step is None:  # pixels: the global batches, on the host
            dataset = input_fn(tf.distribute.InputContext())
        else:
            dataset = data.distribute(self.strategy, input_fn)
        if self._step is not None:
            self._step.refresh()  # the model's weights as they are now (training moves them)
        features, labels = [], []
        progress = None
        if self.console is not None:
            progress = Progress(self.console, f"features of {spec.name} {split}", spec.num_examples[split])
        for batch in dataset:
            if self._step is None:
                images, y, w = (t.numpy() for t in batch)
                f = images.reshape(len(images), -1).astype(np.float32)
            else:
                f, y, w = (np.asarray(t) for t in self._step(batch))
            keep = w > 0
            features.append(f[keep])
            labels.append(y[keep])
            if progress:
                progress.update(int(keep.sum()))
        if progress:
            progress.finish()
        if not features:
            raise data.DatasetError(f"split {split!r} of {spec.name} is empty")
        return np.concatenate(features), np.concatenate(labels).astype(np.int64)


def extract_features(model, spec, split, *, image_size, batch_size, strategy=None, console=None):
    """(features, labels) of `split` under the frozen `model` (or PIXELS)."""
    extractor = FeatureExtractor(model, strategy, console)
    return extractor(spec, split, image_size=image_size, batch_size=batch_size)
