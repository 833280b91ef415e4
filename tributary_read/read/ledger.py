"""The listing consumer's ledger: what was delivered, per partition directory.

A ledger entry maps a directory to its delivered files' fingerprints
``(size, mtime_ms, valid_length)`` while the partition is inside the lookback
horizon. Once it falls out, the entry is replaced by a constant-size *seal*
(count, order-free digest, max mtime, and the segment of its files), so what a
plan reads stays bounded by the horizon: a sealed partition's files are read
only when its listing no longer matches the digest. Then it is compared as
inside the horizon: a new file is delivered whatever its mtime, and a delivered
file removed or rewritten holds that partition back (``held``: the rest of the
plan goes on) unless acknowledged. A seal an older trib wrote has the digest
only: what it can tell is delivered, the rest held back (``exact`` False) or,
acknowledged, reported in ``beyond_horizon``. A file that grew after delivery keeps, under the entry's
``ranges``, its delivered end and a CRC of the block before it, so its new
bytes are delivered as a range (tributary_read.read.growth) and any other
change is told apart. See docs/reading.md for the format.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from tributary_read.table.layout import Layout, PartitionDir
from tributary_read.read.listing import ListedFile, Progress, Skipped, scan
from tributary_read.read.fileset import Conflict, Fingerprint, HeldPartition, LateFile, ResolvedFile
from tributary_read.read.backlog import ListingCap
from tributary_read.read.growth import Growth, can_grow, delivered, growth, readable
from tributary_read.io.storage import Storage
from tributary_read.read.tracking import foreign, refuse_unmatched

#: A directory's mtime is trusted to skip it only if it was this much older
#: than the listing: an entry added later in the same timestamp tick (1-2 s on
#: some file systems) would otherwise leave the mtime unchanged.
QUIESCENT_MS = 2000
#: Why a sealed partition's files are in ``beyond_horizon``: what the seal cannot tell apart.
CHANGED_BEYOND = "partition changed after it left the lookback horizon"
#: A plan gives at most this many files of partitions sealed by an older trib (a digest, no file list)
#: their file list, when it lists them unchanged: the migration costs no extra listing, and a plan's
#: file stays bounded (docs/reading.md).
UPGRADE_FILES = 100_000
#: A directory holding a file modified this close to the listing is listed again next run, whatever
#: its mtime: an append to a file leaves its directory's mtime alone (growing files, docs/reading.md).
GROWING_MS = 3600_000
_MASK = (1 << 64) - 1
#: A fingerprint as the ledger holds it, (size, mtime_ms, valid_length): a plain
#: tuple, cheaper than a Fingerprint when a scan makes one per file (a Fingerprint is one too).
_Fp = tuple[int, int, int | None]


# -- encoding ------------------------------------------------------------------
def _enc(fp: _Fp, present: bool = True) -> list:
    """``[size, mtime]``, ``[size, mtime, valid_length]``, or with a trailing 0 once gone."""
    size, mtime, vl = fp
    if present:
        return [size, mtime] if vl is None else [size, mtime, vl]
    return [size, mtime, vl, 0]


def _dec(v: list) -> tuple[_Fp, bool]:
    return (v[0], v[1], v[2] if len(v) > 2 else None), len(v) < 4 or v[3] != 0


def _hash(name: str, fp: _Fp) -> int:
    size, mtime, vl = fp
    key = f"{name}\0{size}\0{mtime}\0{'' if vl is None else vl}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def _digest(items: Iterable[tuple[str, _Fp]]) -> tuple[int, str, int]:
    """(count, order-free 64-bit sum of per-file hashes, max mtime) of a directory."""
    total = n = mx = 0
    for name, fp in items:
        total = (total + _hash(name, fp)) & _MASK
        n += 1
        mx = max(mx, fp[1])
    return n, f"{total:016x}", mx


def added_by_digest(fps: Mapping[str, _Fp], count: int, digest: str) -> list[str] | None:
    """The names whose removal from ``fps`` gives a seal's (count, digest), when one or two files were added
    and exactly one such choice exists; else None.

    For seals written before a sealed partition kept its file list: the digest
    is a sum of per-file hashes, so the added files are those whose hashes make
    up the difference. As exact as the seal itself (a 64-bit digest).
    """
    k = len(fps) - count
    if k not in (1, 2):
        return None
    hashes = {name: _hash(name, fp) for name, fp in fps.items()}
    need = (sum(hashes.values()) - int(digest, 16)) & _MASK
    by_hash: dict[int, list[str]] = {}
    for name, h in hashes.items():
        by_hash.setdefault(h, []).append(name)
    if k == 1:
        found = by_hash.get(need, [])
        return list(found) if len(found) == 1 else None
    pairs = {frozenset((a, b)) for a, h in hashes.items() for b in by_hash.get((need - h) & _MASK, ()) if b != a}
    return sorted(next(iter(pairs))) if len(pairs) == 1 else None


def _seal(items: Iterable[tuple[str, _Fp]], mtime: int | None, listed: int | None) -> dict:
    n, h, mx = _digest(items)
    return {"count": n, "digest": h, "max_mtime_ms": mx, "mtime_ms": mtime,
            "listed_ms": listed if mtime is not None else None}


def present_files(entry: Mapping) -> Iterable[tuple[str, _Fp]]:
    """An entry's files that are present (not marked gone), each with its fingerprint."""
    for name, v in entry["files"].items():
        fp, present = _dec(v)
        if present:
            yield name, fp


