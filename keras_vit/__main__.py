"""Lists the library's commands: `python -m keras_vit`."""

from keras_vit import _clash  # noqa: F401  (first: refuses a package mixed with another's files)

# isort: split
import keras_vit
from keras_vit import commands


def main(argv=None):
    return commands.list_commands(keras_vit, argv)


if __name__ == "__main__":
    commands.exit_with(main)
