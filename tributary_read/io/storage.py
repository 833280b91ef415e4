"""The storage seam: an abstract :class:`Storage` rooted at a table directory.

Every path a ``Storage`` takes is relative to its root and is checked with
:func:`safe_relpath`, so a manifest entry can never reach outside the table.
The operation every backend must get right is :meth:`Storage.create_if_absent`,
the commit point of the manifest log; each implements it with the strongest
primitive its store offers.

Callers never test a URI scheme: what differs between stores is stated once,
in :class:`Capabilities`, or hidden behind a method (:meth:`Storage.replace`,
:meth:`Storage.remove_empty_dir`, :meth:`Storage.hadoop_uri`).

Backends live beside this module (``local``, ``s3``, ``hdfs``, ``memory``) and
are found through a scheme registry (:func:`register_storage`) that imports a
backend only when a URI asks for it: opening a local table never imports boto3
or the WebHDFS client.
"""

from __future__ import annotations

import builtins
import importlib
import os
import posixpath
import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, Iterable, Mapping, Protocol, Union
from urllib.parse import ParseResult, urlparse

from tributary_read.errors import InvalidInputError, StorageError


@dataclass(frozen=True)
class Capabilities:
    """What a store can promise; callers branch on these, never on a URI scheme."""

    #: Directories exist and carry an mtime that changes when an entry is added,
    #: removed or renamed (local disk, HDFS). Object stores only imply them from
    #: key prefixes, so a listing cannot skip an unchanged directory there.
    real_directories: bool
    #: Every call is a network round trip: list many directories concurrently.
    remote: bool
    #: :meth:`Storage.replace` swaps a file's content in one step: a reader sees
    #: the old bytes or the new, never neither (HDFS's rename never replaces, so
    #: it leaves a moment without the file).
    atomic_replace: bool
    #: The scheme Spark and Hive reach this store through (``s3`` -> ``s3a``);
    #: None when no engine outside this process can (the memory store).
    hadoop_scheme: str | None
    #: The store has symbolic links, which a listing must detect and never follow.
    symbolic_links: bool = False
    #: :meth:`Storage.exchange_dirs` swaps two directories in one step (Linux ``renameat2``
    #: with ``RENAME_EXCHANGE``): a reader listing either name sees one whole directory or the
    #: other. What a restated partition needs to reach directory readers whole.
    exchange_directories: bool = False
    #: :meth:`Storage.copy` makes a hard link (no bytes copied, one inode under two names); else it
    #: streams the bytes.
    hard_links: bool = False


class Entry(Protocol):
    """One raw listing entry, as :meth:`Storage.list_infos` returns it.

    pyarrow's ``FileInfo`` is one (the pyarrow backends hand theirs over as
    they come); the local walk returns a lighter tuple that reads the same.
    Listings make 10^5 of them and the hot loop reads one attribute each, so
    the seam never converts them. ``path`` is absolute in the store's own
    syntax (``storage.root + "/" + rel``); ``type`` is :data:`ENTRY_FILE`,
    :data:`ENTRY_DIR` or another ``pyarrow.fs.FileType`` value.
    """

    @property
    def path(self) -> str: ...
    @property
    def type(self) -> int: ...
    @property
    def size(self) -> int | None: ...
    @property
    def mtime_ns(self) -> int | None: ...
    @property
    def base_name(self) -> str: ...


#: ``Entry.type`` values: those of ``pyarrow.fs.FileType`` (an IntEnum), so
#: pyarrow's entries and lighter ones compare alike, and this module needs no pyarrow.
ENTRY_FILE, ENTRY_DIR = 2, 3


def entry_ms(entry: Entry) -> int:
    """An entry's mtime in ms (0 when the store reports none, as S3 does for directories)."""
    return entry.mtime_ns // 1_000_000 if entry.mtime_ns is not None else 0


@dataclass(frozen=True)
class FileInfo:
    """One listed file; ``path`` is relative to the storage root."""

    path: str
    size: int
    mtime_ms: int
    is_dir: bool = False


