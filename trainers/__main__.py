"""Lists the trainers' commands: `python -m trainers`."""

import trainers
from keras_vit import commands


def main(argv=None):
    del argv  # nothing to choose: the list is the whole answer
    print(commands.listing(trainers))
    return 0


if __name__ == "__main__":
    commands.exit_with(main)
