"""Exactly-once ingest of a directory of rotating log files (``trib ingest --source-dir``).

Each commit holds the records read and, in the same atomic manifest, where every
open file stands (:mod:`.positions`), so a run killed at any instant resumes
from the table alone: the files of a commit that never landed are never
referenced, and their lines are read again. Log shippers keep their positions
in a side file written on a timer, so a crash between that file and the data
duplicates or loses the interval; here the two are one write.

Bounded (default): read every selected file to its current end, look once more
for what rotated meanwhile, commit and return. ``follow``: scan every
``poll_s`` and commit at the pace of :class:`~tributary_read.write.pacing.CommitPacer`,
the one shared with the Kafka source, until stopped.
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from tributary_read.choice import Choice
from tributary_read.errors import InvalidInputError, ManifestCorruptError, SourceGapError
from tributary_read.faults import crash_point
from tributary_read.spool.identity import HEAD, Changed, Moved, chunks, digest
from tributary_read.spool.positions import Done, OpenFile, SpoolPositions, commit_key
from tributary_read.spool.scan import COMPLETED_SUFFIX, Found, Lister, Plan, Selection, plan
from tributary_read.table.config import RollPolicy, Table
from tributary_read.table.manifest import Transaction
from tributary_read.table.renames import roll_forward
from tributary_read.write.ingest import FROM_TABLE, FromTable, StopRequest, TimeSpec
from tributary_read.write.lines import BadRecordLimit, LineRecords, OnBadRecord
from tributary_read.write.pacing import CommitPacer
from tributary_read.write.sources import CARRIED_NOT
from tributary_read.write.writer import TableWriter

#: The lost files, events and completed files a result lists at most (a follow run's latest).
REPORTED = 1000
#: Where a large directory's done-set snapshots live, under the table.
SNAPSHOT_DIR = "_tributary/spool"


class OnComplete(Choice):
    """What happens to a file once the commit holding its last byte has landed (Flume's deletePolicy)."""

    KEEP = "keep"
    DELETE = "delete"
    RENAME = "rename"  # to NAME.COMPLETED, which no scan selects


@dataclass(frozen=True)
class SpoolSource:
    """A directory of log files. ``close_inactive_s``: a file read to its end and unchanged this long, with a
    newer file beside it, is finished (folded into the done set; its unterminated last line is taken)."""

    directory: str
    pattern: str = "*"
    exclude: tuple[str, ...] = ()
    close_inactive_s: float = 300.0
    on_complete: OnComplete = OnComplete.KEEP


@dataclass(frozen=True)
class SpoolResult:
    app_id: str
    source: str
    records: int  # read by this run
    dead_letters: int
    commits: int
    files_read: int  # files this run read at least one record from
    finished: int  # files this run folded into the done set
    rolled_forward: int
    lost: tuple = ()  # {"name", "unread_bytes"}: files deleted before they were read to their end
    events: tuple = ()  # truncations and other events the commits recorded
    completed: tuple = ()  # files acted on by on_complete: {"name", "action"}
    records_committed: int = 0  # from this directory, by every run
    bytes: int = 0  # content bytes this run read
    stopped_by: str | None = None
    tracked: int = 0  # open files after the run
    done: int = 0  # done files remembered after the run
    bad_records: dict | None = None  # the bad-record limit's report (write.lines.BadRecordLimit.report)

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


def ingest_dir(
    table: Table,
    source: SpoolSource,
    app_id: str,
    *,
    time_spec: TimeSpec,
    follow: bool = False,
    commit_every: int = 10_000,
    commit_interval_s: float = 60.0,
    source_name: str | None = None,
    protocol: str | None = None,
    roll: RollPolicy | None = None,
    on_bad_record: OnBadRecord | str = OnBadRecord.DEAD_LETTER,
    max_bad_fraction: float | None | FromTable = FROM_TABLE,
    allow_lost: bool = False,
    poll_s: float = 1.0,
    on_commit: Callable[[object], None] | None = None,
    stop: StopRequest | None = None,
    progress: Callable[[str], None] | None = None,
) -> SpoolResult:
    """Append the lines of ``source``'s files not yet committed for ``app_id``.

    Args:
        time_spec: where each record's event time comes from (required, as for a file).
        follow: keep scanning until ``stop`` is set; else read to the current ends and return.
        source_name: the directory's key in the offsets (default: its base name).
        allow_lost: a bounded run that found a file deleted before it was read to its end
            raises SourceGapError after committing everything else, unless this is set. A
            follow run reports such a file through ``progress`` and goes on. Either way the
            commit records it.
        progress: called with one-line notes (status, lost files, truncations).
    """
    if not app_id or any(c.isspace() for c in app_id):
        raise InvalidInputError("the app id must be a non-empty word", app_id="the app id")
    if not os.path.isdir(source.directory):
        raise InvalidInputError(f"source directory {source.directory} is not a readable directory")
    if source.close_inactive_s < 0:
        raise InvalidInputError("close-inactive must be >= 0", close_inactive="close-inactive")
    on_bad_record = OnBadRecord.parse(on_bad_record, "on_bad_record")
    OnComplete.parse(source.on_complete, "on_complete")
    pace = CommitPacer(commit_every, commit_interval_s, follow)
    name = source_name or os.path.basename(os.path.normpath(os.path.abspath(source.directory)))
    extract = time_spec.extractor(table.layout.tz)
    if isinstance(max_bad_fraction, FromTable):
        max_bad_fraction = table.config.max_bad_fraction
    limit = BadRecordLimit(max_bad_fraction if on_bad_record is OnBadRecord.DEAD_LETTER else None, name)
    run = _Run(table, source, app_id, name, pace, protocol, roll, on_commit, stop, progress)
    run.records = LineRecords(table, run.writer, extract, bool(time_spec.field), on_bad_record, limit,
                              field_time=time_spec.field_time(table.layout.tz))
    return run.go(follow, poll_s, allow_lost)


class _Run:
    def __init__(self, table: Table, source: SpoolSource, app_id: str, name: str, pace: CommitPacer, protocol,
                 roll, on_commit, stop, progress):
        self.table, self.source, self.app_id, self.name, self.pace = table, source, app_id, name, pace
        self.on_commit, self.stop, self.progress = on_commit, stop, progress
        self.on_complete = OnComplete.parse(source.on_complete, "on_complete")
        self.lister = Lister(Selection(source.directory, source.pattern, tuple(source.exclude)))
        state = table.log.state()
        app = state.apps.get(app_id)
        self.rolled = 0
        if app is not None:
            last = table.log.read_commit(app.version)
            self.rolled = len(roll_forward(table, last.files)) if last else 0
        self.base = state.version
        self.prior = app.transaction if app else Transaction(app_id)
        self.pos = SpoolPositions.from_transaction(self.prior.offsets, self.prior.meta, name, self._read_snapshot)
        self.writer = TableWriter(table, protocol=protocol, roll=roll)
        self.records: LineRecords
        self.committed_done = {d.key for d in self.pos.done}
        self.events: list[dict] = []
        # A follow run lasts months: what it reports keeps the latest REPORTED of each (and counts).
        self.lost: deque[dict] = deque(maxlen=REPORTED)
        self.all_events: deque[dict] = deque(maxlen=REPORTED)
        self.completed: deque[dict] = deque(maxlen=REPORTED)
        self.finishing: list[tuple[Found, Done]] = []  # done files waiting for their commit to act on
        self.dirty = False  # positions changed without a record (a file finished or lost): worth a commit
        self.read = self.bytes = self.commits = self.finished = 0
        self.files_read = 0
        self.reading: set[int] = set()  # open files this run has read records from (id), pruned each pass
        self.seen: dict[int, tuple] = {}  # id(open file) -> (path, size, mtime) when this process last read it
        self.unended: dict[int, bool] = {}  # id(open file) -> a compressed stream without its trailer when last read
        self.missing_before: set[int] = set()  # open files no scan found last time (id)
        self.absent_before: set[bytes] = set()  # done keys no scan found last time

    def _read_snapshot(self, rel: str) -> bytes:
        try:
            return self.table.storage.read(rel)
        except FileNotFoundError:
            raise ManifestCorruptError(
                f"{self.table.storage.uri_for(rel)}, the finished files of {self.name!r} that app {self.app_id!r}'s "
                "last commit names, is missing: something deleted it from the table. Without it this app "
                "cannot tell which files of the directory it already read; restore it, or ingest the directory "
                "under a new app id") from None

    # -- the loop ----------------------------------------------------------------
    def go(self, follow: bool, poll_s: float, allow_lost: bool) -> SpoolResult:
        try:
            passes = 0
            while True:
                passes += 1
                before = self.read
                self._pass()
                if self._stopped() or (not follow and passes >= 2):
                    break
                now = time.monotonic()
                self.writer.roll_idle()
                if self.pace.due(now) or (self.dirty and now - self.pace.last_commit >= self.pace.interval_s):
                    self._commit()
                self._note(now)
                if follow and self.read == before:  # a pass that read lines looks again at once: catching up
                    self._sleep(poll_s)
            if self.pace.pending or self.dirty or self.events:
                self._commit()
        except BaseException:
            self.writer.abort()  # only a batch whose commit was never attempted
            raise
        stopped = signal.Signals(self.stop.signum).name if self._stopped() else None
        result = SpoolResult(
            self.app_id, self.name, self.read, self.records.dead, self.commits, self.files_read,
            self.finished, self.rolled, tuple(self.lost), tuple(self.all_events), tuple(self.completed),
            self.pos.records, self.bytes, stopped, len(self.pos.files), len(self.pos.done),
            self.records.limit.report(self.read))
        if self.lost and not follow and not allow_lost:
            raise SourceGapError(
                f"{_lost_text(list(self.lost))} deleted from {self.source.directory} before they were read to their "
                f"end: those bytes are lost at the source. Everything else read is committed ({self.read} records "
                f"in {self.commits} commits), and the commits record the loss. To exit 0 on such a loss, say so by "
                f"allowing lost files", allow_lost="allowing lost files")
        return result

    def _stopped(self) -> bool:
        return self.stop is not None and self.stop.signum is not None

    def _sleep(self, s: float) -> None:
        end = time.monotonic() + s
        while not self._stopped() and time.monotonic() < end:
            time.sleep(min(0.05, s))

    def _note(self, now: float) -> None:
        since = self.pace.note_due(now) if self.progress else 0
        if since:
            self.progress(f"{self.read} records, {len(self.pos.files)} open files, {len(self.pos.done)} done, "
                          f"{self.commits} commits")

    def _pass(self) -> None:
        found = self.lister()
        crash_point("spool.listed")  # a test lets the logger write between this listing and the reads
        p = plan(found, self.pos, self.lister.tails, self.lister.lengths)
        for ev in p.events:
            self._event(ev, f"{ev['name']} was {ev['event']} in place after {ev['committed_bytes']} bytes were read; "
                            "reading it again from its start")
        self._finish(p.copies)
        now_ns = time.time_ns()
        for e, f in p.reads:
            if self._stopped():
                return
            self._read(e, f, now_ns, p)
        self._missing(p)
        self._forget(p)
        live = {id(e) for e in self.pos.files}  # what this process remembers of files it no longer tracks goes
        self.seen = {k: v for k, v in self.seen.items() if k in live}
        self.unended = {k: v for k, v in self.unended.items() if k in live}
        self.reading &= live

    # -- reading ------------------------------------------------------------------
    def _read(self, e: OpenFile, f: Found, now_ns: int, p: Plan) -> None:
        stamp = (f.path, f.size, f.mtime_ns)
        if self.seen.get(id(e)) != stamp:  # unchanged since this process read it: nothing new to read
            try:
                self.unended[id(e)] = self._read_new(e, f, now_ns, p)
            except Moved:  # rotated since the scan: the next scan finds it under its new name
                return
            except Changed as ex:  # truncated or rewritten under the reader: the next scan tells what it is now
                if self.progress:
                    self.progress(f"note: {ex}; looking at the directory again")
                return
            self.seen[id(e)] = stamp
        if (e.pos >= e.size and e.pos and e.hlen == min(HEAD, e.pos) and not self.unended.get(id(e))
                and self._ended(f, now_ns, p)):
            self._fold(e, f)

    def _read_new(self, e: OpenFile, f: Found, now_ns: int, p: Plan) -> bool:
        """Read ``f`` on from ``e``'s position, taking its whole lines. The bytes before the position are
        read again first and must be the ones committed (:mod:`tributary_read.io.taken`), and the file's head
        is checked after every read: a file truncated and written again under the reader (copytruncate while
        the program writes on) raises Changed, with ``e`` moved only past lines read before the change.
        Returns whether ``f`` is a compressed stream still being written (no trailer yet): it is not finished."""
        pace, src = self.pace, f.name
        back = min(HEAD, e.pos)  # the content before the position, read again for the tail digest
        pos = e.pos - back  # content position of data[0]
        carry = b""  # the content just before ``data``
        rest = b""
        got = 0
        taken = e.taken()
        status: dict = {}
        changed: Changed | None = None
        # A file shorter than HEAD is known by the bytes the scan saw: read no further, so what a commit
        # says was read is always covered by the head it commits (the next scan sees a longer head).
        end = len(f.head) if not f.compressed and len(f.head) < HEAD else None
        try:
            for chunk in chunks(f, pos, end, taken, status):
                if back:
                    take_back = min(back, len(chunk))
                    carry, chunk, back, pos = carry + chunk[:take_back], chunk[take_back:], back - take_back, pos + take_back
                    if back:
                        continue
                    if not taken.tail_holds(carry):
                        raise Changed(f"{f.name} no longer holds the bytes read from it before offset {e.pos}")
                    if not chunk:
                        continue
                if e.owed and chunk:  # a newline owed to the last line, which was taken as a record already
                    e.owed = False
                    if chunk[:1] == b"\n":
                        carry, pos, chunk = (carry + b"\n")[-HEAD:], pos + 1, chunk[1:]
                        self._advance(e, pos, carry, b"", 0)
                        self.dirty = True
                data = rest + chunk if rest else chunk
                start = 0
                end = data.rfind(b"\n") + 1  # the whole lines of data end here
                raw = data[:end - 1].split(b"\n") if end else []
                lines = [line[:-1] if line[-1:] == b"\r" else line for line in raw] if b"\r" in data else raw
                # Runs of whole lines up to the next commit point, taken in bulk where they can be.
                i, stop = 0, self.stop
                while i < len(raw):
                    k = min(len(raw), i + max(1, pace.every - pace.pending))
                    self.records.take_many(lines[i:k], self.pos.records, src)
                    start += sum(map(len, raw[i:k])) + (k - i)
                    n = k - i
                    i = k
                    self.pos.records += n
                    self.read += n
                    got += n
                    pace.pending += n
                    if pace.pending >= pace.every:
                        self._advance(e, pos + start, carry, data, start)
                        self._commit()
                        pace.pending = 0
                    if stop is not None and stop.signum is not None:
                        break
                carry = (carry + data[:start])[-HEAD:]
                pos += start
                rest = data[start:]
                if self._stopped():
                    rest = b""
                    break
        except Changed as ex:
            changed, rest = ex, b""
        if changed is not None and e.fresh and e.pos == 0 and pos <= 0:
            self.pos.files.remove(e)  # found by this scan only, and not what it is now: the next scan finds that
            raise changed
        if pos < e.pos:  # it shrank between the scan and this read: the next scan tells what it is now
            if changed is not None:
                raise changed
            return False
        unended = f.compressed and not status.get("ended")
        e.size = max(e.size, pos + len(rest), 0 if f.compressed or changed is not None else f.size)
        if (changed is None and rest and self._ended(f, now_ns, p)
                and (pos + len(rest) == f.size if not f.compressed else not unended)):
            # rotated away and quiet since the scan (which saw it end here): its last line is all there will be
            self.records.take(rest[:-1] if rest.endswith(b"\r") else rest, self.pos.records, src)
            self.pos.records += 1
            self.read += 1
            got += 1
            carry, pos, rest = (carry + rest)[-HEAD:], pos + len(rest), b""
            e.owed = True
            pace.add()
        self._advance(e, pos, carry, b"", 0)
        if got:
            if id(e) not in self.reading:
                self.reading.add(id(e))
                self.files_read += 1
        if changed is not None:
            raise changed
        return bool(unended)

    def _advance(self, e: OpenFile, pos: int, carry: bytes, data: bytes, upto: int) -> None:
        """Move ``e`` to ``pos``; ``carry + data[:upto]`` ends at ``pos`` and holds min(HEAD, pos) bytes or more."""
        if pos == e.pos:
            return
        self.bytes += pos - e.pos
        e.tail = digest((carry + data[:upto])[-HEAD:])
        e.pos = pos

    def _ended(self, f: Found, now_ns: int, p: Plan) -> bool:
        """Rotated away (a newer file is there, or it is a compressed copy) and unchanged for close-inactive."""
        return (f.compressed or f.mtime_ns < p.newest_ns) and now_ns - f.mtime_ns >= self.source.close_inactive_s * 1e9

    def _fold(self, e: OpenFile, f: Found) -> None:
        d = e.done()
        self.pos.files.remove(e)
        self.pos.done.add(d)
        self.finished += 1
        self.dirty = True
        self.finishing.append((f, d))

    def _missing(self, p: Plan) -> None:
        """Open files no scan found twice running: read to their end (moved out), or lost."""
        now = {id(e) for e in p.missing}
        for e in p.missing:
            if id(e) not in self.missing_before:
                continue
            self.pos.files.remove(e)
            self.dirty = True
            if e.size > e.pos:
                lost = {"name": e.name, "unread_bytes": e.size - e.pos}
                self.lost.append(lost)
                self._event({"event": "lost", **lost}, f"{e.name} was deleted before it was read to its end: "
                                                       f"{e.size - e.pos} bytes were never read")
            if e.pos and e.hlen == min(HEAD, e.pos):  # should it come back, it goes on from here
                self.pos.done.add(e.done())
        self.missing_before = {i for i in now if i not in self.missing_before}

    def _forget(self, p: Plan) -> None:
        """Done files no scan found twice running are forgotten: the set follows the directory, not its history."""
        absent = {d.key for d in self.pos.done} - p.present - {d.key for _, d in self.finishing}
        for d in list(self.pos.done):
            if d.key in absent and d.key in self.absent_before:
                self.pos.done.discard(d)
                self.dirty = True
        self.absent_before = absent

    def _event(self, ev: dict, text: str) -> None:
        self.events.append(ev)
        self.all_events.append(ev)
        self.dirty = True
        if self.progress:
            self.progress(f"warning: {text}")

    # -- committing ----------------------------------------------------------------
    def _commit(self) -> None:
        self.records.limit.check(self.read, self.commits, -1)
        done = self.pos.done
        snapshots = None  # the ones to keep, when this commit names a new one
        if done.needs_snapshot():
            data = done.snapshot_bytes()
            rel = f"{self._snapshot_prefix()}{digest(data).hex()}.bin"
            self.table.storage.write(rel, data)
            self.table.storage.sync(rel)
            snapshots = {rel, done.snapshot}
            done.rebase(rel)
        # The app's other sources are carried forward: the log keeps only an app's last transaction.
        prior = self.prior
        offsets = {**prior.offsets, self.name: self.pos.records - 1, commit_key(self.name): self.pos.commits + 1}
        dirs = prior.meta.get("spool")
        others = {k: v for k, v in prior.meta.items() if k not in CARRIED_NOT or k in ("positions", "fingerprints")}
        meta = {**others,
                "spool": {**(dirs if isinstance(dirs, dict) else {}), self.name: self.pos.to_meta()}}
        if self.events:
            meta["spool_events"] = [{"source": self.name, **ev} for ev in self.events]
        txn = Transaction(self.app_id, offsets, meta)
        commit = self.writer.commit(txn, base_version=self.base)
        self.prior = txn
        assert commit is not None
        self.base = commit.version
        self.pos.commits += 1
        self.commits += 1
        self.events.clear()
        self.dirty = False
        self.pace.committed()
        self.committed_done = {d.key for d in done}
        if self.on_commit:
            self.on_commit(commit)
        crash_point("spool.after_commit")
        if snapshots is not None:
            self._prune(snapshots)
        self._finish([])

    def _snapshot_prefix(self) -> str:
        """Snapshot names of this directory (its source name hashed: any string, and one app may read many)."""
        return f"{SNAPSHOT_DIR}/{self.app_id}/done-{digest(self.name.encode()).hex()}-"

    def _prune(self, keep: set) -> None:
        """Once a commit naming a new snapshot has landed, the snapshots before the one it replaced are named
        only by commits no run resumes from: drop them (best effort), so they do not pile up with the year.
        The replaced one stays a generation longer."""
        prefix = self._snapshot_prefix()
        try:
            for info in self.table.storage.list(f"{SNAPSHOT_DIR}/{self.app_id}", recursive=False):
                if info.path.startswith(prefix) and info.path not in keep:
                    self.table.storage.delete(info.path)
        except OSError:
            pass

    def _finish(self, copies: list[tuple[Found, Done]]) -> None:
        """Act on done files whose last byte is committed (``on_complete``); the rest wait for their commit."""
        waiting = []
        for f, d in self.finishing + copies:
            if d.key not in self.committed_done:
                waiting.append((f, d))
            elif self.on_complete is not OnComplete.KEEP:
                self._complete(f)
        self.finishing = waiting

    def _complete(self, f: Found) -> None:
        try:
            st = os.stat(f.path)
        except OSError:
            return
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != (f.dev, f.ino, f.size, f.mtime_ns):
            return  # changed since the scan: the next scan looks again
        if self.on_complete is OnComplete.DELETE:
            os.unlink(f.path)
        elif not os.path.exists(f.path + COMPLETED_SUFFIX):
            os.rename(f.path, f.path + COMPLETED_SUFFIX)
        else:
            return
        self.completed.append({"name": f.name, "action": str(self.on_complete)})


def _lost_text(lost: list[dict]) -> str:
    names = ", ".join(f"{x['name']} ({x['unread_bytes']} bytes unread)" for x in lost[:5])
    return f"{len(lost)} file{'s' if len(lost) > 1 else ''} ({names}{' …' if len(lost) > 5 else ''}) were"
