"""Storage over pyarrow.fs, chosen by URI scheme, rooted at a table directory.

Every path a ``Storage`` takes is relative to its root and is checked with
:func:`safe_relpath`, so a manifest entry can never reach outside the table.
The one operation that is not plain pyarrow is :meth:`Storage.create_if_absent`,
the commit point of the manifest log; each backend implements it with the
strongest primitive its store offers.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from tributary_read.errors import InvalidInputError, StorageError, missing_extra


@dataclass(frozen=True)
class FileInfo:
    """One listed file; ``path`` is relative to the storage root."""

    path: str
    size: int
    mtime_ms: int
    is_dir: bool = False


#: Why a listing leaves an entry out (see :class:`Unlisted`).
LINK_REASON = "symbolic link, not followed: it may lead out of the table"
BAD_NAME_REASON = "name is not valid UTF-8"


@dataclass(frozen=True)
class Unlisted:
    """An entry a listing saw but does not return, and why.

    A symbolic link is never followed: through one, ``clean`` would delete
    another table's (or this table's own) committed files, and a reader would
    return paths outside the table. A name that is not valid UTF-8 cannot be
    a table path. Both are reported instead of dropped or crashed on; ``path``
    shows undecodable bytes as ``\\xNN`` escapes.
    """

    path: str
    reason: str
    is_dir: bool = False

    def to_json(self) -> dict:
        return {"path": self.path, "reason": self.reason, "is_dir": self.is_dir}


def safe_relpath(path: str) -> str:
    """Normalise a root-relative path, refusing anything that escapes the root.

    Manifests come from disk and may have been edited or corrupted, so this is a
    security boundary: absolute paths, ``..`` segments and drive/URI forms are
    rejected rather than normalised away.
    """
    if not isinstance(path, str) or not path:
        raise InvalidInputError(f"empty or non-string path: {path!r}")
    if path.startswith(("/", "\\")) or "://" in path or "\\" in path or "\x00" in path:
        raise InvalidInputError(f"path escapes the table root: {path!r}")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise InvalidInputError(f"path escapes the table root: {path!r}")
    return "/".join(parts)


def _ms(info: pafs.FileInfo) -> int:
    return info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0


def publish_exclusive(
    data: bytes,
    *,
    stage: Callable[[bytes], str],
    publish: Callable[[str], bool],
    read_back: Callable[[], bytes],
    discard: Callable[[str], None],
) -> bool:
    """Write a complete temp copy, publish it without ever replacing, read back on doubt.

    The one create-if-absent routine of the stores that have no conditional
    write (local disk, HDFS). ``publish(tmp)`` answers True (created) or False
    (the name exists), and raises when it cannot tell: an NFS ``link`` whose
    reply was lost, a WebHDFS rename that timed out or answered ``false`` for a
    reason it does not name. The target is then read back: our bytes there mean
    it is ours (commit documents carry a unique ``commit_id``), other bytes mean
    it is someone else's, nothing there re-raises. The temp copy is always
    discarded; it never carries a commit's name, so it can never be mistaken
    for one.
    """
    tmp = stage(data)
    try:
        try:
            return publish(tmp)
        except Exception as e:  # noqa: BLE001 - resolved below by reading the target
            doubt = e
        try:
            there = read_back()
        except FileNotFoundError:
            raise doubt from None
        return there == data
    finally:
        try:
            discard(tmp)
        except Exception:  # noqa: BLE001 - a stray temp file is an orphan for `clean`
            pass


class Storage:
    """A file system rooted at one directory (a table root).

    Args:
        fs: the pyarrow file system.
        root: the root in ``fs``'s own path syntax (no scheme).
        uri: the root as a URI, for messages and for engines that need full paths.
    """

    scheme = "file"

    def __init__(self, fs: pafs.FileSystem, root: str, uri: str):
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        self.uri = uri.rstrip("/")

    # -- paths -------------------------------------------------------------
    def abspath(self, rel: str) -> str:
        return posixpath.join(self.root, safe_relpath(rel)) if rel else self.root

    def uri_for(self, rel: str) -> str:
        """Full URI of a root-relative path, as Spark or Hive want it."""
        return f"{self.uri}/{safe_relpath(rel)}"

    def _rel(self, full: str) -> str:
        return full[len(self.root) :].lstrip("/")

    def _wrap(self, what: str, rel: str, exc: Exception) -> StorageError:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return StorageError(f"{what} {self.uri}/{rel}: {msg}")

    # -- reads -------------------------------------------------------------
    #: True where the store has symbolic links (they must be detected, not followed).
    has_links = False

    def list_infos(self, rel: str = "", recursive: bool = True) -> tuple[list[pafs.FileInfo], list[Unlisted]]:
        """Raw pyarrow entries under ``rel`` plus the entries left out (:class:`Unlisted`).

        The one listing primitive every reader, ``verify`` and ``clean`` go
        through. A linked directory and everything below it is left out;
        linked *files* are not looked for here (that costs a stat per file on
        the hot path of an mtime window): callers ask :meth:`links` about the
        files they are about to return or delete.
        """
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

    def links(self, rels) -> set[str]:
        """The root-relative paths among ``rels`` that are symbolic links (none on object stores)."""
        return set()

    def walk(self, rel: str = "", recursive: bool = True) -> tuple[list[FileInfo], list[Unlisted]]:
        """Files (not directories) under ``rel``, and what was left out and why."""
        infos, unlisted = self.list_infos(rel, recursive)
        files = [FileInfo(self._rel(i.path), i.size or 0, _ms(i), False)
                 for i in infos if i.type == pafs.FileType.File]
        linked = self.links([f.path for f in files]) if self.has_links else set()
        if linked:
            files = [f for f in files if f.path not in linked]
            unlisted = unlisted + [Unlisted(p, LINK_REASON) for p in sorted(linked)]
        return files, unlisted

    def list(self, rel: str = "", recursive: bool = True) -> list[FileInfo]:
        """List files (not directories) under ``rel``; a missing dir is empty."""
        return self.walk(rel, recursive)[0]

    def list_dirs(self, rel: str = "") -> list[FileInfo]:
        """Immediate subdirectories of ``rel``, with their mtimes (never a linked one)."""
        infos, _ = self.list_infos(rel, recursive=False)
        return [
            FileInfo(self._rel(i.path), 0, _ms(i), True)
            for i in infos
            if i.type == pafs.FileType.Directory
        ]

    def info(self, rel: str) -> FileInfo | None:
        try:
            i = self.fs.get_file_info(self.abspath(rel))
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot stat", rel, e) from e
        if i.type == pafs.FileType.NotFound:
            return None
        return FileInfo(safe_relpath(rel), i.size or 0, _ms(i), i.type == pafs.FileType.Directory)

    def stat_many(self, rels: list[str]) -> list[FileInfo | None]:
        """:meth:`info` of many paths in one batched call (None where absent)."""
        if not rels:
            return []
        try:
            infos = self.fs.get_file_info([self.abspath(r) for r in rels])
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot stat", rels[0], e) from e
        return [None if i.type == pafs.FileType.NotFound
                else FileInfo(r, i.size or 0, _ms(i), i.type == pafs.FileType.Directory)
                for r, i in zip(rels, infos)]

    def exists(self, rel: str) -> bool:
        return self.info(rel) is not None

    def read(self, rel: str) -> bytes:
        """Whole-file read; raises FileNotFoundError when absent.

        A directory where a file is expected is no file either: a metadata file
        such as ``_last_checkpoint`` is then treated as missing (as the spec
        says), not as a storage failure.
        """
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
        """A new file stream (overwrites); parents are created as needed."""
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
        with self.open_output(rel) as f:
            f.write(data)

    def sync(self, rel: str) -> None:
        """Make a closed file durable before a commit references it (no-op remotely)."""

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

    def create_if_absent(self, rel: str, data: bytes) -> bool:
        """Atomically create ``rel`` with ``data`` unless it exists.

        Returns True when this call created the file, False when it already
        existed. Readers never see a partial file.
        """
        raise NotImplementedError


class LocalStorage(Storage):
    """Local disk: commits are a fsynced temp file hard-linked into place."""

    scheme = "file"

    def __init__(self, root: str, fsync: bool = True):
        root = os.path.abspath(os.path.expanduser(root))
        super().__init__(pafs.LocalFileSystem(), root, "file://" + root)
        self.fsync = fsync

    has_links = True

    def list_infos(self, rel: str = "", recursive: bool = True) -> tuple[list[pafs.FileInfo], list[Unlisted]]:
        """One directory at a time, never into a link (see :mod:`tributary_read.localwalk`)."""
        from tributary_read.io.localwalk import walk

        return walk(self, self.abspath(rel) if rel else self.root, recursive)

    def links(self, rels) -> set[str]:
        return {r for r in rels if os.path.islink(posixpath.join(self.root, r))}

    def delete(self, rel: str) -> None:
        """Delete ``rel``, refusing when a directory on its way is a symbolic link.

        Deleting ``latest/part-1`` where ``latest`` links to a partition would
        delete the partition's file, which a commit may reference.
        """
        parent = os.path.dirname(self.abspath(rel))
        expected = os.path.join(os.path.realpath(self.root), os.path.dirname(safe_relpath(rel))).rstrip("/")
        if os.path.realpath(parent) != expected:
            raise StorageError(f"refusing to delete {self.uri}/{rel}: a directory on its path is a symbolic link")
        super().delete(rel)

    def sync(self, rel: str) -> None:
        if not self.fsync:
            return
        fd = os.open(self.abspath(rel), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _sync_dir(self, path: str) -> None:
        if self.fsync:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def create_if_absent(self, rel: str, data: bytes) -> bool:
        target = self.abspath(rel)
        parent = os.path.dirname(target)

        def stage(payload: bytes) -> str:
            tmp = os.path.join(parent, f".tmp-{uuid.uuid4().hex}")
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


class S3Storage(Storage):
    """S3 and S3-protocol stores: commits are ``PUT`` with ``If-None-Match: *``."""

    scheme = "s3"

    def __init__(self, bucket: str, key: str, options: Mapping[str, str]):
        self.bucket = bucket
        self.prefix = key.strip("/")
        self.options = dict(options)
        endpoint = self.options.get("endpoint_url")
        kw: dict = {
            "access_key": self.options.get("access_key_id"),
            "secret_key": self.options.get("secret_access_key"),
            "session_token": self.options.get("session_token"),
            "region": self.options.get("region") or "us-east-1",
        }
        if endpoint:
            u = urlparse(endpoint)
            kw["endpoint_override"] = u.netloc or u.path
            kw["scheme"] = u.scheme or "https"
        kw = {k: v for k, v in kw.items() if v is not None}
        fs = pafs.S3FileSystem(**kw)
        root = f"{bucket}/{self.prefix}" if self.prefix else bucket
        super().__init__(fs, root, f"s3://{root}")
        self._client = None

    def client(self):
        if self._client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise missing_extra("boto3", "s3") from None
            self._client = boto3.client(
                "s3",
                endpoint_url=self.options.get("endpoint_url"),
                aws_access_key_id=self.options.get("access_key_id"),
                aws_secret_access_key=self.options.get("secret_access_key"),
                aws_session_token=self.options.get("session_token"),
                region_name=self.options.get("region") or "us-east-1",
                config=Config(retries={"max_attempts": 5, "mode": "standard"}),
            )
        return self._client

    def create_if_absent(self, rel: str, data: bytes) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        key = self.abspath(rel)[len(self.bucket) + 1 :]
        try:
            self.client().put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            # 412: the key exists. 409: a concurrent conditional PUT on the same
            # key is in flight; treat it as lost and let the caller re-read.
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return False
            raise self._wrap("cannot commit", rel, e) from e
        except BotoCoreError as e:
            raise self._wrap("cannot commit", rel, e) from e


def _open_local(u, options) -> Storage:
    fsync = str(options.get("fsync", "true")).lower() not in ("0", "false", "no")
    return LocalStorage(u.path, fsync=fsync)


def _open_s3(u, options) -> Storage:
    if not u.netloc:
        raise InvalidInputError(f"S3 URI needs a bucket: {u.geturl()}")
    return S3Storage(u.netloc, u.path, options)


def _open_hdfs(u, options) -> Storage:
    from tributary_read.io.hdfs import HdfsStorage  # libhdfs and the WebHDFS client only when asked for

    return HdfsStorage(u.hostname or "default", u.port or 0, u.path, options)


#: URI scheme -> backend factory. New stores register here.
BACKENDS: dict[str, Callable[..., Storage]] = {
    "": _open_local,
    "file": _open_local,
    "s3": _open_s3,
    "s3a": _open_s3,
    "hdfs": _open_hdfs,
    "viewfs": _open_hdfs,
}

#: Environment variables that fill storage options not given explicitly.
ENV_OPTIONS = {
    "endpoint_url": ("TRIB_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "kerb_ticket": ("KRB5CCNAME",),
    "kerberos_principal": ("TRIB_HDFS_PRINCIPAL",),
    "user": ("TRIB_HDFS_USER", "HADOOP_USER_NAME"),
    "fsync": ("TRIB_FSYNC",),
    "webhdfs_url": ("TRIB_WEBHDFS_URL",),
}


def resolve_options(options: Mapping[str, str] | None = None) -> dict[str, str]:
    opts = dict(options or {})
    for key, names in ENV_OPTIONS.items():
        if key not in opts:
            for n in names:
                if os.environ.get(n):
                    opts[key] = os.environ[n]
                    break
    return opts


def open_storage(uri: str, options: Mapping[str, str] | None = None) -> Storage:
    """Open the storage rooted at ``uri`` (a path, ``file://``, ``s3://``, ``hdfs://``)."""
    if not uri:
        raise InvalidInputError("empty table root")
    u = urlparse(uri)
    scheme = u.scheme.lower() if len(u.scheme) > 1 else ""  # C:\ is not a scheme
    factory = BACKENDS.get(scheme)
    if factory is None:
        raise InvalidInputError(f"unsupported storage scheme {scheme!r} in {uri!r}")
    if scheme == "":
        u = urlparse("")._replace(path=uri)
    return factory(u, resolve_options(options))