def present_count(entry: Mapping) -> int:
    """How many of an entry's files are present (not marked gone)."""
    return sum(1 for v in entry["files"].values() if len(v) < 4 or v[3] != 0)


def files_of(ledger: Mapping, d: str, entry: Mapping) -> dict:
    """What a seal keeps of a ledger entry's files: its segment's name where the ledger is segmented
    and saved, else the files themselves (saved as a segment with the state, tributary_read.read.ledger_store)."""
    name = getattr(ledger, "segment_name", None)
    seg = name(d) if name is not None else None
    if seg is not None:
        return {"seg": seg}
    return {"files": dict(entry["files"]), **({"ranges": dict(entry["ranges"])} if entry.get("ranges") else {})}


def meta_of(ledger: Mapping, d: str) -> Mapping:
    """A directory's skip metadata, without reading its files where the ledger is segmented (ledger_store)."""
    meta = getattr(ledger, "meta", None)
    return meta(d) if meta is not None else ledger[d]


def file_count(ledger: Mapping) -> int:
    count = getattr(ledger, "file_count", None)
    return count() if count is not None else sum(len(e["files"]) for e in ledger.values())


def _skippable(e: Mapping) -> bool:
    m, listed = e.get("mtime_ms"), e.get("listed_ms")
    return m is not None and listed is not None and listed - m >= QUIESCENT_MS


def _meta_differs(e: Mapping | None, mtime: int | None, listed: int) -> bool:
    """Whether a listed directory's skip metadata must be rewritten."""
    if e is None:
        return True
    if mtime is None:
        return e.get("mtime_ms") is not None
    return e.get("mtime_ms") != mtime or not _skippable(e)


def check_ledger(ledger, sealed) -> None:
    for d, e in ledger.items():
        if not isinstance(e, dict) or not isinstance(e.get("files"), dict):
            raise ValueError(f"bad ledger entry for {d!r}")
        for name, v in e["files"].items():
            if (not isinstance(v, list) or not 2 <= len(v) <= 4
                    or not all(isinstance(x, int) or x is None for x in v)):
                raise ValueError(f"bad ledger file {d}/{name}")
        for name, v in (e.get("ranges") or {}).items():  # [delivered end, crc(, hlen, head, tail)] (growth.py)
            if (not isinstance(v, list) or len(v) not in (2, 5) or not all(isinstance(x, int) for x in v[:3])
                    or not all(isinstance(x, str) for x in v[3:])):
                raise ValueError(f"bad ledger range {d}/{name}")
    for d, s in sealed.items():
        if not isinstance(s, dict) or not isinstance(s.get("count"), int) or not isinstance(s.get("digest"), str):
            raise ValueError(f"bad seal for {d!r}")
        if not isinstance(s.get("seg", ""), str):
            raise ValueError(f"bad seal segment for {d!r}")
        if "files" in s:  # a seal not saved yet carries its files (saved as a segment with the state)
            check_ledger({d: s}, {})


