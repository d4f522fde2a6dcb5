"""The documentation site as a reader sees it: built by MkDocs, served on 127.0.0.1, loaded in
headless Chromium (Debian's `chromium` package; `.ci/run` installs it where it is missing).

`make test` builds the site (`make docs`, into site/) just before the tests; these tests read
that build, and build the site themselves only when site/ is absent or older than its sources.

The home page, a guide and an API page must come with the site's navigation, the search index
the browser's search loads, and highlighted code blocks that the theme's script has finished
(each gets its copy button only once the page's JavaScript ran).
"""

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What `make docs` leaves in site/ after a strict build (a failed one stops before it), and what
# the site is built from: the pages, and the modules mkdocstrings renders.
MAKE_DOCS_STAMP = os.path.join(ROOT, "site", ".make-docs")
SOURCES = ("mkdocs.yml", "README.md", "docs", "keras_vit", "trainers", "configs")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PAGES = {  # path -> what the page must show besides the shared parts
    "": "Where everything else lives",  # the README, as the site's first page
    "guides/training/": "Fine-tuning on oxford_iiit_pet",
    "reference/keras_vit/": "keras_vit.models.ViT",
}


def _browser():
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def _newest_source_time():
    times = []
    for name in SOURCES:
        path = os.path.join(ROOT, name)
        if os.path.isfile(path):
            times.append(os.path.getmtime(path))
        for folder, subfolders, files in os.walk(path):
            subfolders[:] = [d for d in subfolders if d != "__pycache__"]
            times.extend(os.path.getmtime(os.path.join(folder, f)) for f in files)
    return max(times)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as `make docs` builds it from the working tree (warnings are errors): its build in
    site/ when that is newer than every source, else built here the same way."""
    if os.path.exists(MAKE_DOCS_STAMP) and os.path.getmtime(MAKE_DOCS_STAMP) > _newest_source_time():
        return os.path.dirname(MAKE_DOCS_STAMP)
    pytest.importorskip("mkdocs", reason="the [docs] extra is not installed (make test installs it)")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


class _Handler(http.server.SimpleHTTPRequestHandler):
    requested = []

    def log_message(self, format, *args):  # quiet; remember what the browser asked for
        _Handler.requested.append(self.path)


@pytest.fixture(scope="module")
def served(site):
    """http://127.0.0.1:PORT/ serving the site from a free port, and the paths requested from it."""
    handler = functools.partial(_Handler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", _Handler.requested
    finally:
        server.shutdown()
        server.server_close()


def load(url, profile):
    """The page's DOM once its scripts have run, from headless Chromium."""
    browser = _browser()
    if browser is None:
        pytest.skip(
            "no Chromium found (Debian: apt-get install chromium); the site is not loaded in a browser"
        )
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0 and "</html>" in proc.stdout, proc.stderr[-3000:]
    return proc.stdout


def test_the_search_index_is_served_and_lists_every_page(site, served):
    base, _ = served
    import urllib.request

    with urllib.request.urlopen(base + "search/search_index.json", timeout=30) as response:
        index = json.load(response)
    locations = {doc["location"].partition("#")[0] for doc in index["docs"]}
    assert {
        "",
        "guides/training/",
        "guides/benchmarks/",
        "reference/keras_vit/",
        "contributing/",
    } <= locations
    assert any("fine-tun" in doc["text"].lower() for doc in index["docs"])


@pytest.mark.parametrize("path", list(PAGES))
def test_a_page_renders_in_chromium(served, tmp_path, path):
    base, requested = served
    dom = load(base + path, tmp_path / "profile")
    assert PAGES[path] in dom
    # The navigation: the theme's primary nav with a link to every section of mkdocs.yml's nav.
    nav = re.search(r'<nav class="md-nav md-nav--primary"[\s\S]*?</nav>\s*</div>\s*</div>\s*</div>', dom)
    assert nav, "no primary navigation"
    for title in ("Install", "The library", "Training", "Performance", "keras_vit", "Contributing"):
        assert f">{title}<" in re.sub(r"\s+<", "<", re.sub(r">\s+", ">", nav.group(0))), title
    # Code blocks: highlighted by Pygments at build time, given a copy button by the page's script.
    # (mkdocstrings renders an API signature as a Python block of its own class, doc-signature)
    block = r'<div class="language-(\w+)(?: doc-signature)? highlight"><pre id="__code_\d+">([\s\S]*?)</pre>'
    blocks = re.findall(block, dom)
    assert blocks, "no highlighted code block"
    code = [body for language, body in blocks if language != "text"]  # not output samples
    assert code and all(re.search(r'<span class="\w+">', body) for body in code), "code without tokens"
    assert all('data-md-type="copy"' in body for _, body in blocks), "the theme's script did not run"
    # Search: the box is there, and the browser fetched the index it searches.
    assert 'class="md-search__input"' in dom
    assert any(p.startswith("/search/search_index.json") for p in requested), requested
