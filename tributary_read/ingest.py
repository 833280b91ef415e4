"""Exactly-once ingest of a newline-delimited source into a table.

A record's offset is its 0-based line number. Every commit carries
``{source: last offset included}`` for the app id, in the same atomic manifest
as the files, so a restart resumes from the table alone: whatever instant the
previous run died at, its uncommitted files are simply never referenced.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from .errors import BadRecordError, InvalidInputError
from .log import AppState
from .manifest import Transaction
from .table import RollPolicy, Table
from .writer import TableWriter, roll_forward

ON_BAD_RECORD = ("dead-letter", "fail")


@dataclass(frozen=True)
class TimeSpec:
    """Where a record's event time comes from; neither field set = arrival time."""

    field: str | None = None
    regex: str | None = None
    format: str | None = None  # strptime pattern; default: ISO-8601 or epoch s/ms

    def extractor(self, tz) -> Callable[[bytes, object], int]:
        """Return ``f(line, parsed_json_or_None) -> epoch ms``; raises ValueError."""
        if self.field and self.regex:
            raise InvalidInputError("give --time-field or --time-regex, not both")
        fmt = self.format
        if self.field:
            keys = self.field.split(".")

            def from_field(line, doc):
                v = doc
                for k in keys:
                    if not isinstance(v, dict) or k not in v:
                        raise ValueError(f"no time field {self.field!r}")
                    v = v[k]
                return parse_time(v, tz, fmt)
            return from_field
        if self.regex:
            try:
                rx = re.compile(self.regex.encode())
            except re.error as e:
                raise InvalidInputError(f"bad --time-regex: {e}") from None
            if rx.groups < 1:
                raise InvalidInputError("--time-regex needs a capturing group around the time")

            def from_regex(line, doc):
                m = rx.search(line)
                if not m:
                    raise ValueError("time regex does not match")
                return parse_time(m.group("ts") if "ts" in rx.groupindex else m.group(1), tz, fmt)
            return from_regex
        return lambda line, doc: int(time.time() * 1000)


def parse_time(v, tz, fmt: str | None = None) -> int:
    """Epoch ms from an ISO-8601 string, epoch seconds or epoch milliseconds.

    Numbers below 1e11 are seconds (1e11 s is the year 5138; 1e11 ms is 1973),
    so both encodings of any real log timestamp are told apart. Naive times are
    read in the table's time zone, as the directory names are.
    """
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, bool) or v is None:
        raise ValueError(f"bad time value {v!r}")
    if isinstance(v, str) and fmt is None and re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", v.strip()):
        v = float(v)
    if isinstance(v, (int, float)):
        return int(v) if abs(v) >= 1e11 else int(v * 1000)
    if not isinstance(v, str):
        raise ValueError(f"bad time value {v!r}")
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

    def to_json(self) -> dict:
        return self.__dict__.copy()


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
    time_spec: TimeSpec = TimeSpec(),
    commit_every: int = 10_000,
    protocol: str | None = None,
    roll: RollPolicy | None = None,
    on_bad_record: str = "dead-letter",
    source_name: str | None = None,
    progress: Callable[[int], None] | None = None,
    on_commit: Callable[[object], None] | None = None,
) -> IngestResult:
    """Append the records of ``source`` not yet committed for ``app_id``.

    Args:
        source_name: the key of this source in the transaction's offsets;
            defaults to the file's base name so a moved file keeps its offsets.
        progress: called with the number of source bytes consumed since the last call.
        on_commit: called with each Commit (partition-commit hooks).
    """
    if commit_every < 1:
        raise InvalidInputError("--commit-every must be >= 1")
    if on_bad_record not in ON_BAD_RECORD:
        raise InvalidInputError(f"--on-bad-record must be one of {', '.join(ON_BAD_RECORD)}")
    if not app_id or any(c.isspace() for c in app_id):
        raise InvalidInputError("--app-id must be a non-empty word")
    if not os.path.isfile(source):
        raise InvalidInputError(f"source {source} is not a readable file")
    name = source_name or os.path.basename(source)
    extract = time_spec.extractor(table.layout.tz)
    needs_json = bool(time_spec.field) or table.config.format == "parquet"
    as_rows = table.config.format == "parquet"

    # One consistent view: the app's last transaction and the version it was read at.
    state = table.log.state()
    app = state.apps.get(app_id)
    rolled = 0
    if app is not None:
        last = table.log.read_commit(app.version)
        rolled = len(roll_forward(table, last.files)) if last else 0
    last_offset = app.transaction.offsets.get(name, -1) if app else -1
    start = last_offset + 1
    pos = (app.transaction.meta.get("positions", {}).get(name) if app else None)

    writer = TableWriter(table, protocol=protocol, roll=roll)
    base = state.version
    offset = read = dead = commits = 0
    try:
        with open(source, "rb") as src:
            offset = _seek(src, start, pos)
            pending = unreported = 0
            for raw in src:
                line = raw[:-1] if raw.endswith(b"\n") else raw
                if line.endswith(b"\r"):
                    line = line[:-1]
                try:
                    doc = json.loads(line) if needs_json else None
                    ts = extract(line, doc)
                except (ValueError, TypeError, OverflowError) as e:
                    reason = str(e) if not isinstance(e, json.JSONDecodeError) else "not valid JSON"
                    if on_bad_record == "fail":
                        raise BadRecordError(f"{name} line {offset}: {reason}") from None
                    writer.write_dead_letter(line, offset, reason)
                    dead += 1
                else:
                    writer.write(doc if as_rows and isinstance(doc, dict) else line, ts)
                offset += 1
                read += 1
                pending += 1
                if progress:
                    unreported += len(raw)
                    if unreported >= 1 << 20:  # a TTY redraw per record would dominate
                        progress(unreported)
                        unreported = 0
                if pending >= commit_every:
                    base = _commit(writer, app_id, name, offset - 1, src.tell(), base, on_commit)
                    commits += 1
                    pending = 0
            if pending:
                base = _commit(writer, app_id, name, offset - 1, src.tell(), base, on_commit)
                commits += 1
            if progress and unreported:
                progress(unreported)
    except BaseException:
        writer.abort()
        raise
    return IngestResult(app_id, name, start, offset - 1 if read else last_offset, read, dead, commits, rolled)


def _seek(src, start: int, pos: int | None) -> int:
    """Position ``src`` at line ``start``; a byte position from the log skips the scan."""
    if start == 0:
        return 0
    if isinstance(pos, int) and 0 < pos <= os.fstat(src.fileno()).st_size:
        src.seek(pos - 1)
        if src.read(1) == b"\n":  # still the same file up to that point
            return start
        src.seek(0)
    n = 0
    while n < start:
        if not src.readline():
            raise InvalidInputError(
                f"source has only {n} lines but offsets say {start} were already committed"
            )
        n += 1
    return start


def _commit(writer: TableWriter, app_id, name, last_offset, pos, base, on_commit) -> int:
    txn = Transaction(app_id, {name: last_offset}, {"positions": {name: pos}})
    commit = writer.commit(txn, base_version=base)
    if on_commit:
        on_commit(commit)
    return commit.version
