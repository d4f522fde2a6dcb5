"""Lists the library's commands: `python -m keras_vit`."""

from keras_vit import _clash  # noqa: F401  (first: refuses a package mixed with another's files)

# isort: split
import keras_vit
from keras_vit import commands


def main(argv=None):
    del argv  # nothing to choose: the list is the whole answer
    print(commands.listing(keras_vit))
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
