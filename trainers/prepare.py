"""Prepare a TFDS dataset in a data_dir once, before training: download (or read the files
downloaded by hand) and convert, with the same TFDS builder the trainers read.

    python -m trainers.prepare --dataset=oxford_iiit_pet --data_dir=/data/tfds
    python -m trainers.prepare --dataset=imagenet2012 --data_dir=/data/tfds --manual_dir=/data/imagenet_tars

TFDS's own `tfds build` command needs packages (apache_beam, mlcroissant) that image datasets do
not; this runs the builder through its Python API instead. Bad input or a download that cannot
happen is one line on stderr with exit code 2; nothing half-prepared is left behind.
"""

import sys

from absl import flags

from trainers import cli
from trainers.data.tfds_prepare import ensure_prepared, is_prepared, open_tfds_builder
from trainers.errors import UsageError
from trainers.fields import FIELDS


def prepare(dataset, data_dir=None, manual_dir=None):
    """Prepares `dataset` in `data_dir` (TFDS's default when None); returns (its folder, prepared before)."""
    if not dataset:
        raise UsageError("--dataset is required (a TFDS name, e.g. oxford_iiit_pet).")
    builder = open_tfds_builder(dataset, data_dir)
    prepared_before = is_prepared(builder)
    ensure_prepared(builder, dataset, manual_dir, in_prepare=True)
    return builder.data_dir, prepared_before


def _flags():
    values = flags.FlagValues()
    for name in ("dataset", "data_dir", "manual_dir"):
        flags.DEFINE_string(name, "", FIELDS[name].help, flag_values=values)
    return values


def main(argv=None):
    def body(values):
        folder, before = prepare(values.dataset, values.data_dir or None, values.manual_dir or None)
        print(f"{values.dataset} {'was already' if before else 'is now'} prepared in {folder}", flush=True)

    usage = "usage: python -m trainers.prepare --dataset=NAME [--data_dir=DIR] [--manual_dir=DIR]"
    return cli.main_with_own_flags("prepare", _flags(), usage, body, argv)


if __name__ == "__main__":
    sys.exit(main())
