"""The positions of a spool directory, kept in the commit's transaction with the records they end.

Committed as ``meta["spool"][DIR]``, DIR the directory's source name (docs/manifest.md)::

    {"v": 1,
     "files": [{"head", "hlen", "pos", "tail", "name", "dev", "ino", "size", "owed"}, ...],
     "done":  {"snapshot": path or null, "added": base64, "removed": base64}}

``files`` are the open files: each one's identity (the digest of its first
``hlen`` content bytes), the content position after its last committed record,
and the digest of the bytes before that position. A file read to its end and
inactive longer than ``close_inactive`` is folded into ``done``, 24 bytes per
file (head, tail, size). A done file is forgotten once no file in the directory
has its content any more, so the set holds what the directory holds, not its
history: a year of hourly rotations costs what one day does. A large directory
keeps its done set in a snapshot file under the table's ``_tributary/spool/``,
written before the commit that names it, and only the changes since it inline,
so a commit stays a few KB whatever the directory holds.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from tributary_read.spool.identity import HEAD, Taken, digest

#: Inline changes to the done set past which a commit writes a new snapshot.
DELTA_MAX = 512
_DONE = struct.Struct(">8s8sQ")  # head, tail, size


@dataclass(frozen=True)
class Done:
    """A file read to its end: its head digest (of ``min(HEAD, size)`` bytes), tail digest and size."""

    head: bytes
    tail: bytes
    size: int

    @property
    def hlen(self) -> int:
        return min(HEAD, self.size)

    @property
    def key(self) -> bytes:
        return self.head + self.tail


@dataclass
class OpenFile:
    """A file being read. ``pos``: content bytes up to the end of its last record; ``size``: its content as
    last seen (a lower bound for gzip); ``owed``: its last line had no newline and was taken, so a newline
    arriving there later ends that record instead of adding an empty one."""

    head: bytes
    hlen: int
    pos: int
    tail: bytes
    name: str
    dev: int
    ino: int
    size: int
    owed: bool = False
    #: found by this run and not read from yet: a commit leaves it out (the next run finds it new again,
    #: the same answer), so a backlog of thousands of new files does not ride along in every commit
    fresh: bool = field(default=False, compare=False)

    def to_json(self) -> dict:
        d = {"head": self.head.hex(), "hlen": self.hlen, "pos": self.pos, "tail": self.tail.hex(),
             "name": self.name, "dev": self.dev, "ino": self.ino, "size": self.size}
        return {**d, "owed": True} if self.owed else d

    @classmethod
    def from_json(cls, d: Mapping) -> OpenFile:
        return cls(bytes.fromhex(d["head"]), int(d["hlen"]), int(d["pos"]), bytes.fromhex(d["tail"]),
                   str(d["name"]), int(d["dev"]), int(d["ino"]), int(d["size"]), bool(d.get("owed", False)))

    def done(self) -> Done:
        return Done(self.head, self.tail, self.pos)

    def taken(self) -> Taken:
        """The content read so far, as :mod:`tributary_read.io.taken` checks it before reading on."""
        return Taken(self.pos, self.head, self.hlen, self.tail)


def _pack(items: Iterable[Done]) -> str:
    return base64.b64encode(b"".join(_DONE.pack(d.head, d.tail, d.size) for d in items)).decode()


def _unpack(text: str) -> list[Done]:
    raw = base64.b64decode(text)
    return [Done(h, t, n) for h, t, n in _DONE.iter_unpack(raw)]


class DoneSet:
    """Files read to their end, as ``snapshot`` (a file of the table) plus the changes since it."""

    def __init__(self, base: dict[bytes, Done] | None = None, snapshot: str | None = None):
        self.base = base or {}
        self.snapshot = snapshot
        self.added: dict[bytes, Done] = {}
        self.removed: set[bytes] = set()
        self._by_head: dict[bytes, list[Done]] | None = None

    def __len__(self) -> int:
        return len(self.base) - len(self.removed) + len(self.added)

    def __iter__(self):
        yield from (d for k, d in self.base.items() if k not in self.removed)
        yield from self.added.values()

    def add(self, d: Done) -> None:
        if d.key in self.base:
            self.removed.discard(d.key)
        else:
            self.added[d.key] = d
        self._by_head = None

    def discard(self, d: Done) -> None:
        if self.added.pop(d.key, None) is None and d.key in self.base:
            self.removed.add(d.key)
        self._by_head = None

    def with_head(self, head: bytes) -> list[Done]:
        if self._by_head is None:
            self._by_head = {}
            for d in self:
                self._by_head.setdefault(d.head, []).append(d)
        return self._by_head.get(head, [])

    def short_sizes(self) -> set[int]:
        """The sizes of done files shorter than HEAD: their head digest covers only that many bytes."""
        return {d.size for d in self if d.size < HEAD}

    def needs_snapshot(self) -> bool:
        return len(self.added) + len(self.removed) > DELTA_MAX

    def snapshot_bytes(self) -> bytes:
        return b"".join(_DONE.pack(d.head, d.tail, d.size) for d in sorted(self, key=lambda d: d.key))

    def rebase(self, snapshot: str) -> None:
        """``snapshot`` now holds the whole set (written before the commit that names it)."""
        self.base = {d.key: d for d in self}
        self.added, self.removed, self.snapshot = {}, set(), snapshot

    def to_json(self) -> dict:
        return {"snapshot": self.snapshot, "added": _pack(self.added.values()),
                "removed": base64.b64encode(b"".join(sorted(self.removed))).decode()}

    @classmethod
    def from_json(cls, d: Mapping, read_snapshot) -> DoneSet:
        snap = d.get("snapshot")
        base = {x.key: x for x in _unpack(base64.b64encode(read_snapshot(snap)).decode())} if snap else {}
        out = cls(base, snap)
        out.added = {x.key: x for x in _unpack(d.get("added", ""))}
        raw = base64.b64decode(d.get("removed", ""))
        out.removed = {raw[i:i + 16] for i in range(0, len(raw), 16)}
        return out


@dataclass
class SpoolPositions:
    """Everything a spool directory's next run resumes from: the open files and the done set."""

    files: list[OpenFile]
    done: DoneSet
    records: int = 0  # records committed from the directory, ever (its offset in the transaction is records - 1)
    commits: int = 0

    def to_meta(self) -> dict:
        return {"v": 1, "files": [f.to_json() for f in self.files if f.pos or not f.fresh],
                "done": self.done.to_json()}

    @classmethod
    def from_transaction(cls, offsets: Mapping[str, int], meta: Mapping, name: str, read_snapshot) -> SpoolPositions:
        every = meta.get("spool") if isinstance(meta, Mapping) else None
        m = every.get(name) if isinstance(every, Mapping) else None
        if not isinstance(m, Mapping):
            return cls([], DoneSet())
        return cls([OpenFile.from_json(f) for f in m.get("files", [])],
                   DoneSet.from_json(m.get("done", {}), read_snapshot),
                   offsets.get(name, -1) + 1, offsets.get(commit_key(name), 0))


def commit_key(name: str) -> str:
    """The offsets key counting a directory's commits: every commit's transaction differs, even one that
    only records a file finished or lost, so a commit whose reply was lost is found again in the log."""
    return f"{name}#commit"


def tail_of(data: bytes) -> bytes:
    """The tail digest of content whose last bytes are ``data`` (at least min(HEAD, pos) of them)."""
    return digest(data[-HEAD:])

