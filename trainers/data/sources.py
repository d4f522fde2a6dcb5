"""Where images come from: `get_spec(name)` resolves a dataset name to its source and its DatasetSpec.

A TFDS name, `folder:PATH` or `digits[:CLASSES]`. `spec.records(split)` then gives a split's examples
in a fixed natural order, held in memory (folders, digits) or streamed from a prepared TFDS data_dir.
"""

from trainers.data.digits import digits_spec, parse_digit_classes
from trainers.data.folders import folder_path, folder_spec
from trainers.data.spec import DatasetSpec
from trainers.data.tfds_prepare import open_tfds_builder
from trainers.data.tfds_source import tfds_spec
from trainers.errors import DatasetError


def check_name(dataset: str, data_dir: str | None = None) -> None:
    """DatasetError if `dataset` names nothing the trainers read: an unknown TFDS name, a folder
    that is not there, digit classes that do not parse. Nothing is prepared or read, so it is cheap
    enough to run before any other check of a command."""
    if not isinstance(dataset, str) or not dataset.strip():
        raise DatasetError(_EMPTY)
    dataset = dataset.strip()
    if dataset.startswith("folder:"):
        folder_path(dataset[len("folder:") :])
    elif dataset == "digits" or dataset.startswith("digits:"):
        parse_digit_classes(dataset[len("digits:") :] if ":" in dataset else "", dataset)
    else:
        open_tfds_builder(dataset, data_dir)


_EMPTY = "--dataset is empty: give a TFDS name (e.g. oxford_iiit_pet), folder:PATH or digits"


def get_spec(dataset: str, data_dir: str | None = None, manual_dir: str | None = None) -> DatasetSpec:
    """Resolves `dataset` ("cifar10", "folder:/path", "digits", "digits:0-4", ...) to a DatasetSpec."""
    if not isinstance(dataset, str) or not dataset.strip():
        raise DatasetError(_EMPTY)
    dataset = dataset.strip()
    if dataset.startswith("folder:"):
        return folder_spec(dataset, dataset[len("folder:") :])
    if dataset == "digits" or dataset.startswith("digits:"):
        return digits_spec(dataset, dataset[len("digits:") :] if ":" in dataset else "")
    return tfds_spec(dataset, data_dir, manual_dir)
