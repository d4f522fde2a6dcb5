"""trainers.early_signals: a signal while a training command imports is noted, not fatal (the
command's start acts on it: tests/test_preemption.py runs one)."""

import os
import signal
import time

import pytest

from trainers import early_signals


@pytest.fixture
def handlers():
    """The test process's own handlers, put back afterwards."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_training_command_notes_sigterm_until_its_start_takes_it(handlers):
    early_signals.catch(["python", "-m", "trainers.finetune", "--dataset=digits"])
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)
    assert early_signals.take() == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # noted no more: the caller's turn
    assert early_signals.take() == []


def test_other_programs_keep_pythons_handling(handlers):
    before = signal.getsignal(signal.SIGINT)
    for argv in (["python", "-m", "trainers.prepare"], ["python", "script.py"], []):
        early_signals.catch(argv)
        assert signal.getsignal(signal.SIGINT) is before
    assert early_signals.take() == []
