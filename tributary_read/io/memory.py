"""An in-memory store, ``memory://NAME/PATH``: tables that live as long as the process.

For tests and in-process pipelines that want a table without a disk or a
server. Every ``MemoryStorage`` of one process shares one volume behind one
lock, so two opens of the same URI (a writer and a reader, eight racing
committers) see the same files, as separate processes would on a real store.
Nothing outside the process can: Spark and Hive have no URI for it
(``hadoop_scheme`` is None).

It behaves as an object store does, so in-process tests exercise the S3 code
paths without a server:

* files are keys; a directory is implied by the keys under it (and by the
  marker :meth:`MemoryStorage.makedirs` leaves, as S3 directory markers do),
  so it has no mtime (``real_directories`` is False);
* a file appears when its output stream is closed, complete, as an S3 upload
  does; :meth:`MemoryStorage.replace` is then one atomic write;
* :meth:`MemoryStorage.create_if_absent` checks and inserts under the lock:
  exactly one of any number of racing committers wins.
"""

from __future__ import annotations

import io
import threading
import time
from typing import Mapping
from urllib.parse import ParseResult

import pyarrow as pa
import pyarrow.fs as pafs

from tributary_read.errors import InvalidInputError, StorageError
from tributary_read.io.storage import Capabilities, Entry, FileInfo, Storage, Unlisted, safe_relpath

_FILE, _DIR = pafs.FileType.File, pafs.FileType.Directory


class _Volume:
    """Every ``memory://`` file of the process: full path -> (bytes, mtime ns), plus directory markers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: dict[str, tuple[bytes, int]] = {}
        self.markers: set[str] = set()

    def is_dir(self, full: str) -> bool:
        """Caller holds the lock. A scan of every key: this store is for small tables."""
        if full in self.markers:
            return True
        prefix = full + "/"
        return any(k.startswith(prefix) for k in self.files) or any(m.startswith(prefix) for m in self.markers)


_VOLUME = _Volume()


class _Upload(io.BytesIO):
    """Collects a file's bytes; closing publishes them whole, like the end of an S3 upload."""

    def __init__(self, volume: _Volume, full: str):
        super().__init__()
        self._volume = volume
        self._full = full

    def close(self) -> None:
        if not self.closed:
            data = self.getvalue()
            with self._volume.lock:
                self._volume.files[self._full] = (data, time.time_ns())
        super().close()


