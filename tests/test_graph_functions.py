"""trainers/graph_functions.py: a marked function, and what it calls, is traced as written; a run
of the tf engine leaves AutoGraph only its two loops over tensors."""

import autograph_conversions
import pytest
import tensorflow as tf
import trainer_cli
from fixtures import TINY_DIGITS_FLAGS

from trainers.graph_functions import as_written


def _magnitude(x):
    if x > 0:  # a Python branch on a tensor: a graph op only if AutoGraph rewrites this function
        return x
    return -x


def test_a_marked_function_and_what_it_calls_are_traced_as_written():
    values = tf.data.Dataset.from_tensor_slices([-2.0, 3.0])
    # Unmarked, AutoGraph rewrites the branch of the function called.
    assert list(values.map(lambda x: _magnitude(x)).as_numpy_iterator()) == [2.0, 3.0]
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError, match="as a Python `bool`"):
        values.map(as_written(lambda x: _magnitude(x)))


def test_a_run_converts_only_the_training_and_evaluation_loops(monkeypatch, tmp_path):
    """Each function AutoGraph converts is parsed and rewritten at every start of a command:
    the data pipeline's functions, the replica steps and what they call (objective, model,
    numerics) cost a tiny digits run about a tenth of its CPU. A function added to the
    pipeline or the step without `as_written` shows here. The run covers accumulation (the
    replica step's own loop), evaluation and few-shot probes (the feature step)."""
    converted = autograph_conversions.recorded(monkeypatch)
    proc = trainer_cli.run_cli(
        "finetune",
        TINY_DIGITS_FLAGS
        + [
            "--dataset=digits",
            "--batch_size=16",
            "--accum_steps=2",
            "--total_steps=4",
            "--warmup_steps=1",
            "--steps_per_loop=2",
            "--eval_every=2",
            "--fewshot_datasets=digits",
            "--fewshot_shots=1",
            f"--workdir={tmp_path}",
        ],
    )
    assert proc.returncode == 0, proc.stderr
    ours = {name for name in converted if name.startswith(("trainers.", "keras_vit."))}
    loops = {f"trainers.loop.TensorFlowTrainer._{loop}_loop" for loop in ("train", "eval")}
    assert ours == loops
