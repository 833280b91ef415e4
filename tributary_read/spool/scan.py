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

from tributary_read.spool.identity import HEAD, Found, Moved, chunks, content_length, digest, look
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
        #: (device, inode, size, mtime) -> a gzip file's (content length, stream ended), see plan()
        self.lengths: dict[tuple, tuple[int, bool]] = {}

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
        self.lengths = {k: v for k, v in self.lengths.items() if k in now}
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
    #: open files (id) not read this time because a copy of theirs is still being made: not missing
    waiting: set[int] = field(default_factory=set)


def _fits(f: Found, pos: int, hlen: int, tail: bytes, tails: dict) -> bool | None:
    """Could ``f`` hold the content read so far (``pos`` bytes ending in ``tail``, known by a head of
    ``hlen`` bytes)? None: cannot tell now (the name was rotated to another file since the scan, or a gzip
    file is still being written). A gzip file whose head covers every byte read is trusted by its head:
    checking the bytes before ``pos`` would take decompressing it up to there."""
    if pos == 0:
        return True
    if f.compressed and hlen >= min(HEAD, pos):
        return True
    if not f.compressed and f.size < pos:
        return False
    k = (f.dev, f.ino, f.size, f.mtime_ns, pos)
    got = tails.get(k)
    if got is None:
        try:
            got = tails[k] = f.tail_key(pos)
        except Moved:
            return None
    if got == b"" and f.compressed:
        return None  # its content so far is shorter: gzip may still be writing it
    return got == tail


_OPEN, _DONE, _WAIT, _NEW = "open", "done", "wait", "new"


def _identify(f: Found, opens: dict, done: DoneSet, hlens: set[int], tails: dict) -> tuple[str, OpenFile | Done | list | None]:
    """What ``f`` is: the continuation of an open file, a copy of a done file, not to be told yet (wait, with
    the open files it may be a copy of), or new. The longest identity ``f`` shares decides: a gzip copy of a
    finished file is that file, never the continuation of a file found since whose head is shorter yet (a few
    bytes of a line that starts like every other line). A file found empty, and not read from since, is known
    by nothing but its inode."""
    for h in sorted({x for x in hlens if x <= len(f.head)} | {len(f.head)}, reverse=True):
        k = digest(f.head[:h])
        hits = [e for e in opens.get((k, h), ()) if h or e.pos or (not f.compressed and (f.dev, f.ino) == (e.dev, e.ino))]
        fits = [_fits(f, e.pos, e.hlen, e.tail, tails) for e in hits]
        match = next((e for e, ok in zip(hits, fits) if ok), None)
        if match is not None:
            return _OPEN, match
        if None in fits or any(not f.compressed and f.size < e.pos for e in hits):
            return _WAIT, hits  # moved since the scan, or a copy of an open file still being made (copytruncate)
        dhits = [d for d in done.with_head(k) if d.hlen == h]
        dfits = [_fits(f, d.size, d.hlen, d.tail, tails) for d in dhits]
        same = next((d for d, ok in zip(dhits, dfits) if ok), None)
        if same is not None:
            return _DONE, same
        if None in dfits or any(not f.compressed and f.size < d.size for d in dhits):
            return _WAIT, None  # a copy of a finished file still being made, or a prefix of one: nothing new
    return _NEW, None


def _length(f: Found, lengths: dict, expect: int | None = None) -> tuple[int, bool]:
    """A compressed file's (content length, stream ended), decompressed once per state of the file ((0, False):
    moved since the scan, so nothing is known of it). ``expect``: the length a finished file it may be a copy of holds; a gzip file whose trailer
    says that length (ISIZE, the last 4 bytes, modulo 2**32) is taken to hold it without decompressing, so
    a directory keeping a year of compressed rotations costs a 4-byte read each, not their decompression.
    (A stream still being written ends in other bytes, but for a 2**-32 chance, and is decompressed.)"""
    k = (f.dev, f.ino, f.size, f.mtime_ns)
    if k not in lengths:
        try:
            if expect is not None and f.codec == "gzip" and f.size >= 18:
                with f.open() as fh:
                    isize = int.from_bytes(os.pread(fh.fileno(), 4, f.size - 4), "little")
                if isize == expect & 0xFFFFFFFF:
                    lengths[k] = (expect, True)
                    return lengths[k]
            lengths[k] = content_length(f)
        except Moved:
            return 0, False
    return lengths[k]


