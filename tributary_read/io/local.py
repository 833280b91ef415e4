"""Local disk through ``os``: commits are a fsynced temp file hard-linked into place.

Plain system calls rather than pyarrow's ``LocalFileSystem``: a small read or
a stat costs the same, the listing (:mod:`tributary_read.io.localwalk`) is
faster, and a process that only lists and reads metadata (``trib files``, a
consumer's plan and ack) never pays pyarrow's import (~70-130 ms). pyarrow is
imported for the streams a data file is written or read through, whose
callers use pyarrow anyway.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import shutil
import stat
import sys
from typing import Iterable, Mapping
from urllib.parse import ParseResult

from tributary_read.errors import StorageError
from tributary_read.io.storage import Capabilities, Entry, FileInfo, Storage, Unlisted, publish_exclusive, staged_name, safe_relpath


# -- renameat2(2): Linux 3.15+, glibc 2.28+ (os has no wrapper) ------------------------------------------
_AT_FDCWD = -100
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def _libc_renameat2():
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2: list = []  # the libc function once looked up (ctypes is imported at the first swap, not at start-up)
#: Linux has had renameat2 since 3.15 and glibc since 2.28; a system without it fails the swap with ENOSYS.
_HAS_EXCHANGE = sys.platform.startswith("linux")


def _renameat2(src: str, dst: str, flags: int, check: bool = False) -> bool:
    """One renameat2 call; False when ``RENAME_NOREPLACE`` found ``dst`` there (EEXIST) and ``check`` is off."""
    import ctypes

    if not _RENAMEAT2:
        _RENAMEAT2.append(_libc_renameat2())
    fn = _RENAMEAT2[0]
    if fn is None:
        raise OSError(38, "renameat2 is not available on this system")  # ENOSYS
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err == 17 and flags == _RENAME_NOREPLACE and not check:  # EEXIST
        return False
    raise OSError(err, os.strerror(err), src)


class LocalStorage(Storage):
    """Local disk: commits are a fsynced temp file hard-linked into place."""

    capabilities = Capabilities(real_directories=True, remote=False, atomic_replace=True,
                                hadoop_scheme="file", symbolic_links=True, exchange_directories=_HAS_EXCHANGE,
                                hard_links=True)

    def __init__(self, root: str, fsync: bool = True):
        root = os.path.abspath(os.path.expanduser(root))
        super().__init__(root, "file://" + root)
        self.fsync = fsync

    def hadoop_uri(self, rel: str = "") -> str:
        """``file:/abs/path``: the spelling Hadoop's ``Path`` and the Hive metastore use."""
        return "file:" + self.abspath(rel)

    def list_infos(self, rel: str = "", recursive: bool = True,
                   mtime_ns: tuple[int, int] | None = None) -> tuple[list[Entry], list[Unlisted]]:
        """One directory at a time, never into a link (see :mod:`tributary_read.io.localwalk`)."""
        from tributary_read.io.localwalk import walk

        return walk(self, self.abspath(rel) if rel else self.root, recursive, mtime_ns)

    def links(self, rels) -> set[str]:
        return {r for r in rels if os.path.islink(posixpath.join(self.root, r))}

    def _stat(self, full: str, rel: str) -> os.stat_result | None:
        try:
            return os.stat(full)  # through a link, as a reader opening the path would
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as e:
            raise self._wrap("cannot stat", rel, e) from e

    @staticmethod
    def _info(rel: str, st: os.stat_result) -> FileInfo:
        is_dir = stat.S_ISDIR(st.st_mode)
        return FileInfo(rel, 0 if is_dir else st.st_size, st.st_mtime_ns // 1_000_000, is_dir)

    def info(self, rel: str) -> FileInfo | None:
        rel = safe_relpath(rel)
        st = self._stat(self.abspath(rel), rel)
        return None if st is None else self._info(rel, st)

    def root_info(self) -> FileInfo | None:
        try:
            st = os.stat(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise StorageError(f"cannot stat {self.uri}: {e.strerror or e}") from e
        return self._info("", st)

    def read(self, rel: str) -> bytes:
        full = self.abspath(rel)
        try:
            with open(full, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise FileNotFoundError(rel) from None
        except OSError as e:
            info = self.info(rel)
            if info is None or info.is_dir:
                raise FileNotFoundError(rel) from e
            raise self._wrap("cannot read", rel, e) from e

    def open_input(self, rel: str):
        import pyarrow as pa

        try:
            return pa.OSFile(self.abspath(rel), mode="r")
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot open", rel, e) from e

    # -- writes ------------------------------------------------------------
    def makedirs(self, rel: str) -> None:
        try:
            os.makedirs(self.abspath(rel), exist_ok=True)
        except OSError as e:
            raise self._wrap("cannot create directory", rel, e) from e

    def open_output(self, rel: str):
        import pyarrow as pa

        # Also when the parent is the root: a top-level file in a new table.
        self.makedirs(posixpath.dirname(safe_relpath(rel)))
        try:
            return pa.OSFile(self.abspath(rel), mode="w")  # unbuffered: the sinks buffer themselves
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot write", rel, e) from e

    def write(self, rel: str, data: bytes) -> None:
        self.makedirs(posixpath.dirname(safe_relpath(rel)))
        try:
            with open(self.abspath(rel), "wb") as f:
                f.write(data)
        except OSError as e:
            raise self._wrap("cannot write", rel, e) from e

    def delete(self, rel: str) -> None:
        """Delete ``rel``, refusing when a directory on its way is a symbolic link.

        Deleting ``latest/part-1`` where ``latest`` links to a partition would
        delete the partition's file, which a commit may reference.
        """
        parent = os.path.dirname(self.abspath(rel))
        expected = os.path.join(os.path.realpath(self.root), os.path.dirname(safe_relpath(rel))).rstrip("/")
        if os.path.realpath(parent) != expected:
            raise StorageError(f"refusing to delete {self.uri}/{rel}: a directory on its path is a symbolic link")
        try:
            os.unlink(self.abspath(rel))
        except FileNotFoundError:
            pass
        except OSError as e:
            if self.info(rel) is not None:
                raise self._wrap("cannot delete", rel, e) from e

    def set_mtime(self, rel: str, mtime_ms: int) -> bool:
        try:
            os.utime(self.abspath(rel), ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        except OSError:
            return False
        return True

    def rename(self, src: str, dst: str) -> None:
        try:
            os.rename(self.abspath(src), self.abspath(dst))  # rename(2) replaces a file atomically
        except OSError as e:
            raise self._wrap("cannot rename", src, e) from e

    def copy(self, src: str, dst: str) -> None:
        """A hard link (a file system that refuses one, or ``src`` on another device: a copy), made under a
        temporary name and renamed over ``dst``, so ``dst`` is never missing and never half written."""
        a, b = self.abspath(src), self.abspath(dst)
        self.makedirs(posixpath.dirname(safe_relpath(dst)))
        tmp = posixpath.join(posixpath.dirname(b), staged_name())
        try:
            try:
                os.link(a, tmp, follow_symlinks=False)
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
                shutil.copyfile(a, tmp, follow_symlinks=False)
            os.rename(tmp, b)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise self._wrap("cannot copy", src, e) from e

    def exchange_dirs(self, a: str, b: str, unless: str | None = None) -> bool:
        """``renameat2(RENAME_EXCHANGE)``, or ``RENAME_NOREPLACE`` when ``b`` does not exist (a ``b`` made
        meanwhile is then swapped, never replaced), under ``flock`` on ``b``'s parent directory (which
        no swap moves), then the parent is fsynced."""
        import fcntl

        src, dst = self.abspath(a), self.abspath(b)
        parent = os.path.dirname(dst)
        try:
            fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise self._wrap("cannot swap directories", b, e) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if unless is not None and os.path.lexists(self.abspath(unless)):
                return False
            if not _renameat2(src, dst, _RENAME_NOREPLACE if not os.path.lexists(dst) else _RENAME_EXCHANGE):
                _renameat2(src, dst, _RENAME_EXCHANGE, check=True)  # b appeared between the look and the rename
            self._sync_dir(parent)
            if os.path.dirname(src) != parent:
                self._sync_dir(os.path.dirname(src))
            return True
        except OSError as e:
            raise self._wrap("cannot swap directories", a, e) from e
        finally:
            os.close(fd)  # releases the lock

    def remove_empty_dir(self, rel: str) -> bool:
        try:
            os.rmdir(self.abspath(rel))  # rmdir(2) refuses a directory that is not empty
        except OSError:
            return False
        return True

    def sync_many(self, rels: Iterable[str]) -> None:
        """fsync(2) each file and each directory on the way from the table's root to it, concurrently.

        A new file's name is durable once its directory is fsynced, and a new directory's once
        its parent is; the directories of a batch are few (an hourly table: a day's and its
        hours'). The calls run at once on a few threads (fsync releases the GIL): the kernel
        writes every file's pages back in parallel and one journal commit serves fsyncs that
        wait together, so a commit of 24 files costs about one fsync's wait, not 24. Not
        syncfs(2): it would also wait for every other writer's dirty pages on the file system,
        and before Linux 5.8 it did not report a failed write-back. Any failure raises: the
        caller must not commit.
        """
        if not self.fsync:
            return
        files = list(dict.fromkeys(self.abspath(safe_relpath(r)) for r in rels))
        if not files:
            return
        root = self.root.rstrip("/") or "/"
        dirs: dict[str, None] = {}
        for f in files:
            d = os.path.dirname(f)
            while d not in dirs:
                dirs[d] = None
                if d == root or not d.startswith(root + "/") or d == os.path.dirname(d):
                    break
                d = os.path.dirname(d)
        paths = files + list(dirs)
        if len(paths) == 1:
            _fsync_path(paths[0])
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(paths), SYNC_THREADS), "trib-fsync") as pool:
            for _ in pool.map(_fsync_path, paths):  # re-raises the first failure
                pass

    def _sync_dir(self, path: str) -> None:
        if self.fsync:
            _fsync_path(path)

    def create_if_absent(self, rel: str, data: bytes) -> bool:
        target = self.abspath(rel)
        parent = os.path.dirname(target)

        def stage(payload: bytes) -> str:
            tmp = os.path.join(parent, staged_name())
            os.makedirs(parent, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(payload)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            return tmp

        def discard(tmp: str) -> None:
            os.unlink(tmp)

        try:
            return publish_exclusive(data, stage=stage, publish=lambda tmp: self._publish(tmp, target, data),
                                     read_back=lambda: self.read(rel), discard=discard)
        except OSError as e:
            raise self._wrap("cannot commit", rel, e) from e

    def _publish(self, tmp: str, target: str, data: bytes) -> bool:
        try:
            # link(2) fails with EEXIST instead of replacing: the file appears
            # complete or not at all, which O_EXCL + write cannot promise.
            os.link(tmp, target)
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno not in (1, 18, 38, 95):  # EPERM/EXDEV/ENOSYS/EOPNOTSUPP
                raise
            return self._create_excl(target, data)
        self._sync_dir(os.path.dirname(target))
        return True

    def _create_excl(self, target: str, data: bytes) -> bool:
        # Fallback for file systems without hard links; a crash mid-write can
        # leave a short file, which readers report as ManifestCorruptError.
        try:
            fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return True


#: Concurrent fsync(2) calls of one :meth:`LocalStorage.sync_many` (they wait on the disk, not the CPU).
SYNC_THREADS = 16


def _fsync_path(path: str) -> None:
    """fsync(2) a file or a directory by its path (a directory opens read-only, as fsync allows)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_local(u: ParseResult, options: Mapping[str, str]) -> LocalStorage:
    """The registry's factory for plain paths and ``file://`` URIs."""
    fsync = str(options.get("fsync", "true")).lower() not in ("0", "false", "no")
    return LocalStorage(u.path, fsync=fsync)

