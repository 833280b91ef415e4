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
from tributary_read.spool.positions import Done, DoneSet, OpenFile, SpoolPositions

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


def _fits(f: Found, pos: int, hlen: int, tail: bytes, tails: dict) -> bool | None:
    """Could ``f`` hold the content read so far (``pos`` bytes ending in ``tail``, known by a head of
    ``hlen`` bytes)? None: cannot tell now (the name was rotated to another file since the scan, or a gzip
    file is still being written). A gzip file whose head covers every byte read is trusted by its head:
    checking the bytes before ``pos`` would take decompressing it up to there."""
    if pos == 0:
        return True
    if f.gz and hlen >= min(HEAD, pos):
        return True
    if not f.gz and f.size < pos:
        return False
    k = (f.dev, f.ino, f.size, f.mtime_ns, pos)
    got = tails.get(k)
    if got is None:
        try:
            got = tails[k] = f.tail_key(pos)
        except Moved:
            return None
    if got == b"" and f.gz:
        return None  # its content so far is shorter: gzip may still be writing it
    return got == tail


_OPEN, _DONE, _WAIT, _NEW = "open", "done", "wait", "new"


def _identify(f: Found, opens: dict, done: DoneSet, hlens: set[int], tails: dict) -> tuple[str, OpenFile | Done | None]:
    """What ``f`` is: the continuation of an open file, a copy of a done file, not to be told yet (wait), or
    new. The longest identity ``f`` shares decides: a gzip copy of a finished file is that file, never the
    continuation of a file found since whose head is shorter yet (a few bytes of a line that starts like
    every other line). A file found empty, and not read from since, is known by nothing but its inode."""
    for h in sorted({x for x in hlens if x <= len(f.head)} | {len(f.head)}, reverse=True):
        k = digest(f.head[:h])
        hits = [e for e in opens.get((k, h), ()) if h or e.pos or (not f.gz and (f.dev, f.ino) == (e.dev, e.ino))]
        fits = [_fits(f, e.pos, e.hlen, e.tail, tails) for e in hits]
        match = next((e for e, ok in zip(hits, fits) if ok), None)
        if match is not None:
            return _OPEN, match
        if None in fits or any(not f.gz and f.size < e.pos for e in hits):
            return _WAIT, None  # moved since the scan, or a copy of an open file still being made (copytruncate)
        dhits = [d for d in done.with_head(k) if d.hlen == h]
        dfits = [_fits(f, d.size, d.hlen, d.tail, tails) for d in dhits]
        same = next((d for d, ok in zip(dhits, dfits) if ok), None)
        if same is not None:
            return _DONE, same
        if None in dfits or any(not f.gz and f.size < d.size for d in dhits):
            return _WAIT, None  # a copy of a finished file still being made, or a prefix of one: nothing new
    return _NEW, None


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
        kind, hit = _identify(f, opens, state.done, hlens, tails)
        if kind == _OPEN:
            assert isinstance(hit, OpenFile)
            cur = best.get(id(hit))
            if cur is None or _better(f, cur, hit):
                best[id(hit)] = f
        elif kind == _DONE:
            assert isinstance(hit, Done)
            out.present.add(hit.key)
            if f.gz or f.size == hit.size:
                out.copies.append((f, hit))
            else:  # read to its end once, and it grew again: go on from there
                e = OpenFile(hit.head, hit.hlen, hit.size, hit.tail, f.name, f.dev, f.ino, f.size,
                             owed=_unended(f, hit.size))
                state.done.discard(hit)
                state.files.append(e)
                best[id(e)] = f
        elif kind == _NEW:
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