def plan(found: list[Found], state: SpoolPositions, tails: dict | None = None, lengths: dict | None = None) -> Plan:
    """Match ``found`` against ``state`` (moved on in place: files found new, done files that grew again).

    A gzip file's content length is learnt by decompressing it (once per state of the file, kept in
    ``lengths``): an open file's size is its content's, so a compressed file deleted half-read reports the
    bytes it lost, and a compressed copy of a finished file is only that copy when it holds no more than
    the file did (one that holds more goes on from there; one without its trailer yet waits).
    """
    tails = {} if tails is None else tails
    lengths = {} if lengths is None else lengths
    # A compressed file is never a logger's open log, and gzip may stamp it after the log it sits beside.
    out = Plan(newest_ns=max((f.mtime_ns for f in found if not f.compressed), default=0))
    inodes = {(e.dev, e.ino): e.pos for e in state.files}  # as committed, before this scan moves any
    opens: dict[tuple[bytes, int], list[OpenFile]] = {}
    for e in state.files:
        opens.setdefault((e.head, e.hlen), []).append(e)
    hlens = {e.hlen for e in state.files if e.hlen < HEAD} | state.done.short_sizes()
    best: dict[int, Found] = {}  # id(open file) -> the file that continues it
    new: list[Found] = []
    # Plain files first: of an open file's copies, the uncompressed one is read (it is cheaper, and gzip
    # may still be writing the compressed one).
    for f in sorted(found, key=lambda f: f.compressed):
        kind, hit = _identify(f, opens, state.done, hlens, tails)
        if kind == _OPEN:
            assert isinstance(hit, OpenFile)
            cur = best.get(id(hit))
            if cur is None or _better(f, cur, hit):
                best[id(hit)] = f
        elif kind == _DONE:
            assert isinstance(hit, Done)
            out.present.add(hit.key)
            size, ended = (f.size, True) if not f.compressed else _length(f, lengths, hit.size)
            if size <= hit.size:
                if ended and size == hit.size:
                    out.copies.append((f, hit))
                # else: a copy still being made (a compressed one without its trailer): nothing new yet
            else:  # read to its end once, and it grew again (or holds more than was read): go on from there
                e = OpenFile(hit.head, hit.hlen, hit.size, hit.tail, f.name, f.dev, f.ino, size,
                             owed=_unended(f, hit.size))
                state.done.discard(hit)
                state.files.append(e)
                best[id(e)] = f
        elif kind == _NEW:
            new.append(f)
        elif isinstance(hit, list):
            out.waiting.update(id(e) for e in hit)
    for e in state.files:
        got = best.get(id(e))
        if got is None:
            if id(e) not in out.waiting:
                out.missing.append(e)
            continue
        if len(got.head) > e.hlen:
            e.head, e.hlen = got.key, len(got.head)
        e.name, e.dev, e.ino = got.name, got.dev, got.ino
        if got.compressed:
            e.size = max(e.size, _length(got, lengths)[0])
        out.reads.append((e, got))
    names: set[tuple[int, int]] = set()
    heads: dict[tuple[bytes, int], Found] = {}
    # Of new files with one content, one is read: plain over gzip (gzip may still be writing it), then the
    # longer. Both a log and its compressed copy can be new to a scan (a first run, or a run that starts
    # after a rotation and its compression): read as two files, every line was taken twice. Two short files
    # (under 1 KiB, known by all of their bytes) are copies only when one is compressed: two plain ones
    # holding the same few lines may be two logs' records.
    for f in sorted(new, key=lambda f: (f.compressed, -f.size)):
        if (f.dev, f.ino) in names:  # a second name of a file found new (a symlink, a hard link): read once
            continue
        names.add((f.dev, f.ino))
        same = heads.get((f.key, len(f.head)))
        if same is not None and len(f.head) and (len(f.head) == HEAD or f.compressed or same.compressed):
            continue  # a copy of a file found new in this scan: the next scan matches it to that file
        heads.setdefault((f.key, len(f.head)), f)
        was = inodes.get((f.dev, f.ino))
        if was is not None:  # the same inode, other content: truncated in place (copytruncate), or reused
            out.events.append({"event": "truncated" if f.size < was else "replaced", "name": f.name,
                               "committed_bytes": was, "size": f.size})
        size = f.size if not f.compressed else _length(f, lengths)[0]
        e = OpenFile(f.key, len(f.head), 0, digest(b""), f.name, f.dev, f.ino, size, fresh=True)
        state.files.append(e)
        out.reads.append((e, f))
    out.reads.sort(key=lambda ef: (ef[1].mtime_ns, ef[1].name))
    return out


def _unended(f: Found, pos: int) -> bool:
    """Was the last line before ``pos`` taken without its newline? (Then a newline at ``pos`` ends it.)"""
    if pos <= 0:
        return False
    try:
        return next(chunks(f, pos - 1), b"")[:1] != b"\n"
    except Moved:
        return False


def _better(f: Found, cur: Found, e: OpenFile) -> bool:
    """Of two files that continue ``e``: plain over gzip, then ``e``'s own inode, then the longer."""
    rank = lambda x: (not x.compressed, (x.dev, x.ino) == (e.dev, e.ino), x.size)  # noqa: E731
    return rank(f) > rank(cur)
