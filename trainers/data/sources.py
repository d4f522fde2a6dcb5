"""Where images come from: `get_spec(name)` resolves a dataset name to its source and its DatasetSpec.

A TFDS name, `folder:PATH` or `digits[:CLASSES]`. `spec.records(split)` then gives a split's examples
in a fixed natural order, held in memory (folders, digits) or streamed from a prepared TFDS data_dir.
"""

from trainers.data.digits import digits_spec
from trainers.data.folders import folder_spec
from trainers.data.spec import DatasetSpec
from trainers.data.tfds_source import tfds_spec
from trainers.errors import DatasetError


def get_spec(dataset: str, data_dir: str | None = None, manual_dir: str | None = None) -> DatasetSpec:
    """Resolves `dataset` ("cifar10", "folder:/path", "digits", "digits:0-4", ...) to a DatasetSpec."""
    if not isinstance(dataset, str) or not dataset.strip():
        raise DatasetError(
            "--dataset is empty: give a TFDS name (e.g. oxford_iiit_pet), folder:PATH or digits"
        )
    dataset = dataset.strip()
    if dataset.startswith("folder:"):
        return folder_spec(dataset, dataset[len("folder:") :])
    if dataset == "digits" or dataset.startswith("digits:"):
        return digits_spec(dataset, dataset[len("digits:") :] if ":" in dataset else "")
    return tfds_spec(dataset, data_dir, manual_dir)
