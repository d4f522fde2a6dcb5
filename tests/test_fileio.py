"""keras_vit.fileio: one file layer for local paths and TensorFlow file systems (ram:// here)."""

import os
import stat
import sys
import uuid

import pytest
import tensorflow as tf

from keras_vit import fileio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.fixture
def ram_dir():
    path = f"ram://fileio-{uuid.uuid4().hex}"
    yield path
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _fail_half_way(tmp):
    with open(tmp, "wb") as f:
        f.write(b"half of the new")
    raise RuntimeError("killed")


def test_local_write_replaces_the_file_with_the_umask_mode(tmp_path, umask_022):
    path = tmp_path / "sub" / "results.json"
    fileio.write_atomic(path, "{}\n")  # creates the folder too
    assert path.read_text() == "{}\n" and _mode(path) == 0o644
    fileio.write_atomic(path, b"new")
    assert path.read_bytes() == b"new" and _mode(path) == 0o644
    assert fileio.write_atomic(tmp_path / "w.npz", lambda tmp: open(tmp, "wb").write(b"abc")) == 3
    assert _mode(tmp_path / "w.npz") == 0o644
    os.umask(0o027)  # the mode follows the umask; it is not a constant
    fileio.write_atomic(path, b"private")
    assert _mode(path) == 0o640
    assert sorted(os.listdir(tmp_path / "sub")) == ["results.json"]


def test_local_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "model.npz"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="killed"):
        fileio.write_atomic(path, _fail_half_way)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["model.npz"]


def test_ram_write_read_and_failed_write(ram_dir):
    path = fileio.join(ram_dir, "run", "config.json")
    fileio.write_atomic(path, '{"a": 1}\n')
    with fileio.open(path) as f:
        assert f.read() == '{"a": 1}\n'
    fileio.write_atomic(path, lambda tmp: open(tmp, "wb").write(b"from a local file"))
    with fileio.open(path, "rb") as f:
        assert f.read() == b"from a local file"
    with pytest.raises(RuntimeError, match="killed"):
        fileio.write_atomic(path, _fail_half_way)
    with fileio.open(path, "rb") as f:
        assert f.read() == b"from a local file"
    assert fileio.listdir(fileio.join(ram_dir, "run")) == ["config.json"]


def test_ram_file_operations(ram_dir, tmp_path):
    folder = fileio.join(ram_dir, "a", "b")
    assert not fileio.exists(folder)
    fileio.makedirs(folder)
    fileio.makedirs(folder)  # already there: fine
    assert fileio.isdir(folder) and not fileio.isfile(folder)
    first = fileio.join(folder, "x.bin")
    fileio.write_atomic(first, b"x")
    assert fileio.isfile(first) and fileio.dirname(first) == folder
    fileio.replace(first, fileio.join(folder, "y.bin"))
    assert fileio.listdir(folder) == ["y.bin"]
    with fileio.local_copy(fileio.join(folder, "y.bin")) as local:
        assert not fileio.is_remote(local) and open(local, "rb").read() == b"x"
    assert not os.path.exists(local)  # the temporary copy is gone
    with pytest.raises(FileNotFoundError):
        fileio.open(fileio.join(folder, "missing.bin"), "rb")
    fileio.remove(fileio.join(folder, "y.bin"))
    assert not fileio.exists(fileio.join(folder, "y.bin"))
    fileio.write_atomic(fileio.join(folder, "z.bin"), b"z")
    fileio.rmtree(fileio.join(ram_dir, "a"))
    fileio.rmtree(fileio.join(ram_dir, "never-made"))  # missing: fine
    assert not fileio.exists(fileio.join(folder, "z.bin"))


def test_the_file_that_stops_an_output_s_folders_from_being_made(tmp_path):
    """Catches a walk that stops at the wrong level: the commands check this before any work, where
    makedirs later failed with a traceback ("File exists", "Not a directory")."""
    (tmp_path / "notes.txt").write_text("mine\n")
    assert fileio.file_in_the_way(tmp_path / "notes.txt" / "run") == str(tmp_path / "notes.txt")
    assert fileio.file_in_the_way(tmp_path / "notes.txt" / "a" / "b.npz") == str(tmp_path / "notes.txt")
    # An existing file at the path itself is the output being replaced, not in its way.
    assert fileio.file_in_the_way(tmp_path / "notes.txt") is None
    assert fileio.file_in_the_way(tmp_path / "new" / "deeper" / "model.onnx") is None
    assert fileio.file_in_the_way("ram://bucket/notes.txt/run") is None


def test_a_temporary_file_is_named_by_the_file_it_was_for():
    assert fileio.written_path("/w/.tmp-0a1b2c3d-model.npz") == "/w/model.npz"
    assert fileio.written_path("/w/.tmp-0a1b2c3d-a-b.json") == "/w/a-b.json"
    assert fileio.written_path("/w/model.npz") == "/w/model.npz"


def test_only_paths_with_a_scheme_are_remote():
    assert fileio.is_remote("gs://bucket/runs") and fileio.is_remote("ram://x")
    assert fileio.is_remote("s3://b/k") and fileio.is_remote("hdfs://host/p")
    assert not fileio.is_remote("/data/gs:/x") and not fileio.is_remote("runs/gs:x")
    assert fileio.join("gs://bucket", "runs", "model.npz") == "gs://bucket/runs/model.npz"


def test_remote_path_without_tensorflow_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if it were not installed
    with pytest.raises(ImportError, match="pip install tensorflow") as err:
        fileio.exists("gs://bucket/model.npz")
    assert str(err.value).startswith("gs://bucket/model.npz: ") and "\n" not in str(err.value)
    fileio.write_atomic(tmp_path / "local.txt", "local paths need no TensorFlow")
    assert fileio.exists(tmp_path / "local.txt")


def test_keras_vit_runs_on_jax_without_tensorflow(jax_without_tensorflow):
    """keras_vit, its convert, fileio and weights modules import, save and load on Keras' JAX
    backend where TensorFlow is not installed: catches a module-level `import tensorflow` (fileio
    needs it only for remote paths). The child is shared with test_packaging and test_predict
    (tests/jax_without_tensorflow.py)."""
    assert jax_without_tensorflow.part("fileio")["backend"] == "jax"
