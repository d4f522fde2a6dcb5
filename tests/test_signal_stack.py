"""tests/signal_stack.py: after OpenVINO's CPU plugins are freed in the order they were made, the
test process still handles a signal (without it, a segmentation fault ends the process)."""

import gc
import os
import signal
import time

import numpy as np
import openvino
import signal_stack


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
