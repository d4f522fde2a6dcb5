"""trainers/data/digits.py: the UCI digits that scikit-learn ships, their stored stratified split and
the class selections (the pipelines over them: tests/test_data.py)."""

import sys

import numpy as np
import pytest

from trainers import data
from trainers.data import ops


@pytest.fixture(scope="module")
def digits():
    return data.get_spec("digits")


def test_digits_is_a_stratified_split_of_the_real_1797_images(digits):
    assert digits.num_classes == 10 and digits.class_names == [str(i) for i in range(10)]
    assert digits.num_examples["train"] + digits.num_examples["test"] == 1797
    assert digits.num_examples["test"] == 360
    test_labels = digits.records("test").labels
    assert set(np.bincount(test_labels)) <= {35, 36, 37}  # 20% of each class (~180 images per class)
    image = ops.decode_image(digits.records("train").payloads[0]).numpy()
    assert image.shape == (8, 8, 3) and image.dtype == np.uint8 and image.max() > 200


def test_the_digits_are_scikit_learns_split_as_it_splits_them_read_without_importing_it(monkeypatch):
    """The scans are read from scikit-learn's file and the split is stored (trainers/data/digits.py),
    so that a command need not import scikit-learn: a file that moved in a new scikit-learn, a
    stored split that is not its stratified split (or not in its order, which the pipeline's
    permutation depends on), or a read that imports scikit-learn after all, fails here."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from trainers.data import digits
    from trainers.data.splits import LAYOUT_SEED

    for name in [name for name in sys.modules if name.partition(".")[0] == "sklearn"]:
        monkeypatch.setitem(sys.modules, name, None)  # any import of scikit-learn fails
    (images, target), (train, test) = digits.scans(), digits.stored_split()
    monkeypatch.undo()
    want = load_digits()
    np.testing.assert_array_equal(images, want.images)
    np.testing.assert_array_equal(target, want.target)
    want_train, want_test = train_test_split(
        np.arange(len(want.target)),
        test_size=digits.DIGITS_TEST_FRACTION,
        stratify=want.target,
        random_state=LAYOUT_SEED,
    )
    np.testing.assert_array_equal(train, want_train)
    np.testing.assert_array_equal(test, want_test)


def test_digit_class_selection_relabels_from_zero(digits):
    high = data.get_spec("digits:5,6,7,8,9")
    assert high.num_classes == 5 and high.class_names == ["5", "6", "7", "8", "9"]
    assert data.get_spec("digits:0-4").class_names == ["0", "1", "2", "3", "4"]
    full, part = digits.records("train"), high.records("train")
    assert sorted(set(part.labels)) == [0, 1, 2, 3, 4]
    # the relabelled class 0 holds exactly the images of digit 5, in the same order
    np.testing.assert_array_equal(part.payloads[part.labels == 0], full.payloads[full.labels == 5])
    assert high.num_examples["train"] == int(np.isin(full.labels, [5, 6, 7, 8, 9]).sum())


def test_without_scikit_learn_the_digits_say_which_extra_to_install(monkeypatch):
    """The scans are scikit-learn's copy, found through its installed distribution: without it a
    digits command ends on this line (trainers/errors.py's one-line errors), not on a traceback."""
    import importlib.metadata

    from trainers.data import digits
    from trainers.errors import DatasetError

    def no_scikit_learn(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(digits.importlib.metadata, "distribution", no_scikit_learn)
    with pytest.raises(
        DatasetError, match=r'scikit-learn is not installed: pip install "keras-vision-transformer\[train\]"'
    ):
        digits.scans()
