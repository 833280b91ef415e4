"""Match what a spool directory holds now against the committed positions.

Each file found is one of: the continuation of an open file (same head, and
the same bytes before the position read so far), a copy of a done file (a
rename, a compressed copy, a symlink), a done file that grew again, or a new
file. An open file that no file matches any more has been deleted or rotated
out of the pattern; one seen truncated in place (same inode, now shorter than
what was read, another head) is an event the commit records.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

from tributary_read.spool.identity import HEAD, Found, Moved, digest, look
from tributary_read.spool.positions import Done, OpenFile, SpoolPositions

#: What ``--on-complete rename`` appends; such files are never read again.
COMPLETED_SUFFIX = ".COMPLETED"


@dataclass(frozen=True)
class Selection:
    """Which names of the directory are the source."""

    directory: str
    pattern: str = "*"
    exclude: tuple[str, ...] = ()

    def wants(self, name: str) -> bool:
        return (fnmatch.fnmatchcase(name, self.pattern) and not name.endswith(COMPLETED_SUFFIX)
                and not any(fnmatch.fnmatchcase(name, x) for x in self.exclude))


class Lister:
    """Lists the selected files with their heads.

    A file whose (name, device, inode, size, mtime) is what an earlier listing of this process read is not
    opened again, and the digests of the bytes before a position (:attr:`tails`) are kept for it: a
    follow run's scans, and a bounded run's second look, cost a stat per file.
    """

    def __init__(self, selection: Selection):
        self.selection = selection
        self._cache: dict[tuple, Found] = {}
        #: (device, inode, size, mtime, position) -> the tail digest there ("" : fewer bytes), see plan()
        self.tails: dict[tuple, bytes] = {}

    def __call__(self) -> list[Found]:
        found: list[Found] = []
        cache: dict[tuple, Found] = {}
        with os.scandir(self.selection.directory) as it:
            entries = [e for e in it if self.selection.wants(e.name)]
        for e in entries:
            try:
                st = e.stat()  # follows a symlink: a link to a log is that log
            except OSError:
                continue  # gone since the listing
            f = self._cache.get((e.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
            if f is None:
                f = look(e.path, e.name)  # stat again, and the head, from one open file
                if f is None:
                    continue  # gone, not a regular file, or gzip still writing its head
            cache[(f.name, f.dev, f.ino, f.size, f.mtime_ns)] = f
            found.append(f)
        self._cache = cache
        now = {(f.dev, f.ino, f.size, f.mtime_ns) for f in found}
        self.tails = {k: v for k, v in self.tails.items() if k[:4] in now}
        return sorted(found, key=lambda f: (f.mtime_ns, f.name))


@dataclass
class Plan:
    """What one scan found: the files to read, copies of done files, and what went missing."""

    reads: list[tuple[OpenFile, Found]] = field(default_factory=list)
    copies: list[tuple[Found, Done]] = field(default_factory=list)  # files whose content is all done
    missing: list[OpenFile] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    newest_ns: int = 0  # the newest plain file's mtime: a file older than it has been rotated away
    present: set[bytes] = field(default_factory=set)  # done keys some file still holds


def _fits(f: Found, pos: int, tail: bytes, tails: dict) -> bool | None:
    """Could ``f`` hold the content read so far (``pos`` bytes ending in ``tail``)? None: cannot tell now
    (the name was rotated to another file since the scan). A gzip file's bytes before ``pos`` would take
    decompressing it all: its head is trusted alone."""
    if f.gz:
        return True
    if f.size < pos:
        return False
    if pos == 0:
        return True
    k = (f.dev, f.ino, f.size, f.mtime_ns, pos)
    got = tails.get(k)
    if got is None:
        try:
            got = tails[k] = f.tail_key(pos)
        except Moved:
            return None
    return got == tail


def plan(found: list[Found], state: SpoolPositions, tails: dict | None = None) -> Plan:
    tails = {} if tails is None else tails
    # A compressed file is never a logger's open log, and gzip may stamp it after the log it sits beside.
    out = Plan(newest_ns=max((f.mtime_ns for f in found if not f.gz), default=0))
    inodes = {(e.dev, e.ino): e.pos for e in state.files}  # as committed, before this scan moves any
    opens: dict[tuple[bytes, int], list[OpenFile]] = {}
    for e in state.files:
        opens.setdefault((e.head, e.hlen), []).append(e)
    hlens = {e.hlen for e in state.files if e.hlen < HEAD} | state.done.short_sizes()
    best: dict[int, Found] = {}  # id(open file) -> the file that continues it
    new: list[Found] = []
    # Plain files first: of an open file's copies, the uncompressed one is read (it is cheaper, and gzip
    # may still be writing the compressed one).
    for f in sorted(found, key=lambda f: f.gz):
        keys = [(digest(f.head[:h]), h) for h in sorted(hlens | {len(f.head)}, reverse=True) if h <= len(f.head)]
        hits = [e for k in keys for e in opens.get(k, ())]
        fits = [_fits(f, e.pos, e.tail, tails) for e in hits]
        match = next((e for e, ok in zip(hits, fits) if ok), None)
        if match is None and (None in fits or any(f.size < e.pos for e in hits)):
            continue  # moved since the scan, or a copy of an open file still being made (copytruncate's cp)
        if match is not None:
            cur = best.get(id(match))
            if cur is None or _better(f, cur, match):
                best[id(match)] = f
            continue
        dhits = [d for k, h in keys for d in state.done.with_head(k) if d.hlen == h]
        dfits = [_fits(f, d.size, d.tail, tails) for d in dhits]
        done = next((d for d, ok in zip(dhits, dfits) if ok), None)
        if done is None and (None in dfits or any(f.size < d.size for d in dhits)):
            continue  # a copy of a finished file still being made, or a prefix of one: nothing new in it
        if done is not None:
            out.present.add(done.key)
            if f.gz or f.size == done.size:
                out.copies.append((f, done))
            else:  # read to its end once, and it grew again: go on from there
                e = OpenFile(done.head, done.hlen, done.size, done.tail, f.name, f.dev, f.ino, f.size,
                             owed=_unended(f, done.size))
                state.done.discard(done)
                state.files.append(e)
                best[id(e)] = f
            continue
        new.append(f)
    for e in state.files:
        got = best.get(id(e))
        if got is None:
            out.missing.append(e)
            continue
        if len(got.head) > e.hlen:
            e.head, e.hlen = got.key, len(got.head)
        e.name, e.dev, e.ino = got.name, got.dev, got.ino
        out.reads.append((e, got))
    names: set[tuple[int, int]] = set()
    for f in new:
        if (f.dev, f.ino) in names:  # a second name of a file found new (a symlink, a hard link): read once
            continue
        names.add((f.dev, f.ino))
        was = inodes.get((f.dev, f.ino))
        if was is not None:  # the same inode, other content: truncated in place (copytruncate), or reused
            out.events.append({"event": "truncated" if f.size < was else "replaced", "name": f.name,
                               "committed_bytes": was, "size": f.size})
        e = OpenFile(f.key, len(f.head), 0, digest(b""), f.name, f.dev, f.ino, f.size, fresh=True)
        state.files.append(e)
        out.reads.append((e, f))
    out.reads.sort(key=lambda ef: (ef[1].mtime_ns, ef[1].name))
    return out


def _unended(f: Found, pos: int) -> bool:
    """Was the last line before ``pos`` taken without its newline? (Then a newline at ``pos`` ends it.)"""
    try:
        with f.open() as fh:
            return pos > 0 and os.pread(fh.fileno(), 1, pos - 1) != b"\n"
    except Moved:
        return False


def _better(f: Found, cur: Found, e: OpenFile) -> bool:
    """Of two files that continue ``e``: plain over gzip, then ``e``'s own inode, then the longer."""
    rank = lambda x: (not x.gz, (x.dev, x.ino) == (e.dev, e.ino), x.size)  # noqa: E731
    return rank(f) > rank(cur)
