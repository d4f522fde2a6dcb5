"""Lists the trainers' commands: `python -m trainers`."""

import trainers
from keras_vit import commands


def main(argv=None):
    return commands.list_commands(trainers, argv)


if __name__ == "__main__":
    commands.exit_with(main)
