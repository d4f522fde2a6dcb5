"""The library's error for an unusable checkpoint, and the helpers that make messages one line."""

from keras_vit import fileio


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message is one line naming the file."""


def first_line(error, limit=300):
    """The first line of an error's message (its type's name when it has none), at most `limit` long."""
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:limit]


def error_line(error, limit=300):
    """A command's error as one line: `first_line`, except for an OSError that names its file,
    which gets the path, the system's words and what to check ("/proc/x: no such file or
    directory; ..."), where str(error) starts with "[Errno 2]"."""
    if isinstance(error, OSError) and error.strerror and error.filename:
        path = fileio.written_path(error.filename)
        return f"{path}: {error.strerror.lower()}; check that path and its permissions"
    return first_line(error, limit)


def blocked_output(path, blocking):
    """The error line for an output `path` under a file (fileio.file_in_the_way's `blocking`)."""
    return f"{path} cannot be written: {blocking} is a file, not a folder; choose another output path"
