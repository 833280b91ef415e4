"""Which file is a source? Its committed offsets, position and fingerprint.

An ingest resumes a source from ``{name: last offset}`` in its app's last
transaction, and seeks to the byte position stored beside it in ``meta``. A
name alone (by default the file's base name) cannot tell ``day2/events.jsonl``
from ``day1/events.jsonl``, nor a log rotated or replaced in place from the one
that merely grew: resumed at a byte position, such a file loses lines silently
and records offsets that describe nothing. So every commit also stores a
fingerprint of the bytes read, and a resume first checks that the file still
holds them. Appending keeps the fingerprint; replacing, truncating or rotating
changes it, and the run stops with one clear error before anything is written.

Transaction meta written here (documented in docs/manifest.md)::

    {"positions":    {name: byte position after the last committed line},
     "fingerprints": {name: {"block": 4096, "head": hex, "tail": hex}}}

``head`` hashes the file's first ``min(block, position)`` bytes and ``tail`` the
``min(block, position)`` bytes just before the position (BLAKE2b, 16 bytes).
Two files that agree on both blocks and on everything up to the position being
present are treated as one file: a change elsewhere in the middle is not seen,
which is the price of not re-reading the whole committed prefix on every run.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import BinaryIO, Mapping

from tributary_read.errors import SourceMismatchError
from tributary_read.table.manifest import EVENT_WATERMARK, Transaction

FINGERPRINT_BLOCK = 4096
#: Meta a commit does not carry forward for the app's other sources: this source's own (rewritten), what
#: one commit records about itself (events), and another writer's event-time watermark (not this one's).
CARRIED_NOT = ("positions", "fingerprints", "spool_events", EVENT_WATERMARK)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def fingerprint(fd: int, pos: int, block: int = FINGERPRINT_BLOCK) -> dict:
    """The fingerprint of the first ``pos`` bytes of the open file ``fd``.

    ``os.pread`` leaves the file position alone, so this can run in the middle
    of a sequential read without disturbing it.
    """
    n = min(block, pos)
    head = os.pread(fd, n, 0)
    tail = head if pos <= block else os.pread(fd, n, pos - n)
    return {"block": block, "head": _digest(head), "tail": _digest(tail)}


def _by_source(meta: Mapping, key: str) -> dict:
    """``meta[key]`` if it is a per-source object; meta is opaque, so anything else counts as absent."""
    v = meta.get(key)
    return v if isinstance(v, dict) else {}


def _count_lines(src: BinaryIO) -> int:
    src.seek(0)
    return sum(chunk.count(b"\n") for chunk in iter(lambda: src.read(1 << 20), b""))


@dataclass(frozen=True)
class SourceOffsets:
    """One source of one app: where its committed records end, and the next transaction.

    Args:
        app_id: the app whose offsets these are.
        name: the source's key in the offsets.
        prior: the app's last committed transaction (None for a new app).
    """

    app_id: str
    name: str
    prior: Transaction | None = None

    @property
    def last_offset(self) -> int:
        return self.prior.offsets.get(self.name, -1) if self.prior else -1

    @property
    def position(self) -> int | None:
        """The byte position after the committed lines: 0 before any, None in a log from before positions."""
        if self.last_offset < 0:
            return 0
        pos = self._meta("positions")
        return pos if isinstance(pos, int) and not isinstance(pos, bool) and pos > 0 else None

    def _meta(self, key: str):
        return _by_source(self.prior.meta, key).get(self.name) if self.prior else None

    def seek(self, src: BinaryIO, path: str, start: int) -> int:
        """Position ``src`` at line ``start``; return that byte position.

        Raises SourceMismatchError when ``src`` cannot be the file the committed
        lines came from; nothing has been written by then.
        """
        if start == 0:
            return 0
        pos, fp = self._meta("positions"), self._meta("fingerprints")
        size = os.fstat(src.fileno()).st_size
        if isinstance(pos, int) and not isinstance(pos, bool) and pos > 0:
            if size < pos:  # a grown file is never shorter than what was read of it
                raise self._mismatch(path, f"it has only {_count_lines(src)} lines ({size} bytes) but "
                                           f"{start} lines ({pos} bytes) were already committed")
            block = fp.get("block") if isinstance(fp, dict) else None
            if isinstance(block, int) and not isinstance(block, bool) and block > 0:
                now = fingerprint(src.fileno(), pos, block)
                n = min(block, pos)
                if now["head"] != fp.get("head"):
                    raise self._mismatch(path, f"its first {n} bytes differ from the committed file's")
                if now["tail"] != fp.get("tail"):
                    raise self._mismatch(path, f"the {n} bytes before the committed position {pos} "
                                               f"differ from the committed file's")
                src.seek(pos)
                return pos
            # A log written before fingerprints: the newline before the position is all there is.
            src.seek(pos - 1)
            if src.read(1) == b"\n":
                return pos
            src.seek(0)
        n = 0
        while n < start:
            if not src.readline():
                raise self._mismatch(path, f"it has only {n} lines but {start} were already committed")
            n += 1
        return src.tell()

    def _mismatch(self, path: str, why: str) -> SourceMismatchError:
        return SourceMismatchError(
            f"source {path} is not the file app {self.app_id!r} committed as {self.name!r}: {why}; "
            f"it was replaced, rotated or truncated, or another file has the same name. "
            f"Ingest it as a new source, with a new source name", source_name="a new source name"
        )

    def transaction(self, src: BinaryIO, last_offset: int, pos: int) -> Transaction:
        """The transaction for a commit that ends at line ``last_offset``, byte ``pos`` of ``src``.

        The app's other sources are carried forward: the log keeps only an app's
        last transaction, so dropping them would restart them at offset 0 (and
        duplicate every record) the next time the app reads them.
        """
        meta = self.prior.meta if self.prior else {}
        offsets = {**(self.prior.offsets if self.prior else {}), self.name: last_offset}
        return Transaction(self.app_id, offsets, {
            **{k: v for k, v in meta.items() if k not in CARRIED_NOT},
            "positions": {**_by_source(meta, "positions"), self.name: pos},
            "fingerprints": {**_by_source(meta, "fingerprints"), self.name: fingerprint(src.fileno(), pos)},
        })
