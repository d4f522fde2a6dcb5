"""What the trainers print; TensorFlow's start-up lines they hide are keras_vit.startup's.

`import trainers` imports keras_vit, which imports Keras and with it TensorFlow with those lines
hidden (unless --verbose): `verbose_requested` and `native_stderr_hidden` are that module's.
"""

import logging
import sys
import time

from keras_vit.startup import native_stderr_hidden, verbose_requested

__all__ = [
    "Console",
    "Progress",
    "duration",
    "native_stderr_hidden",
    "show_library_messages",
    "verbose_requested",
]


class Console:
    """Prints progress on the chief only: in a multi-worker run the other workers stay quiet
    (their errors still reach stderr through the command line's error handling)."""

    def __init__(self, chief=True):
        self.chief = chief

    def print(self, text=""):
        if self.chief:
            print(text, flush=True)


def show_library_messages():
    """keras_vit's loader reports what it changed (position embeddings resized, a new head,
    pre-logits dropped) at INFO through Python logging, which shows only WARNING and above
    unless configured: the trainers show them as plain lines on stdout."""
    logger = logging.getLogger("keras_vit")
    if any(getattr(handler, "_keras_vit_console", False) for handler in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler._keras_vit_console = True
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


class Progress:
    """A line every `every_s` seconds (and one at the end) while a long pass runs, e.g. few-shot
    feature extraction: "  cifar10 train: 2048/50000 images, 410 img/s, ETA 0:01:57"."""

    def __init__(self, console, label, total, every_s=10.0, clock=None):
        self.console, self.label, self.total, self.every_s = console, label, total, every_s
        self.clock = clock or time.perf_counter
        self.start = self.last = self.clock()
        self.done = 0
        self.finished = False

    def update(self, count):
        self.done += count
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            self.console.print(self._line(now))
            self.finished = self.done >= self.total

    def finish(self):
        """The last line, unless the last update printed it already."""
        if not self.finished:
            self.console.print(self._line(self.clock()))
        self.finished = True

    def _line(self, now):
        seconds = max(now - self.start, 1e-9)
        rate = self.done / seconds
        text = f"  {self.label}: {self.done}/{self.total} images, {rate:.0f} img/s"
        if self.done < self.total and rate > 0:
            text += f", ETA {duration((self.total - self.done) / rate)}"
        return text + f" ({duration(seconds)})" if self.done >= self.total else text


def duration(seconds):
    """'H:MM:SS'."""
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
