"""The trainers' errors: one base class whose message is the one-line command-line error.

A `TrainerError` reaches the user as `PROGRAM: error: MESSAGE` on stderr, no traceback, with its
`exit_code`: 2 for input that cannot work (`UsageError` and its kinds: a dataset, a strategy, a
few-shot setting, a model that does not fit), 1 for a run that started and cannot go on
(`TrainingError`). Raise the most specific kind; catch `TrainerError`.
"""

from keras_vit.errors import first_line  # noqa: F401 (the one helper, shared with the library)


class TrainerError(Exception):
    """Base of every error the trainers report as one line."""

    exit_code = 1


class UsageError(TrainerError, ValueError):
    """Bad input from the user, found before anything is written: exit code 2."""

    exit_code = 2


class DatasetError(UsageError):
    """A dataset that cannot be used as asked."""


class StrategyError(UsageError):
    """A tf.distribute strategy that cannot be created here."""


class FewShotError(UsageError):
    """Few-shot probes that cannot run as asked."""


class IncompatibleModelError(UsageError):
    """A model whose representation the probes or trainers cannot use."""


class TrainingError(TrainerError, RuntimeError):
    """The run started but cannot go on (e.g. the loss diverged): exit code 1."""

    exit_code = 1


def one_line(error):
    """The whole message on one line: newlines and runs of spaces become single spaces."""
    return " ".join(str(error).split()) or type(error).__name__
