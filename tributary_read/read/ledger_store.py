"""A listing consumer's ledger on storage: an index in each state, one immutable segment per partition directory.

Why: with the whole ledger inside every ``state-<n>.json``, each ack rewrote
and each plan re-read all of it, 33 MB at a million files, most of an hourly
run. Now a state holds, per partition directory, only what a plan needs to
skip an unchanged directory (its mtime, when it was listed) and the name of a
segment holding its files' fingerprints. A plan reads the segments of the
directories it compares (those that changed, and those leaving the lookback);
an ack writes segments only for directories whose files changed, then the
small state.

Segments are content-addressed (``ledger/<sha256>.json``, the directory's name
inside) and created with create-if-absent, so a crash between writing them and
the state leaves only unreferenced files; the state is still the commit point.
:func:`LedgerStore.prune` deletes a segment no retained state references once it
is older than :data:`SEGMENT_GRACE_MS`, so a concurrent ack that has written its
segments but not yet its state never loses them.

A state written this way names segments where older trib versions expect
files: those refuse it as corrupt (exit 6) rather than read an empty ledger and
deliver everything again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Iterable, Iterator, Mapping

from tributary_read.errors import ConsumerStateCorruptError
from tributary_read.io.storage import Storage
from tributary_read.read.ledger import check_ledger, present_count

SEGMENTS_DIR = "ledger"
#: An unreferenced segment younger than this may belong to an ack still in flight.
SEGMENT_GRACE_MS = 24 * 3_600_000
#: Segments a ledger keeps read (SegmentedLedger._cache).
SEGMENT_CACHE = 16
#: Seals one ack creates share segments of about this many files (LedgerStore.save_seals).
PACK_FILES = 20_000


class SegmentedLedger(Mapping[str, Mapping]):
    """The ledger as a mapping, each directory's files loaded from its segment on first use.

    ``index`` holds the saved directories' metadata (``mtime_ms``, ``listed_ms``,
    ``seg``, ``n``); ``overlay`` holds whole entries changed since (an acked
    plan's ``put``), saved by :meth:`LedgerStore.save`.
    """

    def __init__(self, index: Mapping[str, Mapping], load: Callable[[str, str], Mapping],
                 overlay: Mapping[str, Mapping] | None = None):
        self.index = dict(index)
        self.overlay = dict(overlay or {})
        self._load = load
        #: The last few segments read: a plan looks at a directory more than once, one directory after
        #: another, so a few suffice, and a full scan of ten million files never holds them all.
        self._cache: dict[str, Mapping] = {}

    def __getitem__(self, d: str) -> Mapping:
        if d in self.overlay:
            return self.overlay[d]
        meta = self.index[d]
        body = self._cache.pop(d, None)
        if body is None:
            body = self._load(d, meta["seg"])
            if len(self._cache) >= SEGMENT_CACHE:
                del self._cache[next(iter(self._cache))]  # the least recently used (dicts keep order)
        self._cache[d] = body
        return {"mtime_ms": meta.get("mtime_ms"), "listed_ms": meta.get("listed_ms"), **body}

    def __iter__(self) -> Iterator[str]:
        yield from self.index
        yield from (d for d in self.overlay if d not in self.index)

    def __len__(self) -> int:
        return len(self.index) + sum(1 for d in self.overlay if d not in self.index)

    def __contains__(self, d: object) -> bool:
        return d in self.overlay or d in self.index

    def segment_name(self, d: str) -> str | None:
        """The saved segment of directory ``d`` (None: changed since, in the overlay)."""
        return None if d in self.overlay or d not in self.index else self.index[d]["seg"]

    def meta(self, d: str) -> Mapping:
        """A directory's skip metadata (``mtime_ms``, ``listed_ms``) without reading its segment."""
        return self.overlay[d] if d in self.overlay else self.index[d]

    def file_count(self) -> int:
        return sum(int(m.get("n", 0)) for d, m in self.index.items() if d not in self.overlay) + sum(
            present_count(e) for e in self.overlay.values())

    def with_delta(self, drop: Iterable[str], put: Mapping[str, Mapping]) -> SegmentedLedger:
        """The ledger after removing ``drop`` and putting ``put``: O(directories), no segment read."""
        gone = set(drop) | set(put)
        index = {d: m for d, m in self.index.items() if d not in gone}
        overlay = {d: e for d, e in self.overlay.items() if d not in gone}
        overlay.update(put)
        out = SegmentedLedger(index, self._load, overlay)
        out._cache = {d: b for d, b in self._cache.items() if d in index}
        return out


class SealedIndex(Mapping[str, Mapping]):
    """A state's seals (small: count, digest, mtimes), each with its partition's files read on demand.

    A seal names the segment of the files its partition had when it left the
    lookback (``seg``), so a plan reads it only when the directory's listing
    no longer matches the seal's digest: then which files are new, removed or
    rewritten is told exactly. A seal an older trib wrote has no segment (None:
    the digest alone decides). One that cannot be read is treated the same: the
    digest still says whether the partition changed, and a change it cannot
    tell apart holds that partition back instead of stopping the consumer.
    """

    def __init__(self, seals: Mapping[str, Mapping], load: Callable[[str, str], Mapping]):
        self.seals = dict(seals)
        self._load = load

    def __getitem__(self, d: str) -> Mapping:
        return self.seals[d]

    def __iter__(self) -> Iterator[str]:
        return iter(self.seals)

    def __len__(self) -> int:
        return len(self.seals)

    def segment(self, d: str) -> Mapping | None:
        s = self.seals.get(d) or {}
        if "files" in s:
            return s
        if not isinstance(s.get("seg"), str):
            return None
        try:
            return self._load(d, s["seg"])
        except ConsumerStateCorruptError:
            return None


class LedgerStore:
    """Segments of one consumer's ledgers, under ``PREFIX/ledger/``."""

    def __init__(self, storage: Storage, prefix: str, corrupt: Callable[[str, Exception], Exception]):
        self.storage = storage
        self.prefix = f"{prefix}/{SEGMENTS_DIR}"
        self._corrupt = corrupt
        self._packs: dict[str, Any] = {}

    def path(self, seg: str) -> str:
        return f"{self.prefix}/{seg}"

    def load(self, index: Mapping[str, Any]) -> SegmentedLedger:
        """The ledger a state's index describes (segments are read lazily)."""
        for d, m in index.items():
            if not (isinstance(m, dict) and isinstance(m.get("seg"), str) and isinstance(m.get("n", 0), int)):
                raise ValueError(f"bad ledger index entry for {d!r}")
        return SegmentedLedger(index, self._segment)

    def seals(self, sealed: Mapping[str, Any]) -> SealedIndex:
        """A state's seals, their segments read on demand (:class:`SealedIndex`)."""
        return SealedIndex(sealed, self._segment)

    def save_seals(self, sealed: Mapping[str, Mapping]) -> dict[str, dict]:
        """Write the files of seals that carry them (new since the state); return what a state stores.

        Partitions sealed by one ack share segments (packs of up to :data:`PACK_FILES` files): a first plan
        over a year of hourly history seals 8,760 partitions, and one file each made its ack four times
        slower. A pack is read only when one of its partitions changed.
        """
        out = {d: dict(s) for d, s in sealed.items()}
        pack: dict[str, Mapping] = {}
        size = 0
        for d in sorted(d for d, s in sealed.items() if "files" in s):
            pack[d] = sealed[d]
            size += len(sealed[d]["files"])
            if size >= PACK_FILES:
                self._pack(pack, out)
                pack, size = {}, 0
        if pack:
            self._pack(pack, out)
        return dict(sorted(out.items()))

    def _pack(self, pack: Mapping[str, Mapping], out: dict[str, dict]) -> None:
        body = {"dirs": {d: {"files": e["files"], **({"ranges": e["ranges"]} if e.get("ranges") else {})}
                         for d, e in pack.items()}}
        raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        seg = f"{hashlib.sha256(raw).hexdigest()[:32]}.json"
        self.storage.create_if_absent(self.path(seg), raw)  # present already: the same bytes
        for d in pack:
            out[d] = {**{k: v for k, v in out[d].items() if k not in ("files", "ranges")}, "seg": seg}

    def _write(self, d: str, e: Mapping) -> str:
        body: dict[str, Any] = {"dir": d, "files": e["files"]}
        if e.get("ranges"):
            body["ranges"] = e["ranges"]
        raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        seg = f"{hashlib.sha256(raw).hexdigest()[:32]}.json"
        self.storage.create_if_absent(self.path(seg), raw)  # present already: the same bytes
        return seg

    def _segment(self, d: str, seg: str) -> Mapping:
        where = self.storage.uri_for(self.path(seg))
        try:
            body = self._packs.get(seg) or json.loads(self.storage.read(self.path(seg)))
            if isinstance(body, dict) and isinstance(body.get("dirs"), dict):  # a pack of seals (save_seals)
                self._packs.pop(seg, None)
                if len(self._packs) >= 4:  # the packs read last: a plan's changed seals often share one
                    del self._packs[next(iter(self._packs))]
                self._packs[seg] = body
                if not isinstance(body["dirs"].get(d), dict):
                    raise ValueError(f"does not hold directory {d!r}")
                body = {"dir": d, **body["dirs"][d]}
            if not isinstance(body, dict) or body.get("dir") != d:
                raise ValueError(f"holds directory {body.get('dir') if isinstance(body, dict) else None!r}, "
                                 f"not {d!r}")
            check_ledger({d: body}, {})
        except FileNotFoundError:
            raise self._corrupt(where, ValueError("the segment is missing")) from None
        except (ValueError, TypeError) as e:
            raise self._corrupt(where, e) from None
        out = {"files": body["files"]}
        if body.get("ranges"):
            out["ranges"] = body["ranges"]
        return out

    def save(self, ledger: Mapping[str, Mapping]) -> dict[str, dict]:
        """Write the segments ``ledger`` lacks (its changed directories); return the index a state stores."""
        if isinstance(ledger, SegmentedLedger):
            index = {d: dict(m) for d, m in ledger.index.items() if d not in ledger.overlay}
            todo: Mapping[str, Mapping] = ledger.overlay
        else:
            index, todo = {}, ledger
        for d, e in todo.items():
            seg = self._write(d, e)
            index[d] = {"mtime_ms": e.get("mtime_ms"), "listed_ms": e.get("listed_ms"), "seg": seg,
                        "n": present_count(e)}
        return dict(sorted(index.items()))

    def prune(self, referenced: set[str], now_ms: int) -> None:
        """Delete segments no retained state names, once past the grace period."""
        try:
            infos = self.storage.list(self.prefix, recursive=False)
        except FileNotFoundError:
            return
        for info in infos:
            name = info.path.rpartition("/")[2]
            if name.endswith(".json") and name not in referenced and now_ms - info.mtime_ms > SEGMENT_GRACE_MS:
                self.storage.delete(f"{self.prefix}/{name}")


def referenced(index: Mapping[str, Any]) -> set[str]:
    """The segment names a state's ledger index uses."""
    return {m["seg"] for m in index.values() if isinstance(m, dict) and isinstance(m.get("seg"), str)}
