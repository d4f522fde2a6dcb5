"""The library's error for an unusable checkpoint, and the one helper that shortens messages."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message is one line naming the file."""


def first_line(error, limit=300):
    """The first line of an error's message (its type's name when it has none), at most `limit` long."""
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:limit]
