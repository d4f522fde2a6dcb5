"""Pictures in TensorBoard (WORKDIR/eval, IMAGES tab), drawn with keras_vit.visualize.

- `Pictures`, at each evaluation and at the end: attention-rollout overlays of a few fixed
  evaluation images with their true and predicted labels, the position-embedding similarity
  (the paper's Figure 7, centre) and the mean attention distance of every head against depth
  (Figure 7, right), so a pre-training run shows its model learning locality as it goes.
- `FewShotPlot`: few-shot accuracy against shots per class, next to the few-shot scalars.

Figures are rendered with matplotlib's Agg canvas, never pyplot: no display, no global state.
"""

import re

import numpy as np
import tensorflow as tf

from keras_vit import posembs, visualize

NUM_IMAGES = 4
_FEWSHOT_TAG = re.compile(r"^fewshot/(?:(?P<dataset>.+)/)?(?P<shots>\d+)shot_accuracy(?P<std>_std)?$")


def rendered(figure):
    """A matplotlib figure as a (1, H, W, 3) uint8 batch for tf.summary.image."""
    # Imported when the first figure is drawn (keras_vit.visualize imports matplotlib as lazily):
    # its Agg canvas was a fifth of a second of every trainer command's start, --help's too.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[None, ..., :3]


class Pictures:
    """An action (trainers/actions.py) that draws the model's attention as it trains; returns no tags."""

    name = "pictures"

    def __init__(self, model, writer, images, labels, class_names, every, split="eval"):
        """`images`: a few [-1, 1] evaluation images, fixed for the whole run; `labels`: their
        class indices (or multi-hot rows)."""
        self.model, self.writer, self.every, self.split = model, writer, every, split
        self.images = np.asarray(images, np.float32)[:NUM_IMAGES]
        self.labels = np.asarray(labels)[:NUM_IMAGES]
        self.class_names = list(class_names or [])

    @classmethod
    def from_dataset(cls, dataset, model, writer, class_names, every, split):
        """The first real (weight > 0) examples of an evaluation (images, labels, weights) dataset."""
        images, labels, weights = (np.asarray(t) for t in next(iter(dataset)))
        real = weights > 0
        return cls(model, writer, images[real], labels[real], class_names, every, split)

    def _name(self, index):
        return self.class_names[index] if index < len(self.class_names) else str(index)

    def _true(self, label):
        if np.ndim(label) == 0:
            return self._name(int(label))
        return "+".join(self._name(int(i)) for i in np.flatnonzero(label)[:3]) or "none"

    def figures(self):
        """{tag: matplotlib Figure} of the model as it is now."""
        model = self.model
        maps = [np.asarray(m, np.float64) for m in model.attention_maps(self.images)]
        grid = model.token_grid(self.images.shape[1:3])
        prefix, stride = visualize.prefix_tokens(model), visualize.token_stride(model)
        rollout = visualize.attention_rollout(maps, grid, prefix)
        titles = [f"true {self._true(label)}" for label in self.labels]
        if model.include_top:
            predicted = np.asarray(model(self.images, training=False), np.float32).argmax(axis=-1)
            titles = [f"{t}\npredicted {self._name(int(p))}" for t, p in zip(titles, predicted)]
        distance = visualize.mean_attention_distance(maps, grid, stride, prefix)
        figures = {
            f"{self.split}/attention_rollout": visualize.plot_attention_rollout(
                self.images, rollout, stride, titles=titles
            ),
            "mean_attention_distance": visualize.plot_mean_attention_distance(
                distance, image_size=self.images.shape[1:3]
            ),
        }
        if posembs.get(getattr(model, "posemb", posembs.OFFICIAL)).adds_to_tokens:  # else none to compare
            figures["position_embedding_similarity"] = visualize.plot_position_embedding_similarity(
                visualize.position_embedding_similarity(model, grid)
            )
        return figures

    def __call__(self, step, out=None, seconds=None):
        with self.writer.as_default(step=step):
            for tag, figure in self.figures().items():
                tf.summary.image(f"pictures/{tag}", rendered(figure))
        return {}

    def results(self, tags):
        return {}  # pictures only: nothing for results.json

    def final_lines(self, section):
        return []


def accuracy_by_shots(tags, rename=None):
    """({name: {shots: accuracy}}, {name: {shots: std}}) from few-shot tags
    ('fewshot/<dataset>/<k>shot_accuracy' or 'fewshot/<k>shot_accuracy')."""
    accuracy, std = {}, {}
    for tag, value in tags.items():
        found = _FEWSHOT_TAG.match(tag)
        if not found:
            continue
        name = found["dataset"] or "accuracy"
        name = (rename or {}).get(name, name)
        (std if found["std"] else accuracy).setdefault(name, {})[int(found["shots"])] = float(value)
    return accuracy, std


def log_accuracy_by_shots(tags, step, rename=None):
    """Writes the accuracy-against-shots plot to the default summary writer, if there are shots."""
    accuracy, std = accuracy_by_shots(tags, rename)
    if accuracy:
        figure = visualize.plot_accuracy_by_shots(accuracy, std, title=f"Few-shot linear probes, step {step}")
        tf.summary.image("fewshot/accuracy_by_shots_plot", rendered(figure), step=step)


class FewShotPlot:
    """Wraps an Evaluate action (trainers/actions.py) of few-shot probes: its tags, and their plot."""

    def __init__(self, evaluate, writer):
        self.evaluate, self.writer, self.every = evaluate, writer, evaluate.every

    def __call__(self, step, out=None, seconds=None):
        tags = self.evaluate(step, out, seconds)
        with self.writer.as_default():
            log_accuracy_by_shots(tags, step)
        return tags

    def results(self, tags):
        return self.evaluate.results(tags)

    def final_lines(self, section):
        return self.evaluate.final_lines(section)
