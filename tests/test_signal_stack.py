"""tests/signal_stack.py: after OpenVINO's CPU plugins are freed in the order they were made, the
test process still handles a signal (without it, a segmentation fault ends the process)."""

import ctypes
import gc
import mmap
import os
import signal
import time

import numpy as np
import openvino
import pytest
import signal_stack

pytestmark = pytest.mark.skipif(not signal_stack.LINUX, reason="Linux's signal stacks")


def _compiled_on_cpu():
    """A model compiled by a Core of its own: each makes the CPU plugin that swaps the stack."""
    pixels = openvino.opset13.parameter([2, 3], np.float32)
    model = openvino.Model([openvino.opset13.relu(pixels)], [pixels])
    return openvino.Core().compile_model(model, "CPU")


def test_a_signal_after_openvino_plugins_freed_in_order_is_handled():
    before = signal_stack.current()
    with signal_stack.kept():
        first = _compiled_on_cpu()
        second = _compiled_on_cpu()
        assert first(np.ones((2, 3), np.float32))[0].tolist() == [[1.0] * 3] * 2
        del first, second  # freed in the order they were made
        gc.collect()
    assert signal_stack.current().key() == before.key()
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs between bytecodes of the main thread
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert received == [signal.SIGTERM]


def test_a_freed_stack_is_not_mapped_and_the_current_one_is():
    stack = signal_stack.current()
    assert signal_stack.is_mapped(stack)  # Python's own (faulthandler), or none at all
    buffer = mmap.mmap(-1, 16384)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    inside = signal_stack._Stack(address, 0, 16384)
    assert signal_stack.is_mapped(inside)
    del inside  # no view of the buffer may outlive it
    gc.collect()
    buffer.close()
    assert not signal_stack.is_mapped(signal_stack._Stack(address, 0, 16384))
