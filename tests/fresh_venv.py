"""A fresh virtual environment holding exactly what `pip install` of some requirements would put
there, made in seconds and offline: the distributions are the ones already installed in the test
environment, linked into the new environment's site-packages instead of downloaded again.

`requirement_closure` follows each distribution's own declared requirements (markers evaluated,
extras followed), as pip resolves them; `link_distributions` links their files, so a module that
no requirement brings cannot be imported there (a missing Keras backend is really missing).
"""

import importlib.metadata
import os
import subprocess
import sys
import sysconfig

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def requirement_closure(requirements, skip=()):
    """{canonical name: Distribution} of the requirements and everything they require."""
    found = {}
    pending = [Requirement(text) for text in requirements]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in found or name in skip:
            continue
        found[name] = distribution = importlib.metadata.distribution(name)
        for text in distribution.requires or []:
            needed = Requirement(text)
            extras = requirement.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra}) for extra in extras):
                pending.append(needed)
    return found


def top_level_owners():
    """{top-level entry of site-packages: names of the installed distributions with files there}."""
    owners = {}
    for distribution in importlib.metadata.distributions():
        name = canonicalize_name(distribution.metadata["Name"])
        for path in distribution.files or []:
            if path.parts and path.parts[0] != "..":
                owners.setdefault(path.parts[0], set()).add(name)
    return owners


def link_distributions(distributions, target, owners=None):
    """Links the files of `distributions` into the folder `target`, as installed: a top-level
    folder only one installed distribution writes to is linked whole, a shared one (a namespace
    package such as `google`) file by file, so no other distribution's files come along."""
    owners = top_level_owners() if owners is None else owners
    for name, distribution in distributions.items():
        site = distribution.locate_file("")
        for path in distribution.files or []:
            if not path.parts or path.parts[0] == "..":  # scripts in bin/: not needed to import
                continue
            top = path.parts[0]
            whole = len(path.parts) > 1 and owners.get(top) == {name}
            source = os.path.join(site, top if whole else str(path))
            link = os.path.join(target, top if whole else str(path))
            if os.path.lexists(link) or not os.path.exists(source):
                continue
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(source, link)


def create(folder):
    """A new virtual environment without pip (nothing in its site-packages): its python and site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True, timeout=120)
    python = os.path.join(folder, "bin", "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    assert site != sysconfig.get_path("purelib"), site
    return python, site