#: Why a listing leaves an entry out (see :class:`Unlisted`).
LINK_REASON = "symbolic link, not followed: it may lead out of the table"
#: In a file's name, the mtime span of the files a compaction merged into it: ``part-…~m<lo>-<hi>.jsonl``
#: (tributary_read/table/names.py makes and reads such names). A store's mtime-window hint keeps
#: these whatever their own mtime, which on S3 is when the compaction ran: the span decides.
COMPACTED_MARK = "~m"
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


#: The staged copy of a create-if-absent (``publish_exclusive``): a process
#: killed between publishing and discarding it leaves one behind, holding the
#: bytes it published (a commit). ``verify`` and ``clean`` recognise it by
#: this name, so it is spelt here only.
STAGED_NAME = re.compile(r"^\.tmp-[0-9a-f]{32}$")


def staged_name() -> str:
    return f".tmp-{uuid.uuid4().hex}"


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


class Storage(ABC):
    """A file system rooted at one directory (a table root).

    Subclasses provide the abstract operations; the rest is written once here
    in their terms. ``root`` is the root in the store's own path syntax (the
    prefix of every :data:`Entry` path), ``uri`` the root as a URI, for
    messages and for engines that need full paths.
    """

    #: What this store can promise (see :class:`Capabilities`).
    capabilities: ClassVar[Capabilities]

    def __init__(self, root: str, uri: str):
        self.root = root.rstrip("/") or "/"
        self.uri = uri.rstrip("/")

    # -- paths -------------------------------------------------------------
    def abspath(self, rel: str) -> str:
        return posixpath.join(self.root, safe_relpath(rel)) if rel else self.root

    def uri_for(self, rel: str) -> str:
        """Full URI of a root-relative path (``s3://``, ``file://``, ``hdfs://``), as trib names it."""
        return f"{self.uri}/{safe_relpath(rel)}"

    def hadoop_uri(self, rel: str = "") -> str:
        """The URI Spark and Hive should use for ``rel`` (the root when empty): ``s3a://`` for S3."""
        scheme = self.capabilities.hadoop_scheme
        if scheme is None:
            raise InvalidInputError(f"{self.uri} lives in this process only: Spark and Hive cannot read it")
        uri = self.uri_for(rel) if rel else self.uri
        return scheme + uri[uri.index("://"):]

    def _rel(self, full: str) -> str:
        return full[len(self.root) :].lstrip("/")

    def _wrap(self, what: str, rel: str, exc: Exception) -> StorageError:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return StorageError(f"{what} {self.uri}/{rel}: {msg}")

    # -- reads -------------------------------------------------------------
    @abstractmethod
    def list_infos(self, rel: str = "", recursive: bool = True,
                   mtime_ns: tuple[int, int] | None = None) -> tuple[list[Entry], list[Unlisted]]:
        """Raw entries (files and directories) under ``rel`` plus the entries left out (:class:`Unlisted`).

        The one listing primitive every reader, ``verify`` and ``clean`` go
        through; a missing directory is empty. A linked directory and
        everything below it is left out; linked *files* are not looked for
        here (that costs a stat per file on the hot path of an mtime window):
        callers ask :meth:`links` about the files they are about to return or
        delete.

        ``mtime_ns=(lo, hi)`` is a hint for an mtime window: a store may leave
        out files whose ``mtime_ns`` lies outside [lo, hi] (directories and
        ``*.valid-length`` sidecars never), so that a listing of 10^5 files for
        a hundred matches does not make 10^5 entries. The list may carry
        ``seen``, the number of entries the store looked at, and ``links``,
        the paths of the linked files it returns (then nobody needs to ask
        :meth:`links` about every file).
        """

    def links(self, rels) -> set[str]:
        """The root-relative paths among ``rels`` that are symbolic links (none without ``symbolic_links``)."""
        return set()

    def walk(self, rel: str = "", recursive: bool = True) -> tuple[list[FileInfo], list[Unlisted]]:
        """Files (not directories) under ``rel``, and what was left out and why."""
        infos, unlisted = self.list_infos(rel, recursive)
        files = [FileInfo(self._rel(i.path), i.size or 0, entry_ms(i), False)
                 for i in infos if i.type == ENTRY_FILE]
        linked = self.links([f.path for f in files]) if self.capabilities.symbolic_links else set()
        if linked:
            files = [f for f in files if f.path not in linked]
            unlisted = unlisted + [Unlisted(p, LINK_REASON) for p in sorted(linked)]
        return files, unlisted

    def list(self, rel: str = "", recursive: bool = True) -> list[FileInfo]:
        """List files (not directories) under ``rel``; a missing dir is empty."""
        return self.walk(rel, recursive)[0]

    def list_dirs(self, rel: str = "") -> builtins.list[FileInfo]:  # builtins: ``list`` above is the method
        """Immediate subdirectories of ``rel``, with their mtimes (never a linked one)."""
        infos, _ = self.list_infos(rel, recursive=False)
        return [FileInfo(self._rel(i.path), 0, entry_ms(i), True) for i in infos if i.type == ENTRY_DIR]

    @abstractmethod
    def info(self, rel: str) -> FileInfo | None:
        """The file or directory at ``rel``, None when absent."""

    @abstractmethod
    def root_info(self) -> FileInfo | None:
        """The root itself (``path`` is ``""``), None when absent."""

    def stat_many(self, rels: builtins.list[str]) -> builtins.list[FileInfo | None]:
        """:meth:`info` of many paths (None where absent); backends batch it into one call."""
        return [self.info(r) for r in rels]

    def exists(self, rel: str) -> bool:
        return self.info(rel) is not None

    def file_exists(self, rel: str) -> bool:
        """Whether a file is at ``rel`` (a directory there is no file). The manifest log probes its
        versions this way; a backend that can answer in fewer requests than :meth:`info` overrides it."""
        info = self.info(rel)
        return info is not None and not info.is_dir

    @abstractmethod
    def read(self, rel: str) -> bytes:
        """Whole-file read; raises FileNotFoundError when absent.

        A directory where a file is expected is no file either: a metadata file
        such as ``_last_checkpoint`` is then treated as missing (as the spec
        says), not as a storage failure.
        """

    @abstractmethod
    def open_input(self, rel: str):
        """A random-access pyarrow file (``size``, ``seek``, ``read``), as Parquet readers want."""

    # -- writes ------------------------------------------------------------
    @abstractmethod
    def makedirs(self, rel: str) -> None:
        """Create directory ``rel`` and its parents (a no-op where it exists)."""

    @abstractmethod
    def open_output(self, rel: str):
        """A new file stream (overwrites); parents are created as needed."""

    def write(self, rel: str, data: bytes) -> None:
        with self.open_output(rel) as f:
            f.write(data)

    def sync(self, rel: str) -> None:
        """Make a closed file durable before a commit references it (:meth:`sync_many` of one file)."""
        self.sync_many([rel])

    def sync_many(self, rels: Iterable[str]) -> None:
        """Make closed files, and the directories that name them, durable before a commit references them.

        The one place trib makes data durable: the writer (ingest, Kafka, the spool, the Spark
        writer's tasks) hands every file of a commit here in one call, compaction its output. A
        no-op where a completed write is durable (object stores, HDFS's close).
        """

    @abstractmethod
    def delete(self, rel: str) -> None:
        """Delete file ``rel``; deleting what is not there is a no-op (recovery re-runs deletes)."""

    def set_mtime(self, rel: str, mtime_ms: int) -> bool:
        """Set a file's mtime where the store allows it; False where it cannot (S3: an object's time is
        when it was written). Used only where nothing depends on it (a compacted file's name holds the truth)."""
        return False

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``; a missing ``src`` is a StorageError."""

    def copy(self, src: str, dst: str) -> None:
        """Give ``dst`` the bytes of file ``src`` (replacing a ``dst`` there): a hard link where
        :attr:`Capabilities.hard_links` says so, else a streamed copy. For another tool's small files
        (markers, sidecars) a restate carries into the partition it replaces."""
        with self.open_input(src) as f, self.open_output(dst) as out:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)

    def exchange_dirs(self, a: str, b: str, unless: str | None = None) -> bool:
        """Swap directories ``a`` and ``b`` in one step (``b`` absent: rename ``a`` to ``b``); True if it did.

        ``unless``: a path whose presence means the swap was made already; it is looked at and
        the swap made under one lock, so two processes finishing the same swap never swap it
        back. Only where :attr:`Capabilities.exchange_directories` says so; elsewhere a
        StorageError (object stores have no directories to swap, and a copy is no single step).
        """
        raise StorageError(f"{self.uri} cannot swap two directories in one step")

    @abstractmethod
    def create_if_absent(self, rel: str, data: bytes) -> bool:
        """Atomically create ``rel`` with ``data`` unless it exists.

        Returns True when this call created the file, False when it already
        existed. Readers never see a partial file.
        """

    def replace(self, rel: str, data: bytes) -> None:
        """Replace ``rel`` whole (or create it): readers see the old bytes or the new, never a torn file.

        A durable temp file renamed over the target: ``rename(2)`` replaces
        atomically on local disk. Where a rename never replaces
        (``atomic_replace`` is False: HDFS), the target is deleted first,
        leaving a moment without it, when readers fail and retry.
        """
        d, _, name = safe_relpath(rel).rpartition("/")
        tmp = f"{d}/.{name}.{uuid.uuid4().hex}.tmp" if d else f".{name}.{uuid.uuid4().hex}.tmp"
        self.write(tmp, data)
        try:
            self.sync(tmp)
            try:
                self.rename(tmp, rel)
            except StorageError:
                if self.capabilities.atomic_replace:
                    raise
                self.delete(rel)
                self.rename(tmp, rel)
        except BaseException:
            try:
                self.delete(tmp)
            except Exception:  # noqa: BLE001 - a stray temp file is an orphan for `clean`
                pass
            raise

    def remove_empty_dir(self, rel: str) -> bool:
        """Remove directory ``rel`` if nothing is under it; True when it is gone. Never recursive.

        Stores whose directories are implied by their entries have nothing to
        remove: the directory is gone with its last file.
        """
        return not self.capabilities.real_directories and not self.list_infos(rel, recursive=False)[0]


#: A backend factory: ``factory(parsed_uri, options) -> Storage``, or its
#: ``"module:name"``, imported on first use.
StorageFactory = Callable[[ParseResult, Mapping[str, str]], Storage]

#: URI scheme -> backend factory ("" is a plain path). New stores register with
#: :func:`register_storage`; by name, so the registry imports no backend itself.
BACKENDS: dict[str, Union[StorageFactory, str]] = {
    "": "tributary_read.io.local:open_local",
    "file": "tributary_read.io.local:open_local",
    "s3": "tributary_read.io.s3:open_s3",
    "s3a": "tributary_read.io.s3:open_s3",
    "hdfs": "tributary_read.io.hdfs:open_hdfs",  # libhdfs and the WebHDFS client only when asked for
    "viewfs": "tributary_read.io.hdfs:open_hdfs",
    "memory": "tributary_read.io.memory:open_memory",
}


def register_storage(scheme: str, factory: Union[StorageFactory, str]) -> None:
    """Open URIs with ``scheme`` through ``factory`` (a callable or ``"module:name"``)."""
    if not scheme or scheme != scheme.lower() or "://" in scheme:
        raise InvalidInputError(f"a storage scheme is a lower-case name like 's3', not {scheme!r}")
    BACKENDS[scheme] = factory


def _factory(scheme: str) -> StorageFactory | None:
    factory = BACKENDS.get(scheme)
    if isinstance(factory, str):
        module, _, name = factory.partition(":")
        factory = BACKENDS[scheme] = getattr(importlib.import_module(module), name)
    return factory


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
    """Open the storage rooted at ``uri`` (a path, ``file://``, ``s3://``, ``hdfs://``, ``memory://``)."""
    if not uri:
        raise InvalidInputError("empty table root")
    u = urlparse(uri)
    scheme = u.scheme.lower() if len(u.scheme) > 1 else ""  # C:\ is not a scheme
    factory = _factory(scheme)
    if factory is None:
        raise InvalidInputError(f"unsupported storage scheme {scheme!r} in {uri!r}")
    if scheme == "":
        u = urlparse("")._replace(path=uri)
    return factory(u, resolve_options(options))