@dataclass(frozen=True)
class LedgerDiff:
    """What one listing adds to a ledger: the files to deliver and the ledger delta."""

    files: tuple[ResolvedFile, ...]
    conflicts: tuple[Conflict, ...]
    beyond_horizon: tuple[LateFile, ...]
    skipped: tuple[Skipped, ...]
    deferred: int
    baseline: Mapping | None
    stats: Mapping = field(hash=False)
    delta: Mapping = field(hash=False)
    held: tuple[HeldPartition, ...] = ()


def apply_delta(ledger: Mapping, sealed: Mapping, delta: Mapping) -> tuple[dict, dict]:
    """The ledger and seals after an acked plan's delta (a segmented ledger stays lazy: O(directories))."""
    with_delta = getattr(ledger, "with_delta", None)
    if with_delta is not None:
        sealed = dict(sealed)
        gone = [*delta.get("drop", ()), *delta.get("seal", {})]
        for k in delta.get("drop", ()):
            sealed.pop(k, None)
        for k in delta.get("put", {}):
            sealed.pop(k, None)
        sealed.update(delta.get("seal", {}))
        seal = delta.get("seal", {})
        return with_delta(gone, {k: e for k, e in delta.get("put", {}).items() if k not in seal}), sealed
    ledger, sealed = dict(ledger), dict(sealed)
    for k in delta.get("drop", ()):
        ledger.pop(k, None)
        sealed.pop(k, None)
    for k, e in delta.get("put", {}).items():
        ledger[k] = e
        sealed.pop(k, None)
    for k, s in delta.get("seal", {}).items():
        sealed[k] = s
        ledger.pop(k, None)
    return ledger, sealed


@dataclass
class _Dir:
    """One partition directory's part of a plan, kept apart until the cap takes or leaves it whole."""

    files: list[ResolvedFile] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    beyond: list[LateFile] = field(default_factory=list)
    put: dict | None = None
    seal: dict | None = None
    #: Grown files whose last line (gzip member) is not complete yet, and their bytes: they wait for the next run.
    held: list[int] = field(default_factory=lambda: [0, 0])
    #: The partition is held back: a file delivered there was removed or rewritten (nothing else is taken).
    hold: HeldPartition | None = None
    #: Delivered files no longer listed (:meth:`LedgerPlanner._settle` holds the partition back for them).
    removed: list[str] = field(default_factory=list)


