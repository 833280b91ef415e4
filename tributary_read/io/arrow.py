"""The pyarrow.fs implementation shared by the local, S3 and HDFS backends.

pyarrow moves the bytes (C++, GIL released, one listing call per directory);
what it cannot promise, the commit point, each backend adds with the strongest
primitive its store offers (:meth:`Storage.create_if_absent`).
"""

from __future__ import annotations

import posixpath

import pyarrow as pa
import pyarrow.fs as pafs

from tributary_read.errors import StorageError
from tributary_read.io.storage import Entry, FileInfo, Storage, Unlisted, entry_ms, safe_relpath


class ArrowStorage(Storage):
    """A :class:`Storage` over one pyarrow file system.

    Args:
        fs: the pyarrow file system.
        root: the root in ``fs``'s own path syntax (no scheme).
        uri: the root as a URI, for messages and for engines that need full paths.
    """

    def __init__(self, fs: pafs.FileSystem, root: str, uri: str):
        super().__init__(root, uri)
        self.fs = fs

    # -- reads -------------------------------------------------------------
    def list_infos(self, rel: str = "", recursive: bool = True,
                   mtime_ns: tuple[int, int] | None = None) -> tuple[list[Entry], list[Unlisted]]:
        base = self.abspath(rel) if rel else self.root
        sel = pafs.FileSelector(base, recursive=recursive, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(sel)
            for i in infos:
                i.path  # noqa: B018 - pyarrow decodes names lazily: fail here, not in a caller
            return infos, []
        except UnicodeDecodeError as e:
            raise self._wrap("cannot list", rel, ValueError(f"a name under it is not valid UTF-8 ({e})")) from e
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot list", rel, e) from e

    def info(self, rel: str) -> FileInfo | None:
        try:
            i = self.fs.get_file_info(self.abspath(rel))
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot stat", rel, e) from e
        if i.type == pafs.FileType.NotFound:
            return None
        return FileInfo(safe_relpath(rel), i.size or 0, entry_ms(i), i.type == pafs.FileType.Directory)

    def root_info(self) -> FileInfo | None:
        try:
            i = self.fs.get_file_info(self.root)
        except (OSError, pa.ArrowException) as e:
            raise StorageError(f"cannot stat {self.uri}: {str(e).splitlines()[0] if str(e) else e!r}") from e
        if i.type == pafs.FileType.NotFound:
            return None
        return FileInfo("", i.size or 0, entry_ms(i), i.type == pafs.FileType.Directory)

    def stat_many(self, rels: list[str]) -> list[FileInfo | None]:
        if not rels:
            return []
        try:
            infos = self.fs.get_file_info([self.abspath(r) for r in rels])
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot stat", rels[0], e) from e
        return [None if i.type == pafs.FileType.NotFound
                else FileInfo(r, i.size or 0, entry_ms(i), i.type == pafs.FileType.Directory)
                for r, i in zip(rels, infos)]

    def read(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_stream(self.abspath(rel), compression=None) as f:
                return f.read()
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as e:
            info = self.info(rel)
            if info is None or info.is_dir:
                raise FileNotFoundError(rel) from e
            raise self._wrap("cannot read", rel, e) from e

    def open_input(self, rel: str):
        try:
            return self.fs.open_input_file(self.abspath(rel))
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot open", rel, e) from e

    # -- writes ------------------------------------------------------------
    def makedirs(self, rel: str) -> None:
        try:
            self.fs.create_dir(self.abspath(rel), recursive=True)
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot create directory", rel, e) from e

    def open_output(self, rel: str):
        # Also when the parent is the root ('' -> root): pyarrow's local open does
        # not create directories, so a top-level file in a new table would fail.
        self.makedirs(posixpath.dirname(safe_relpath(rel)))
        try:
            # compression=None: pyarrow would otherwise gzip a '.gz' name itself;
            # storage moves bytes verbatim and the format layer owns compression.
            return self.fs.open_output_stream(self.abspath(rel), compression=None)
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot write", rel, e) from e

    def write(self, rel: str, data: bytes) -> None:
        """A whole small file; a failed upload is a :class:`StorageError` whether the open, the write or the
        close reports it (S3 delays its open to the close: ``allow_delayed_open``, one PUT a small file)."""
        try:
            with self.open_output(rel) as f:
                f.write(data)
        except StorageError:
            raise
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot write", rel, e) from e

    def delete(self, rel: str) -> None:
        try:
            self.fs.delete_file(self.abspath(rel))
        except FileNotFoundError:
            pass
        except (OSError, pa.ArrowException) as e:
            if self.info(rel) is not None:
                raise self._wrap("cannot delete", rel, e) from e

    def rename(self, src: str, dst: str) -> None:
        try:
            self.fs.move(self.abspath(src), self.abspath(dst))
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot rename", src, e) from e
