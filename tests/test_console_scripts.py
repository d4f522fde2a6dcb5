"""tests/console_scripts.py: another package's command line, run in the test's process."""

import logging
import os
import sys

import console_scripts
import numpy as np
import pytest
import tensorflow as tf
from absl import logging as absl_logging


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A SavedModel whose serving signature doubles its input."""
    folder = str(tmp_path_factory.mktemp("doubling"))
    module = tf.Module()
    module.double = tf.function(
        lambda x: {"doubled": 2 * x}, input_signature=[tf.TensorSpec([None], tf.float32)]
    )
    tf.saved_model.save(module, folder, signatures={"serving_default": module.double})
    return folder


def _run_args(folder, *extra):
    return ["run", f"--dir={folder}", "--tag_set=serve", "--signature_def=serving_default", *extra]


def test_a_second_command_does_not_inherit_the_first_ones_flags(saved_model, tmp_path):
    """absl keeps a parsed flag's value for the process: without the reset, the second command
    below took the first one's --outdir and wrote there instead of printing its result."""
    outdir = tmp_path / "outputs"
    code, out, err = console_scripts.run(
        "saved_model_cli",
        _run_args(saved_model, "--input_exprs=x=[1.0, 2.5]", f"--outdir={outdir}"),
    )
    assert code == 0, err[-3000:]
    np.testing.assert_array_equal(np.load(outdir / "doubled.npy", allow_pickle=False), [2.0, 5.0])
    code, out, err = console_scripts.run("saved_model_cli", _run_args(saved_model, "--input_exprs=x=[4.0]"))
    assert code == 0, err[-3000:]
    assert "Result for output key doubled:\n[8.]" in out


def test_a_failed_command_gives_its_status_and_its_message():
    """As the installed `saved_model_cli show` ends: status 2, argparse's usage and the error."""
    code, out, err = console_scripts.run("saved_model_cli", ["show"])
    assert code == 2 and out == ""
    assert (
        err.splitlines()[-1]
        == "saved_model_cli show: error: flag --dir=None: Flag --dir must have a value other than None."
    )


def test_what_the_program_s_start_changes_in_the_process_is_put_back(tmp_path):
    """TensorBoard's start sets an environment variable and absl's verbosity, and absl's
    `app.run` adds its handler to the root logger and names the process after the program: left
    so, the tests that ran after it in the same worker met another process."""
    with tf.summary.create_file_writer(str(tmp_path / "train")).as_default():
        tf.summary.scalar("loss", 0.5, step=1)
    argv, environ = list(sys.argv), dict(os.environ)
    handlers, verbosity = list(logging.getLogger().handlers), absl_logging.get_verbosity()
    with open("/proc/self/comm") as f:
        process_name = f.read()
    code, out, err = console_scripts.run("tensorboard", [f"--logdir={tmp_path}", "--inspect"])
    assert code == 0 and "loss" in out, out + err
    assert sys.argv == argv and dict(os.environ) == environ
    assert logging.getLogger().handlers == handlers and absl_logging.get_verbosity() == verbosity
    with open("/proc/self/comm") as f:
        assert f.read() == process_name


def test_a_program_not_installed_says_so():
    with pytest.raises(AssertionError, match="^no-such-program is not installed in this environment"):
        console_scripts.run("no-such-program", [])


def test_a_program_ends_with_the_status_and_the_words_its_process_would_have(capsys):
    """The in-process commands (here and tests/trainer_cli.py's) read a program's end as the
    process's: a message to sys.exit is printed and gives 1, not 0; an escaped exception is a
    traceback and 1, not an error of the test itself."""

    def fails():
        raise ValueError("bad value")

    def stops(code):
        return lambda: sys.exit(code)

    ends = (lambda: None, lambda: 3, stops(None), stops(4))
    assert [console_scripts.exit_status(main) for main in ends] == [0, 3, 0, 4]
    assert capsys.readouterr().err == ""
    assert console_scripts.exit_status(stops("error: no such file")) == 1
    assert capsys.readouterr().err == "error: no such file\n"
    assert console_scripts.exit_status(fails) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and err.endswith("ValueError: bad value\n")