class LedgerPlanner:
    """Compares a listing with the ledger, partition by partition, as the listing streams in.

    The scan hands over one directory at a time (tributary_read.read.listing.scan's
    ``sink``); each is compared, then taken whole or left whole by the cap
    (tributary_read.read.backlog.ListingCap), so a plan holds at most the cap's
    files however large the table: a first plan over ten million files of
    history stays within one listing chunk plus the cap.
    """

    def __init__(self, storage: Storage, ledger: Mapping, sealed: Mapping, layout: Layout,
                 lookback_ms: int, min_age_ms: int, now_ms: int, foreign_only: bool = False,
                 takes: Callable[[int], bool] | None = None, line_based: bool | None = None, max_files: int = 0,
                 allow_changed: bool = False, allow_beyond: bool = False):
        self.storage = storage
        #: Acknowledge a sealed partition's removed or rewritten files (reported in conflicts) instead of
        #: holding the partition back; ``allow_beyond``: the same for a partition sealed into a digest
        #: only (its files reported in ``beyond_horizon``).
        self.allow_changed = allow_changed
        self.allow_beyond = allow_beyond
        #: A seal's files, read from its segment (None: an older seal, a digest only); see ledger_store.
        self.seal_files: Callable[[str], Mapping | None] = getattr(sealed, "segment", None) or (
            lambda d: sealed[d] if "files" in sealed[d] else None)
        self.upgrade_left = UPGRADE_FILES
        self.holds: list[HeldPartition] = []
        self.emptied: list[str] = []
        #: At most this many files (0: no cap), whole partitions, oldest first.
        self.cap = ListingCap(max_files)
        #: A consumer's first plan only: whether a partition ending at this time counts as delivered
        #: already (its initial position); None delivers every file (``earliest``, and every later plan).
        self.takes = takes
        #: The table's files are lines (None: a plain directory's, unknown): whether growth can be a range.
        self.line_based = line_based
        #: A trib table's listing part: trib-named files are the manifest's (tributary_read.tracking).
        self.foreign_only = foreign_only
        self.layout = layout
        self.horizon = now_ms - lookback_ms
        self.settle = now_ms - min_age_ms if min_age_ms else None
        self.ledger = ledger
        self.sealed = sealed
        self.files: list[ResolvedFile] = []
        self.conflicts: list[Conflict] = []
        self.beyond: list[LateFile] = []
        self.put: dict[str, dict] = {}
        self.seal: dict[str, dict] = {}
        self.held = [0, 0]
        self.deferred = 0
        self.baseline = {"directories": 0, "files": 0, "bytes": 0}
        self.done: set[str] = set()
        #: Admitted directories with new files, merged into the plan once the scan ends (ListingCap).
        self.kept: dict[str, _Dir] = {}
        self.listed = 0

    def plan(self, full_scan: bool, progress: Progress | None, parallel: int | None) -> LedgerDiff:
        storage = self.storage
        known = None
        if not full_scan and storage.capabilities.real_directories and (self.ledger or self.sealed):
            metas = ((d, meta_of(self.ledger, d)) for d in self.ledger)
            known = {d: e["mtime_ms"] for d, e in metas if _skippable(e)}
            known.update({d: s["mtime_ms"] for d, s in self.sealed.items() if _skippable(s)})
        # When the listing started: no later than any directory was read (a directory's mtime is trusted
        # to skip it only if it was QUIESCENT_MS older than this).
        self.listed = int(time.time() * 1000)
        listing = scan(storage, self.layout, known_dirs=known, progress=progress, parallel=parallel,
                       sink=self._directory)
        if not self.foreign_only:  # a plain directory: its layout is an argument, which may be wrong
            refuse_unmatched(listing, self.layout, storage.uri)
        for d, mtime in listing.leaves.items():  # unchanged since the ledger's listing, or empty
            if d not in self.done:
                self._directory(d, listing.partitions[d], mtime, [], [], d in listing.unchanged)
        for d, r in self.kept.items():
            self._merge(d, r)
        drop = [d for d in (*self.ledger, *self.sealed) if d not in listing.leaves] + self.emptied
        self.files.sort(key=lambda f: f.path)
        delta = {"put": self.put, "seal": self.seal, "drop": drop, "layout": self.layout.to_dict()}
        stats = {**listing.stats(), "ledger_directories_changed": len(self.put), "sealed": len(self.seal),
                 "backlog": self.cap.backlog()}
        if self.held[0]:
            stats.update(held_files=self.held[0], held_bytes=self.held[1])
        return LedgerDiff(tuple(self.files), tuple(self.conflicts),
                          tuple(sorted(self.beyond, key=lambda b: b.path)),
                          tuple(sorted(listing.skipped, key=lambda s: s.path)), self.deferred,
                          self.baseline if self.takes is not None and self.baseline["directories"] else None,
                          stats, delta, tuple(sorted(self.holds, key=lambda h: h.path)))

    def _directory(self, d: str, part: PartitionDir, dir_mtime: int | None, listed_files: list[ListedFile],
                   skipped: list[Skipped], unchanged: bool = False) -> None:
        """Compare one partition directory with the ledger, then let the cap take or leave it."""
        self.done.add(d)
        r = self.judge(d, part, dir_mtime, listed_files, skipped, unchanged)
        if r is not None:
            self._take(d, part, r)

    def judge(self, d: str, part: PartitionDir, dir_mtime: int | None, listed_files: list[ListedFile],
              skipped: list[Skipped], unchanged: bool = False) -> _Dir | None:
        """One partition directory against the ledger (None: unchanged, nothing to take)."""
        r = _Dir()
        in_horizon = part.end_ms > self.horizon
        if unchanged:  # its files are read (a segment) only to seal it as it leaves the horizon
            if not in_horizon and d in self.ledger:
                entry = self.ledger[d]  # the seal keeps its files (their segment): a late change is told exactly
                self.seal[d] = {**_seal(present_files(entry), entry.get("mtime_ms"), entry.get("listed_ms")),
                                **files_of(self.ledger, d, entry)}
            return None
        entry, sl = self.ledger.get(d), self.sealed.get(d)
        cur = foreign(listed_files) if self.foreign_only else listed_files
        young: set[str] = set()
        if self.settle is not None:
            young = {_base(f.path) for f in cur if f.mtime_ms > self.settle}
            if young:
                self.deferred += len(young)
                cur = [f for f in cur if f.mtime_ms <= self.settle]
        # Deferred or withheld files must be looked at again: never let this
        # directory be skipped by its mtime until they are resolved.
        listed = self.listed
        growing = any(f.mtime_ms > listed - GROWING_MS for f in cur)
        troubled = any(s.path.rpartition("/")[0] == d for s in skipped)
        mtime = dir_mtime if not young and not growing and not troubled else None
        fps = {_base(f.path): (f.size, f.mtime_ms, f.valid_length) for f in cur}
        if entry is None and sl is not None:
            # A sealed partition holding a file still settling (younger than min_age) is judged once it
            # has: the file may be new or a sealed one being rewritten, and its directory is listed again
            # (its seal forgets the directory's mtime until then).
            if not young:
                self._check_seal(r, d, part, cur, fps, sl, mtime, listed, troubled)
            elif _skippable(sl):  # listed again by every plan until it settles, as inside the horizon: else a
                # file truncated in place (its directory's mtime unchanged) would wait for the next full scan
                r.seal = {**sl, "mtime_ms": None, "listed_ms": None}
        else:
            taken = entry is None and self.takes is not None and self.takes(part.end_ms)
            if taken and cur:
                self.baseline["directories"] += 1
                self.baseline["files"] += len(cur)
                self.baseline["bytes"] += sum(f.size for f in cur)
            # A partition never seen is delivered whatever its age (and sealed at once when beyond the
            # horizon, so the ledger stays bounded); its new files are exactly what it holds.
            if entry is None:
                self._compare(r, d, part, cur, fps, entry, young, in_horizon, mtime, listed, taken)
                return r
            t = _Dir()
            # Still there, only not listed as data now (settling, or skipped by the listing): never "removed".
            unlisted = young | {_base(s.path) for s in skipped if s.path.rpartition("/")[0] == d}
            self._compare(t, d, part, cur, fps, entry, unlisted, in_horizon, mtime, listed)
            if not cur and not troubled and not young:  # every file gone: retention emptied it
                t.removed = []
            self._settle(r, t, d, part, entry["files"], put={**entry, "mtime_ms": None, "listed_ms": None})
        return r

    def _take(self, d: str, part: PartitionDir, r: _Dir) -> None:
        """Admit directory ``d``'s result to the plan, or leave it whole, as the state had it, for a later run.

        A result with files waits in ``kept`` until the scan ends: a directory
        older than it, listed later, may still push it out of the cap.
        """
        for x in self.cap.admit(d, part.start_ms, r.files):
            self.kept.pop(x, None)
            # Left out: only its directory is marked to be listed again (a file that grew leaves
            # its directory's mtime alone), so the next plan sees what this one saw.
            if x in self.ledger:
                self.put[x] = {**self.ledger[x], "mtime_ms": None, "listed_ms": None}
            elif x in self.sealed:
                self.seal[x] = {**self.sealed[x], "mtime_ms": None, "listed_ms": None}
            if x == d:
                return
        if r.files:
            self.kept[d] = r
        else:
            self._merge(d, r)

    def _merge(self, d: str, r: _Dir) -> None:
        self.files.extend(r.files)
        self.conflicts.extend(r.conflicts)
        self.beyond.extend(r.beyond)
        if r.put is not None:
            self.put[d] = r.put
        if r.seal is not None:
            self.seal[d] = r.seal
        if r.hold is not None:
            self.holds.append(r.hold)
        self.held[0] += r.held[0]
        self.held[1] += r.held[1]

    def _compare(self, r: _Dir, d: str, part: PartitionDir, cur: list[ListedFile], fps: dict,
                 entry: Mapping | None, unlisted: set[str], in_horizon: bool, mtime: int | None, listed: int,
                 taken: bool = False) -> None:
        fmap = dict(entry["files"]) if entry else {}
        ranges = dict(entry.get("ranges") or {}) if entry else {}
        changed = False
        for f in cur:
            name = _base(f.path)
            fp = fps[name]
            old = fmap.get(name)
            if old is None:
                if not taken:  # new beside the ledger's files: exact, in the horizon or leaving it now
                    r.files.append(_resolved(f, part))
                    self._digests(f, fp, ranges)
                fmap[name] = _enc(fp)
                changed = True
                continue
            ofp, present = _dec(old)
            if ofp != fp:
                g = (growth(self.storage, f.path, ofp, fp, ranges.get(name), self.line_based) if present
                     else "removed, then written again after it was delivered")
                if isinstance(g, Growth):  # only grew: its new whole lines (members) are delivered
                    if g.end > g.offset:
                        r.files.append(_resolved(f, part, g))
                    ranges[name] = g.record()
                    if g.end < readable(fp):
                        r.held[0] += 1
                        r.held[1] += readable(fp) - g.end
                else:  # holds the partition unless acknowledged (_settle); then reported once, the ack records it
                    r.conflicts.append(_conflict(f, part, ofp, g))
                    ranges.pop(name, None)
                fmap[name] = _enc(fp)
                changed = True
            elif not present:
                fmap[name] = _enc(fp)
                changed = True
        for name, v in list(fmap.items()):
            if name not in fps and name not in unlisted:
                fp, present = _dec(v)
                if present:
                    # Kept, marked gone: a file reappearing under this name is then
                    # a conflict (a rewrite) however the runs interleave.
                    fmap[name] = _enc(fp, present=False)
                    changed = True
                    r.removed.append(name)
        if not in_horizon:  # sealed with its files: a late change in it is told exactly
            r.seal = {**_seal(((n, fps[n]) for n in fps), mtime, listed), "files": fmap,
                      **({"ranges": ranges} if ranges else {})}
        elif changed or _meta_differs(entry, mtime, listed):
            r.put = {"mtime_ms": mtime, "listed_ms": listed if mtime is not None else None, "files": fmap,
                     **({"ranges": ranges} if ranges else {})}

    def _digests(self, f: ListedFile, fp: _Fp, ranges: dict) -> None:
        """Keep, beside a file delivered whole, the digests of its bytes (``ranges``, as a range's end): a later
        growth is then checked against them, and a file rewritten with longer content is not taken for one
        that grew (tributary_read.read.growth). Only for a file whose growth could be delivered at all."""
        name = _base(f.path)
        if not can_grow(f.path, self.line_based):
            return
        try:
            rec = delivered(self.storage, f.path, readable(fp))
        except OSError:  # gone since the listing: the read of the plan says so
            return
        if rec is not None:
            ranges[name] = rec

    def _check_seal(self, r: _Dir, d: str, part: PartitionDir, cur: list[ListedFile], fps: dict, sl: Mapping,
                    mtime: int | None, listed: int, troubled: bool = False) -> None:
        """A sealed partition listed again: unchanged (its digest), else compared with its files, read only now."""
        n, h, _ = _digest(fps.items())
        if (n, h) == (sl["count"], sl["digest"]):
            keep = {k: sl[k] for k in ("seg", "files", "ranges") if k in sl}
            if not keep and n <= self.upgrade_left:  # sealed by an older trib: its listing is what was delivered
                self.upgrade_left -= n
                keep = {"files": {name: _enc(fp) for name, fp in fps.items()}}
            if keep.keys() != sl.keys() & {"seg", "files", "ranges"} or _meta_differs(sl, mtime, listed):
                r.seal = {**_seal(fps.items(), mtime, listed), **keep}
            return
        emptied = not cur and not troubled  # every file gone: retention emptied it, as if the directory went
        body = self.seal_files(d)
        if body is not None:
            self._compare_sealed(r, d, part, cur, fps, sl, body, mtime, listed, emptied)
            return
        if emptied:
            self.emptied.append(d)
            return
        mx = sl.get("max_mtime_ms", 0)
        newer = [f.path for f in cur if f.mtime_ms > mx]
        rest = _digest((name, fp) for name, fp in fps.items() if fp[1] <= mx)
        if newer and rest[:2] == (sl["count"], sl["digest"]):
            new: list[str] | None = [_base(p) for p in newer]  # only files newer than the seal were added
        else:
            new = added_by_digest(fps, sl["count"], sl["digest"])  # one or two files added, whatever their mtime
        if new is not None:
            names = set(new)
            r.files.extend(_resolved(f, part) for f in cur if _base(f.path) in names)
            r.seal = {**_seal(fps.items(), mtime, listed), "files": {k: _enc(fp) for k, fp in fps.items()}}
            return
        why = (f"{CHANGED_BEYOND}: {sl['count']} files then, {len(cur)} now, and an older trib kept only a digest "
               "of its files, so which are new cannot be told")
        if self.allow_beyond:  # acknowledged: reported, not delivered; its files are kept from now on
            r.beyond.extend(_beyond(f, part, why) for f in cur)
            r.seal = {**_seal(fps.items(), mtime, listed), "files": {k: _enc(fp) for k, fp in fps.items()}}
            return
        r.hold = HeldPartition(d, dict(part.values), (why,), exact=False)
        r.seal = {**sl, "mtime_ms": None, "listed_ms": None}  # listed again by every plan until resolved

    def _compare_sealed(self, r: _Dir, d: str, part: PartitionDir, cur: list[ListedFile], fps: dict,
                        sl: Mapping, body: Mapping, mtime: int | None, listed: int, emptied: bool = False) -> None:
        """A changed sealed partition against the files it delivered: what is new is delivered, as inside the
        horizon; a delivered file removed or rewritten holds the partition back (unless acknowledged)."""
        t = _Dir()
        self._compare(t, d, part, cur, fps, body, set(), False, mtime, listed)
        if emptied:  # kept, each file marked gone: one restored later is not delivered again
            r.seal = t.seal
            return
        self._settle(r, t, d, part, body["files"], seal={**sl, "mtime_ms": None, "listed_ms": None})

    def _settle(self, r: _Dir, t: _Dir, d: str, part: PartitionDir, delivered: Mapping,
                put: dict | None = None, seal: dict | None = None) -> None:
        """Partition ``d`` compared (``t``) into ``r``: taken, or held back when a file delivered there was
        rewritten or removed, inside the lookback or beyond it.

        One rule wherever the partition is, because neither a byte range nor a new file can say what such
        a change means: a file rewritten under its name, or removed while a tool writes its records again
        under another name (a compaction by another tool, a re-export), would be lost or delivered twice.
        Held, the partition delivers nothing (its new files wait) and keeps its entry as it was (``put`` or
        ``seal``, listed again by every plan) until ``trib consumer replay`` resolves it; the rest of the
        plan is delivered. Acknowledged (``allow_changed``), the changes are reported in ``conflicts``.
        """
        changes = [f"{_base(c.path)} {c.reason}" for c in t.conflicts] + [
            f"{name} was removed after it was delivered" for name in t.removed]
        if changes and not self.allow_changed:
            r.hold = HeldPartition(d, dict(part.values), tuple(changes))
            r.put, r.seal = put, seal
            return
        gone = [Conflict(f"{d}/{name}", dict(part.values), Fingerprint(*_dec(delivered[name])[0]), Fingerprint(0, 0),
                         "removed after it was delivered") for name in t.removed]
        r.files, r.conflicts, r.held, r.put, r.seal = t.files, t.conflicts + gone, t.held, t.put, t.seal


def _base(path: str) -> str:
    return path.rpartition("/")[2]


def _resolved(f: ListedFile, part: PartitionDir, grown: Growth | None = None) -> ResolvedFile:
    if grown is not None:
        return ResolvedFile(f.path, f.size, part.values, mtime_ms=f.mtime_ms, valid_length=grown.end,
                            offset=grown.offset)
    return ResolvedFile(f.path, f.size, part.values, mtime_ms=f.mtime_ms, valid_length=f.valid_length)


def _beyond(f: ListedFile, part: PartitionDir, reason: str) -> LateFile:
    return LateFile(f.path, f.size, f.mtime_ms, dict(part.values), reason, f.valid_length)


def _conflict(f: ListedFile, part: PartitionDir, old: _Fp, reason: str) -> Conflict:
    return Conflict(f.path, dict(part.values), Fingerprint(*old), Fingerprint(f.size, f.mtime_ms, f.valid_length),
                    reason)
