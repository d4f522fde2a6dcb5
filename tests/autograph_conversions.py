"""Which functions AutoGraph converts while a test runs.

TensorFlow offers no public hook for it, so this wraps its private entry for each conversion
(`autograph.impl.api._convert_actual`); a TensorFlow release that renames it fails the tests that
use this at the patch, not silently.
"""

from tensorflow.python.autograph.impl import api as autograph_api


def recorded(monkeypatch):
    """A list that fills with "module.qualname" of every function AutoGraph converts from now on,
    until `monkeypatch` is undone."""
    converted = []
    convert = autograph_api._convert_actual

    def recording(entity, program_ctx):
        converted.append(f"{entity.__module__}.{entity.__qualname__}")
        return convert(entity, program_ctx)

    monkeypatch.setattr(autograph_api, "_convert_actual", recording)
    return converted