class MemoryStorage(Storage):
    """A :class:`Storage` in this process's memory (see the module docstring)."""

    capabilities = Capabilities(real_directories=False, remote=False, atomic_replace=True, hadoop_scheme=None)

    def __init__(self, root: str, volume: _Volume = _VOLUME):
        parts = [p for p in root.split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            raise InvalidInputError(f"memory URI needs a name without '..': memory://{root}")
        root = "/".join(parts)
        super().__init__(root, f"memory://{root}")
        self._v = volume

    # -- reads -------------------------------------------------------------
    def list_infos(self, rel: str = "", recursive: bool = True,
                   mtime_ns: tuple[int, int] | None = None) -> tuple[list[Entry], list[Unlisted]]:
        prefix = (self.abspath(rel) if rel else self.root) + "/"
        n = len(prefix)
        v = self._v
        with v.lock:
            files = [(k, d, m) for k, (d, m) in v.files.items() if k.startswith(prefix)]
            markers = [m for m in v.markers if m.startswith(prefix)]
        out: list[Entry] = []
        dirs: set[str] = set()
        for k, data, m_ns in files:  # the mtime hint is not used: a memory listing is cheap
            tail = k[n:]
            if recursive:
                out.append(pafs.FileInfo(k, _FILE, mtime_ns=m_ns, size=len(data)))
                dirs.update(_parents(prefix, tail))
            elif "/" in tail:
                dirs.add(prefix + tail.split("/", 1)[0])
            else:
                out.append(pafs.FileInfo(k, _FILE, mtime_ns=m_ns, size=len(data)))
        for m in markers:
            tail = m[n:]
            if recursive:
                dirs.update(_parents(prefix, tail))
                dirs.add(m)
            else:
                dirs.add(prefix + tail.split("/", 1)[0])
        out.extend(pafs.FileInfo(d, _DIR) for d in sorted(dirs))
        return out, []

    def info(self, rel: str) -> FileInfo | None:
        rel = safe_relpath(rel)
        full = self.abspath(rel)
        with self._v.lock:
            f = self._v.files.get(full)
            if f is not None:
                return FileInfo(rel, len(f[0]), f[1] // 1_000_000, False)
            return FileInfo(rel, 0, 0, True) if self._v.is_dir(full) else None

    def root_info(self) -> FileInfo | None:
        with self._v.lock:
            return FileInfo("", 0, 0, True) if self._v.is_dir(self.root) else None

    def read(self, rel: str) -> bytes:
        f = self._v.files.get(self.abspath(rel))  # one dict read: atomic under the GIL
        if f is None:
            raise FileNotFoundError(rel)
        return f[0]

    def open_input(self, rel: str):
        try:
            return pa.BufferReader(self.read(rel))
        except FileNotFoundError as e:
            raise self._wrap("cannot open", rel, e) from e

    # -- writes ------------------------------------------------------------
    def makedirs(self, rel: str) -> None:
        full = self.abspath(rel)
        with self._v.lock:
            self._v.markers.add(full)

    def open_output(self, rel: str):
        return pa.PythonFile(_Upload(self._v, self.abspath(rel)), mode="w")

    def replace(self, rel: str, data: bytes) -> None:
        """One write: a file is published whole when its stream closes."""
        self.write(rel, data)

    def delete(self, rel: str) -> None:
        full = self.abspath(rel)
        with self._v.lock:
            if self._v.files.pop(full, None) is None and self._v.is_dir(full):
                raise StorageError(f"cannot delete {self.uri}/{rel}: it is a directory")

    def rename(self, src: str, dst: str) -> None:
        """Move a file (keeping its mtime, as rename(2) does) or a directory with everything under it."""
        a, b = self.abspath(src), self.abspath(dst)
        v = self._v
        with v.lock:
            if v.is_dir(b):
                raise StorageError(f"cannot rename {self.uri}/{src}: {self.uri}/{dst} is a directory")
            f = v.files.pop(a, None)
            if f is not None:
                v.files[b] = f
                return
            if not v.is_dir(a):
                raise StorageError(f"cannot rename {self.uri}/{src}: no such file or directory")
            old = a + "/"
            for k in [k for k in v.files if k.startswith(old)]:
                v.files[b + "/" + k[len(old):]] = v.files.pop(k)
            for m in [m for m in v.markers if m == a or m.startswith(old)]:
                v.markers.discard(m)
                v.markers.add(b + m[len(a):])

    def create_if_absent(self, rel: str, data: bytes) -> bool:
        full = self.abspath(rel)
        with self._v.lock:
            if full in self._v.files or self._v.is_dir(full):
                return False
            self._v.files[full] = (bytes(data), time.time_ns())
            return True

    def remove_empty_dir(self, rel: str) -> bool:
        full = self.abspath(rel)
        with self._v.lock:
            prefix = full + "/"
            if any(k.startswith(prefix) for k in self._v.files) or any(
                    m.startswith(prefix) for m in self._v.markers):
                return False
            self._v.markers.discard(full)
            return True


def _parents(prefix: str, tail: str) -> list[str]:
    """The directories between ``prefix`` and the entry ``prefix + tail``."""
    parts = tail.split("/")[:-1]
    return [prefix + "/".join(parts[: i + 1]) for i in range(len(parts))]


def open_memory(u: ParseResult, options: Mapping[str, str]) -> MemoryStorage:
    """The registry's factory for ``memory://NAME/PATH`` URIs."""
    return MemoryStorage(u.netloc + u.path)
