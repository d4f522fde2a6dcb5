"""Refuses to run when the unrelated `keras-vit` distribution's files share our package directory.

This project is distributed as `keras-vision-transformer`. The package index's `keras-vit` (1.0.1,
2023) is another project that also installs a package named `keras_vit`: keras_vit/__init__.py,
layers.py, config.py, utils.py and vit.py. Installed after ours, it overwrites our __init__.py
and layers.py; installed before ours, its config.py, utils.py and vit.py stay beside our files.
Either way the package is a mix of two libraries that fails somewhere deep inside.

Importing this module is the check, so that it runs once, before anything reaches layers.py,
wherever the package is entered: our __init__.py, the modules that import layers.py
(models, position_embeddings, posembs), the command-line entry points (predict, export, convert,
visualize) and trainers/__init__.py. The other project does not ship a file of this name, so
the check survives its install over ours. Standard library only: it must run before Keras.
"""

import os

# Files of the other project's package that ours does not have.
FOREIGN_FILES = ("vit.py", "config.py", "utils.py")
OUR_DISTRIBUTION = "keras-vision-transformer"
THEIR_DISTRIBUTION = "keras-vit"


def foreign_files(package_dir):
    """The other project's files present in `package_dir`, sorted."""
    return sorted(name for name in FOREIGN_FILES if os.path.isfile(os.path.join(package_dir, name)))


def message(package_dir, found):
    """The one line that says what is wrong and what to do."""
    return (
        f"keras_vit: {package_dir} also holds {', '.join(found)} of the unrelated package "
        f"'{THEIR_DISTRIBUTION}' from the package index, installed over this one "
        f"('{OUR_DISTRIBUTION}'): run `pip uninstall -y {THEIR_DISTRIBUTION}`, then "
        f"`pip install --force-reinstall --no-deps {OUR_DISTRIBUTION}` (or `pip install -e .` in a clone)"
    )


def check(package_dir):
    """Exits with the one-line message (status 1, no traceback) when foreign files are there."""
    found = foreign_files(package_dir)
    if found:
        raise SystemExit(message(package_dir, found))


check(os.path.dirname(os.path.abspath(__file__)))
