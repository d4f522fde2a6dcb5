"""Prepare a TFDS dataset in a data_dir once, before training: download (or read the files
downloaded by hand) and convert, with the same TFDS builder the trainers read.

    python -m trainers.prepare --dataset=oxford_iiit_pet --data_dir=/data/tfds
    python -m trainers.prepare --dataset=imagenet2012 --data_dir=/data/tfds --manual_dir=/data/imagenet_tars
    python -m trainers.prepare --dataset=oxford_iiit_pet --stand_in=10 --data_dir=runs/fakepets

`--stand_in=N` makes, offline, a stand-in of the dataset instead: synthetic images, N training
and N/2 test images per class, converted by the same builder into the same format
(trainers/data/stand_in.py), for trying the commands without the network.

TFDS's own `tfds build` command needs packages (apache_beam, mlcroissant) that image datasets do
not; this runs the builder through its Python API instead. Bad input or a download that cannot
happen is one line on stderr with exit code 2; nothing half-prepared is left behind.
"""

from absl import flags

from keras_vit import commands
from trainers import cli
from trainers.data import stand_in
from trainers.data.tfds_prepare import ensure_prepared, is_prepared, open_tfds_builder
from trainers.errors import UsageError
from trainers.fields import FIELDS

STAND_IN_HELP = (
    "instead of downloading, make a stand-in of the dataset offline: synthetic images, this many "
    "training and half as many test images per class, in the real dataset's TFDS format "
    f"(needs --data_dir; makes {', '.join(sorted(stand_in.WRITERS))})"
)


def prepare(dataset, data_dir=None, manual_dir=None, stand_in_per_class=0):
    """Prepares `dataset` in `data_dir` (TFDS's default when None), or a stand-in of it with
    `stand_in_per_class` training images per class; returns (its folder, prepared before)."""
    if not dataset:
        raise UsageError("--dataset is required (a TFDS name, e.g. oxford_iiit_pet).")
    if stand_in_per_class:
        stand_in.check(dataset, stand_in_per_class, data_dir)
    builder = open_tfds_builder(dataset, data_dir)
    prepared_before = is_prepared(builder)
    if stand_in_per_class and not prepared_before:
        stand_in.prepare(builder, dataset, stand_in_per_class)
    else:
        ensure_prepared(builder, dataset, manual_dir, in_prepare=True)
    return builder.data_dir, prepared_before


def _flags():
    values = flags.FlagValues()
    for name in ("dataset", "data_dir", "manual_dir"):
        flags.DEFINE_string(name, "", FIELDS[name].help, flag_values=values)
    flags.DEFINE_integer("stand_in", 0, STAND_IN_HELP, flag_values=values)
    return values


def main(argv=None):
    def body(values):
        folder, before = prepare(
            values.dataset, values.data_dir or None, values.manual_dir or None, values.stand_in
        )
        what = values.dataset
        if values.stand_in and not before:
            per_class = (values.stand_in, stand_in.test_per_class(values.stand_in))
            what = f"a stand-in of {what} ({per_class[0]} training, {per_class[1]} test images per class)"
        print(f"{what} {'was already' if before else 'is now'} prepared in {folder}", flush=True)

    usage = (
        "usage: python -m trainers.prepare --dataset=NAME [--data_dir=DIR] [--manual_dir=DIR] [--stand_in=N]"
    )
    return cli.main_with_own_flags("prepare", _flags(), usage, body, argv)


if __name__ == "__main__":
    commands.exit_with(main)
