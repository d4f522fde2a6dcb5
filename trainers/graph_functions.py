"""The functions TensorFlow traces into graphs for the trainers, traced as written.

tf.data's map, filter and flat_map functions, and the replica steps that `strategy.run` calls,
are rewritten by AutoGraph unless marked: AutoGraph, on by default, parses the source of the
traced function and of every function it calls (the objective, the model's layers, the image
ops), so that a Python `if` or `for` on a tensor becomes graph control flow. None of those
functions branches or loops on a tensor, so the rewrite only costs time, at the start of every
run (measured in docs/guides/training.md, "Less tracing"). The two loops that do loop on
tensors, the training loop's steps and the evaluation's pass (trainers/loop.py), stay converted;
a function marked here that did branch on a tensor fails as it is traced ("Using a symbolic
`tf.Tensor` as a Python `bool` is not allowed"), never silently.
"""

import tensorflow as tf


def as_written(function):
    """`function`, to be traced as written: AutoGraph converts neither it nor what it calls."""
    return tf.autograph.experimental.do_not_convert(function)
