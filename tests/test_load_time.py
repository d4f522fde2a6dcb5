"""benchmarks/load_time.py: its files load with both loaders (the timing itself is not tested)."""

import json

from benchmarks import load_time


def test_the_tiny_files_load_with_each_loader(tmp_path, capsys):
    """Catches a benchmark that times a failing load, or files an earlier version cannot read
    (the .npz it writes has no config entry)."""
    load_time._save(str(tmp_path), ["tiny"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.keras", "tiny.npz"]
    for loader in load_time.LOADERS:
        load_time._load_once(str(tmp_path), "tiny", loader)
        assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["load_s"] > 0
    with open(tmp_path / "tiny.npz", "rb") as f:
        assert b"keras_vit/config" not in f.read()
