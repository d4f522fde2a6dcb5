"""The version of keras-vision-transformer: the one place it is written. setup.py reads this file
without importing the package; docs/changelog.md heads the release with it (tests/test_packaging.py)."""

__version__ = "0.2.0"
