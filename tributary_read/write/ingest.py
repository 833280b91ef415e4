"""Exactly-once ingest of a newline-delimited source into a table.

A record's offset is its 0-based line number. Every commit carries
``{source: last offset included}`` for the app id, in the same atomic manifest
as the files, so a restart resumes from the table alone: whatever instant the
previous run died at, its uncommitted files are simply never referenced.
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterator

from tributary_read.faults import crash_point
from tributary_read.errors import InvalidInputError
from tributary_read.table.state import AppState
from tributary_read.table.manifest import Transaction
from tributary_read.write.sources import SourceOffsets
from tributary_read.table.config import RollPolicy, Table
from tributary_read.table.renames import roll_forward
from tributary_read.table.timeunit import IntegerTimes
from tributary_read.timespec import iso
from tributary_read.write.lines import BadRecordLimit, LineRecords, OnBadRecord
from tributary_read.write.writer import TableWriter


#: The refusal of a run with no time source. Every table is partitioned by time, and
#: arrival time used to be the silent default: a backlog stamped last year landed in
#: today's partition and became "current" data for every hourly job downstream.
NO_TIME_SOURCE = ("no time source: records are filed by time, so give a time field (the JSON field of "
                  "the event time), a time regex, or arrival time (file each record under the time it "
                  "is ingested)")


@dataclass(frozen=True)
class TimeSpec:
    """Where a record's event time comes from: exactly one of a field, a regex, or arrival.

    ``arrival`` must be said: it files a record under the time it is ingested,
    which is right for a live feed and silently wrong for a backlog.
    ``integers``: the unit of integer times and their plausibility check
    (:mod:`tributary_read.table.timeunit`); by default ms, refused when implausible.
    """

    field: str | None = None
    regex: str | None = None
    format: str | None = None  # strptime pattern; default: ISO-8601 or an integer of ``integers.unit``
    integers: IntegerTimes = IntegerTimes()
    arrival: bool = False

    def check(self) -> None:
        """Refuse no time source, or two (InvalidInputError, before anything is read)."""
        words = dict(time_field="a time field", time_regex="a time regex", arrival_time="arrival time")
        given = [w for w, on in (("a time field", self.field), ("a time regex", self.regex),
                                 ("arrival time", self.arrival)) if on]
        if not given:
            raise InvalidInputError(NO_TIME_SOURCE, **words)
        if len(given) > 1:
            raise InvalidInputError(f"give one time source, not {' and '.join(given)}",
                                    **{k: v for k, v in words.items() if v in given})
        if self.arrival and (self.format or self.integers.unit is not None or self.integers.allow_any):
            raise InvalidInputError("arrival time parses no time: drop the time format and unit settings",
                                    arrival_time="arrival time")

    def extractor(self, tz) -> Callable[[bytes, object], int]:
        """Return ``f(line, parsed_json_or_None) -> epoch ms``; raises ValueError."""
        self.check()
        fmt = self.format
        field = self.field_time(tz)
        if field is not None:
            keys, value_ms = field

            def from_field(line, doc):
                v = doc
                for k in keys:
                    if not isinstance(v, dict) or k not in v:
                        raise ValueError(f"no time field {self.field!r}")
                    v = v[k]
                return value_ms(v)
            return from_field
        if self.regex:
            try:
                rx = re.compile(self.regex.encode())
            except re.error as e:
                raise InvalidInputError(f"bad time regex: {e}", time_regex="time regex") from None
            if rx.groups < 1:
                raise InvalidInputError("the time regex needs a capturing group around the time",
                                        time_regex="the time regex")

            def from_regex(line, doc):
                m = rx.search(line)
                if not m:
                    raise ValueError("time regex does not match")
                return parse_time(m.group("ts") if "ts" in rx.groupindex else m.group(1), tz, fmt, self.integers,
                                  "time regex match")
            return from_regex
        return lambda line, doc: int(time.time() * 1000)

    def field_time(self, tz) -> tuple[tuple[str, ...], Callable[[object], int]] | None:
        """The time field's path and ``f(value) -> epoch ms``, or None without a time field: the one rule for a
        field's value, shared by the per-record extractor and a JSON batch's time column."""
        if not self.field:
            return None
        fmt, integers, subject = self.format, self.integers, f"time field {self.field}"
        return tuple(self.field.split(".")), lambda v: parse_time(v, tz, fmt, integers, subject)


def parse_time(v, tz, fmt: str | None = None, integers: IntegerTimes = IntegerTimes(),
               subject: str = "time") -> int:
    """Epoch ms from an ISO-8601 string (or ``fmt``), or a number in ``integers.unit``.

    A number's unit is declared, never guessed from its size: the one owner of
    units and of the plausibility check is :class:`IntegerTimes` (an implausible
    number raises ImplausibleTimeError, a bad record, or TimeUnitError when no
    unit was declared and another fits). Naive times are read in the table's
    time zone, as the directory names are.

    NaN and infinities (JSON parsers accept them) are bad values. Huge finite
    numbers parse; whether a partition can hold them is the layout's one range
    check (TimeOutOfRangeError), so every "cannot be placed" ends the same way.
    """
    if type(v) is int:  # the usual epoch integer, straight to its one check (a bool is not int here)
        return integers.to_ms(v, subject)
    if type(v) is str and fmt is None:  # the usual ISO-8601 string: no regex unless it could be a number
        s = v.strip()
        if not (s.isdigit() or s[:1] == "-" or s.replace(".", "", 1).isdigit()):
            try:
                dt = datetime.fromisoformat(s)
            except ValueError:
                raise ValueError(f"unparsable time {v[:40]!r}") from None
            return int((dt if dt.tzinfo is not None else dt.replace(tzinfo=tz)).timestamp() * 1000)
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, bool) or v is None:
        raise ValueError(f"bad time value {v!r}")
    if isinstance(v, str) and fmt is None and re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", v.strip()):
        v = float(v) if "." in v else int(v)  # an int keeps every digit of epoch ns
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"time value {v!r} is not a finite number")
    if isinstance(v, (int, float)):
        return integers.to_ms(v, subject)
    if not isinstance(v, str):
        raise ValueError(f"bad time value {v!r}"[:80])
    try:
        dt = datetime.strptime(v, fmt) if fmt else datetime.fromisoformat(v.strip())
    except ValueError:
        raise ValueError(f"unparsable time {v[:40]!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz)
    return int(dt.timestamp() * 1000)


@dataclass(frozen=True)
class IngestResult:
    app_id: str
    source: str
    start_offset: int
    last_offset: int  # -1 when nothing was ever committed
    records: int  # records read by this run
    dead_letters: int
    commits: int
    rolled_forward: int
    stopped_by: str | None = None  # the signal that stopped the run early ("SIGINT"), if any
    # Bytes of a last line with no newline, left for a later run because the file changed
    # within ``final_after_ms`` (0 if none); ``pending_until``: when it counts as complete.
    pending_bytes: int = 0
    pending_until: str | None = None
    #: The last line had no newline and was taken: the file was unchanged for ``final_after_ms`` (or ``final``).
    took_unterminated_line: bool = False
    #: The bad-record limit applied (None: none, every bad record is kept as a dead letter).
    max_bad_fraction: float | None = None
    #: Bytes of the source this run committed: from the end of the last run's records to the end of its own.
    consumed_bytes: int = 0
    #: The run's dead letters against the bad-record limit (``BadRecordLimit.report``); None: none.
    bad_records: dict | None = None

    def to_json(self) -> dict:
        return self.__dict__.copy()


@dataclass(frozen=True)
class IngestStart:
    """Where a run starts, told to ``on_start`` before the first record is read (lineage: the run's id, and
    what a later run needs to tell what a killed one committed: its writer id is on each of its commits)."""

    source: str  # the source's key in the offsets
    start_offset: int
    #: The byte position the run starts at (0 for a new source; None: a log from before positions).
    start_position: int | None
    base_version: int  # the table version the run read its state at
    writer_id: str


class FromTable:
    """The default of a setting the table stores (``max_bad_fraction``): read it from table.json."""

    def __repr__(self) -> str:
        return "FROM_TABLE"


FROM_TABLE = FromTable()


class StopRequest:
    """Set by the first SIGINT/SIGTERM; the ingest polls it between records.

    A flag rather than an exception: an exception can land anywhere, including
    inside a commit in flight, and the first signal must not interrupt that.
    """

    signum: int | None = None
    #: The run is over and reported; later signals change nothing (see ``restore``).
    finished: bool = False


class Interrupted(KeyboardInterrupt):
    """The second signal: stop at once. Safe because nothing deletes the files
    of a commit that was attempted; only the unattempted batch is dropped."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stop_on_signals(signals=(signal.SIGINT, signal.SIGTERM), restore: bool = True) -> Iterator[StopRequest]:
    """First signal: stop at the next safe point (between records, never mid-commit).
    Second signal: raise :class:`Interrupted` wherever the main thread is.

    ``restore=False`` (a process that ends with the run, as ``trib ingest``) keeps the
    handler after the block, ignoring later signals: a second Ctrl-C while the process
    exits would otherwise add a second, contradictory report to the first.
    """
    stop = StopRequest()

    def handler(signum, frame):
        if stop.finished:
            return
        if stop.signum is None:
            stop.signum = signum
        else:
            raise Interrupted(signum)

    # An ignored signal stays ignored (nohup, a background job of a script).
    old = {s: signal.signal(s, handler) for s in signals if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield stop
    finally:
        if restore:
            for s, h in old.items():
                signal.signal(s, h)
        else:
            stop.finished = True


def recover(table: Table, app_id: str) -> tuple[AppState | None, list[str]]:
    """Last committed transaction of ``app_id``, after rolling its staged files forward.

    Only the app's newest commit can hold staged files: a writer finishes the
    renames of one commit before it makes the next.
    """
    app = table.log.last_transaction(app_id)
    if app is None:
        return None, []
    commit = table.log.read_commit(app.version)
    return app, roll_forward(table, commit.files) if commit else []


def ingest(
    table: Table,
    source: str,
    app_id: str,
    *,
    time_spec: TimeSpec,
    commit_every: int = 10_000,
    protocol: str | None = None,
    roll: RollPolicy | None = None,
    on_bad_record: OnBadRecord | str = OnBadRecord.DEAD_LETTER,
    max_bad_fraction: float | None | FromTable = FROM_TABLE,
    source_name: str | None = None,
    final: bool = False,
    final_after_ms: int | None = None,
    unwrap: Callable[[bytes], bytes] | None = None,
    progress: Callable[[int], None] | None = None,
    on_commit: Callable[[object], None] | None = None,
    stop: StopRequest | None = None,
    on_start: Callable[[IngestStart], None] | None = None,
) -> IngestResult:
    """Append the records of ``source`` not yet committed for ``app_id``.

    Args:
        time_spec: where each record's time comes from; required, as arrival time
            (``TimeSpec(arrival=True)``) must be chosen, never fallen into.
        max_bad_fraction: with ``dead-letter``, the share of bad records over which
            the run fails before its next commit (:class:`BadRecordLimit`); None: no
            limit. Default: the table's setting.
        source_name: the key of this source in the transaction's offsets;
            defaults to the file's base name so a moved file keeps its offsets.
            A different file under a known name is refused (SourceMismatchError):
            each commit records a fingerprint of the bytes read, checked on resume.
        final: the producer is done with ``source``: also take a last line that
            has no newline now.
        final_after_ms: take such a line once the file has not changed for this
            long (default: the table's setting). Until then it is a record still
            being written and is left (``pending_bytes``) for the next run.
        unwrap: turns a source line into the record (dead-letter replay); a
            ValueError makes the line a bad record.
        progress: called with the number of source bytes consumed since the last call.
        on_commit: called with each Commit (partition-commit hooks, lineage).
        on_start: called with the :class:`IngestStart` once the run knows where it
            starts, before the source is opened (lineage's START).
        stop: polled after each record; once set, the run commits the records
            read so far and returns (``stopped_by`` names the signal).
    """
    if commit_every < 1:
        raise InvalidInputError("the records per commit must be >= 1", commit_every="the records per commit")
    on_bad_record = OnBadRecord.parse(on_bad_record, "on_bad_record")
    if not app_id or any(c.isspace() for c in app_id):
        raise InvalidInputError("the app id must be a non-empty word", app_id="the app id")
    if not os.path.isfile(source):
        raise InvalidInputError(f"source {source} is not a readable file")
    name = source_name or os.path.basename(source)
    extract = time_spec.extractor(table.layout.tz)
    if isinstance(max_bad_fraction, FromTable):
        max_bad_fraction = table.config.max_bad_fraction
    limit = BadRecordLimit(max_bad_fraction if on_bad_record is OnBadRecord.DEAD_LETTER else None, name)
    settle_ms = table.config.final_after_ms if final_after_ms is None else final_after_ms
    if settle_ms < 0:
        raise InvalidInputError("final-after must be >= 0", final_after="final-after")

    # One consistent view: the app's last transaction and the version it was read at.
    state = table.log.state()
    app = state.apps.get(app_id)
    rolled = 0
    if app is not None:
        last = table.log.read_commit(app.version)
        rolled = len(roll_forward(table, last.files)) if last else 0
    prior = SourceOffsets(app_id, name, app.transaction if app else None)
    last_offset = prior.last_offset
    start = last_offset + 1

    writer = TableWriter(table, protocol=protocol, roll=roll)
    records = LineRecords(table, writer, extract, bool(time_spec.field), on_bad_record, limit, unwrap,
                          field_time=time_spec.field_time(table.layout.tz))
    lines: list[bytes] = []  # read, not yet taken: taken in runs (take_many), always before a commit or a stop

    def take_lines() -> None:
        records.take_many(lines, offset - len(lines), name)
        lines.clear()
    base = state.version
    if on_start is not None:
        on_start(IngestStart(name, start, prior.position, base, writer.writer_id))
    offset = read = commits = partial = first = end = 0
    pending_until = None
    took = False
    try:
        with open(source, "rb") as src:
            end = first = prior.seek(src, source, start)  # byte position after the last whole line read
            offset = start
            pending = unreported = 0
            # The last run took an unterminated last line as complete, and its newline came later:
            # that newline ends the committed record, it is not an empty record of its own.
            newline_owed = end > 0 and os.pread(src.fileno(), 1, end - 1) != b"\n"
            for raw in src:
                if newline_owed:
                    newline_owed = False
                    if raw == b"\n":
                        end += 1
                        continue
                if not raw.endswith(b"\n") and not final:
                    wait = _unsettled_ms(src, end + len(raw), settle_ms)
                    if wait:  # the producer may be mid-line: read it whole next run
                        take_lines()
                        partial = len(raw)
                        pending_until = iso(int(time.time() * 1000) + wait)
                        break
                    took = True
                end += len(raw)
                line = raw[:-1] if raw.endswith(b"\n") else raw
                if line.endswith(b"\r"):
                    line = line[:-1]
                lines.append(line)
                offset += 1
                read += 1
                pending += 1
                if progress:
                    unreported += len(raw)
                    if unreported >= 1 << 20:  # a TTY redraw per record would dominate
                        progress(unreported)
                        unreported = 0
                if len(lines) >= LineRecords.WINDOW:
                    take_lines()
                if pending >= commit_every:
                    take_lines()
                    limit.check(read, commits, offset - 1 - pending)
                    base = _commit(writer, prior.transaction(src, offset - 1, end), base, on_commit)
                    commits += 1
                    pending = 0
                if stop is not None and stop.signum is not None:
                    break  # after a whole record, so ``end`` is still its end
            take_lines()
            if pending:
                limit.check(read, commits, offset - 1 - pending)
                base = _commit(writer, prior.transaction(src, offset - 1, end), base, on_commit)
                commits += 1
            if progress and unreported:
                progress(unreported)
    except BaseException:
        writer.abort()  # deletes only a batch whose commit was never attempted
        raise
    stopped_by = signal.Signals(stop.signum).name if stop is not None and stop.signum is not None else None
    return IngestResult(app_id, name, start, offset - 1 if read else last_offset, read, records.dead, commits, rolled,
                        stopped_by, pending_bytes=partial, pending_until=pending_until,
                        took_unterminated_line=took, max_bad_fraction=limit.limit,
                        consumed_bytes=end - first if commits else 0, bad_records=limit.report(read))


def _unsettled_ms(src, size: int, settle_ms: int) -> int:
    """How much longer an unterminated last line must stay unchanged to count as complete (0: it is).

    Asked after the line was read: a file that grew since, or changed within
    ``settle_ms``, is still being written, and a line cut mid-write would be
    committed as a wrong record for good. An mtime ahead of the clock counts
    as just changed. Limit: a producer that pauses mid-line for longer than
    ``settle_ms`` looks finished; set final-after above its longest pause.
    """
    st = os.fstat(src.fileno())
    if st.st_size != size:
        return max(settle_ms, 1)
    if settle_ms == 0:
        return 0
    age_ms = time.time() * 1000 - st.st_mtime_ns / 1e6
    return 0 if age_ms >= settle_ms else max(1, math.ceil(settle_ms - max(age_ms, 0)))


def _commit(writer: TableWriter, txn: Transaction, base, on_commit) -> int:
    commit = writer.commit(txn, base_version=base)
    assert commit is not None  # with a transaction there is always a commit
    if on_commit:
        on_commit(commit)
    crash_point("ingest.after_commit")
    return commit.version
