"""Files on the local disk and on any TensorFlow file system (gs://, s3://, hdfs://, ram://).

Every path keras_vit and the trainers read or write goes through here. Local paths use the
standard library; a path with a URL scheme goes through `tf.io.gfile`, and TensorFlow is
imported only then, so keras_vit keeps working on the JAX and PyTorch backends without it.
Errors of TensorFlow's file systems come out as the built-in ones (FileNotFoundError,
OSError), so callers handle one kind.
"""

import builtins
import contextlib
import errno
import os
import posixpath
import re
import secrets
import shutil
import tempfile

# Temporary files of write_atomic are "<TEMP_PREFIX><random>-<target name>", next to the target.
TEMP_PREFIX = ".tmp-"
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_remote(path):
    """True for a path with a URL scheme (gs://bucket/x, ram://x, ...)."""
    return bool(_URL_SCHEME.match(os.fspath(path)))


def _gfile(path):
    try:
        import tensorflow as tf
    except ImportError:
        raise ImportError(
            f"{path}: paths with a URL scheme are read and written with TensorFlow's "
            "file systems; pip install tensorflow to use them"
        ) from None
    return tf.io.gfile


@contextlib.contextmanager
def _as_os_errors(path):
    import tensorflow as tf

    try:
        yield
    except tf.errors.NotFoundError as err:
        raise FileNotFoundError(errno.ENOENT, f"no such file or directory ({err.message})", path) from None
    except tf.errors.OpError as err:
        raise OSError(f"{path}: {' '.join(err.message.split())}") from None


def _remote(operation, path, *args, **kwargs):
    function = getattr(_gfile(path), operation)
    with _as_os_errors(path):
        return function(path, *args, **kwargs)


def join(path, *parts):
    path = os.fspath(path)
    return posixpath.join(path, *parts) if is_remote(path) else os.path.join(path, *parts)


def dirname(path):
    path = os.fspath(path)
    return posixpath.dirname(path.rstrip("/")) if is_remote(path) else os.path.dirname(path)


def exists(path):
    path = os.fspath(path)
    return _remote("exists", path) if is_remote(path) else os.path.exists(path)


def isdir(path):
    path = os.fspath(path)
    return _remote("isdir", path) if is_remote(path) else os.path.isdir(path)


def isfile(path):
    path = os.fspath(path)
    if is_remote(path):
        return _remote("exists", path) and not _remote("isdir", path)
    return os.path.isfile(path)


def makedirs(path):
    """Creates `path` and its parents; an existing directory is fine."""
    path = os.fspath(path)
    if is_remote(path):
        _remote("makedirs", path)
    else:
        os.makedirs(path, exist_ok=True)


def file_in_the_way(path):
    """For a local `path` to be written (a file or a folder) whose parent folders may not exist
    yet: the nearest existing one of them when it is a file, so that they cannot be made
    (makedirs would fail with "File exists" or "Not a directory"); else None, as for a remote path."""
    if is_remote(path):
        return None
    found = os.path.dirname(os.path.abspath(os.fspath(path)))
    while not os.path.exists(found):  # ends at the root, which exists
        found = os.path.dirname(found)
    return None if os.path.isdir(found) else found


def listdir(path):
    """The names in directory `path` (no trailing "/" on sub-directories)."""
    path = os.fspath(path)
    if is_remote(path):
        return [name.rstrip("/") for name in _remote("listdir", path)]
    return os.listdir(path)


def open(path, mode="r"):
    """A file object for `path`: "r"/"w" text (UTF-8), "rb"/"wb" binary.

    Remote files are GFile objects: seekable for reading (np.load takes them), written in
    order only, which is why writers of seekable formats go through write_atomic's callback.
    """
    path = os.fspath(path)
    if not is_remote(path):
        return builtins.open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    if "r" in mode and not _remote("exists", path):
        raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
    return _remote("GFile", path, mode)


def remove(path):
    path = os.fspath(path)
    if is_remote(path):
        _remote("remove", path)
    else:
        os.remove(path)


def replace(src, dst):
    """Renames `src` to `dst`, replacing `dst` if it exists."""
    src, dst = os.fspath(src), os.fspath(dst)
    if is_remote(src) or is_remote(dst):
        _remote("rename", src, dst, overwrite=True)
    else:
        os.replace(src, dst)


def rmtree(path):
    """Deletes directory `path` and everything in it; a missing one is fine."""
    path = os.fspath(path)
    if is_remote(path):
        if _remote("exists", path):
            _remote("rmtree", path)
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def local_copy(path):
    """A local path with the contents of `path`: itself if local, else a temporary copy.

    For readers that need a real file (h5py); the copy is deleted afterwards.
    """
    path = os.fspath(path)
    if not is_remote(path):
        yield path
        return
    scratch = tempfile.mkdtemp(prefix="keras_vit-")
    try:
        local = os.path.join(scratch, posixpath.basename(path))
        _remote("copy", path, local, overwrite=True)
        yield local
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_atomic(path, content):
    """Writes `path` so that a reader sees the old file or the whole new one, never a part.

    `content`: bytes, str (written as UTF-8), or a callable write(local_path) that fills the
    (existing, empty) local file it is given, e.g. `model.save_weights`; what it returns,
    write_atomic returns. The data goes to a temporary file in the target's directory, which is
    renamed over `path` once complete and removed if anything fails. Local files get the mode
    of any new file (0o666 less the umask, 0o644 under umask 022), not mkstemp's 0o600.
    """
    path = os.fspath(path)
    if is_remote(path):
        return _write_remote(path, content)
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = _create_local_temp(path)
    try:
        result = _fill(tmp, content)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return result


def _temp_name(path, basename):
    return f"{TEMP_PREFIX}{secrets.token_hex(4)}-{basename(path)}"


def written_path(path):
    """The file a write was for: write_atomic's temporary `.tmp-XXXXXXXX-NAME` stands for NAME
    (an error names the temporary file; a user knows the target)."""
    path = str(path)
    folder, name = os.path.split(path)
    if name.startswith(TEMP_PREFIX):
        name = name[len(TEMP_PREFIX) :].partition("-")[2] or name
    return os.path.join(folder, name) if path else ""


def _create_empty(path):
    """Creates the new file `path` like any other program would, so the umask decides its mode."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    return path


def _create_local_temp(path):
    """An empty new file next to `path` with a name no other writer uses."""
    while True:
        try:
            return _create_empty(os.path.join(os.path.dirname(path), _temp_name(path, os.path.basename)))
        except FileExistsError:
            continue


def _fill(tmp, content):
    """Writes `content` into the local file `tmp` and flushes it to the disk."""
    if callable(content):
        result = content(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return result
    data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    with builtins.open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return None


def _write_remote(path, content):
    gfile = _gfile(path)
    directory = posixpath.dirname(path)
    _remote("makedirs", directory)
    tmp = posixpath.join(directory, _temp_name(path, posixpath.basename))
    try:
        with _as_os_errors(path):
            if callable(content):
                # Remote files cannot seek while written (zip, HDF5 do): fill a local file first.
                scratch = tempfile.mkdtemp(prefix="keras_vit-")
                try:
                    local = _create_empty(os.path.join(scratch, posixpath.basename(path)))
                    result = _fill(local, content)
                    gfile.copy(local, tmp, overwrite=True)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
            else:
                result = None
                data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
                with gfile.GFile(tmp, "wb") as f:
                    f.write(data)
            gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        with contextlib.suppress(Exception):
            if gfile.exists(tmp):
                gfile.remove(tmp)
        raise
    return result
