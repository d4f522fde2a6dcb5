"""keras_vit.hub without a network: an unreachable Hub is one line in seconds, and the cache
still serves what it holds (huggingface_hub alone retries each missing file for about 23 s)."""

import socket
import time

import pytest

from keras_vit import hub
from keras_vit.errors import CheckpointError

huggingface_hub = pytest.importorskip("huggingface_hub")
hub_constants = pytest.importorskip("huggingface_hub.constants")
REPO = "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"
# huggingface_hub alone retries each missing file for about 23 s; this leaves a loaded machine
# room for the probe (up to hub.PROBE_TIMEOUT_S) and the client's start.
FAST_S = 10


@pytest.fixture
def closed_endpoint(monkeypatch):
    """HF_ENDPOINT as huggingface_hub read it, pointed at a local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setattr(hub_constants, "ENDPOINT", endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return endpoint


def _put_in_cache(cache_dir, repo, files):
    """`files` ({name: bytes}) as huggingface_hub's cache holds a downloaded snapshot of `repo`."""
    commit = "0" * 40
    root = cache_dir / f"models--{repo.replace('/', '--')}"
    (root / "snapshots" / commit).mkdir(parents=True)
    for name, data in files.items():
        (root / "snapshots" / commit / name).write_bytes(data)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    return root / "snapshots" / commit


def test_an_unreachable_hub_is_one_line_in_seconds(closed_endpoint, tmp_path):
    start = time.monotonic()
    with pytest.raises(CheckpointError) as raised:
        hub.download(f"hf-hub:{REPO}", cache_dir=tmp_path)
    assert time.monotonic() - start < FAST_S
    message = str(raised.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"hf-hub:{REPO}: model.safetensors is not in the Hugging Face cache")
    assert closed_endpoint in message and "HF_HUB_OFFLINE=1" in message


def test_an_unreachable_hub_still_serves_the_cache(closed_endpoint, tmp_path):
    snapshot = _put_in_cache(tmp_path, REPO, {"config.json": b"{}", "model.safetensors": b"weights"})
    start = time.monotonic()
    assert hub.download(f"hf-hub:{REPO}", cache_dir=tmp_path) == str(snapshot)
    assert time.monotonic() - start < FAST_S


def test_a_reachable_endpoint_is_not_refused(monkeypatch):
    # Any HTTP answer, an error status too, means the Hub is there: the download then says what is wrong.
    class Session:
        def head(self, url, timeout):
            assert timeout == hub.PROBE_TIMEOUT_S
            return object()

    monkeypatch.setattr(huggingface_hub, "get_session", lambda: Session())
    assert hub.unreachable() is None


def test_predict_on_an_unreachable_hub_name_is_one_line_in_seconds(
    closed_endpoint, tmp_path, capsys, monkeypatch
):
    import numpy as np
    import PIL.Image

    from keras_vit import predict

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    image = str(tmp_path / "cat.png")
    PIL.Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    start = time.monotonic()
    assert predict.main([image, f"--weights=hf-hub:{REPO}"]) == 2
    assert time.monotonic() - start < FAST_S
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1
    assert err.startswith(f"error: hf-hub:{REPO}: model.safetensors is not in the Hugging Face cache")
