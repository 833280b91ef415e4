"""A source line into the table: one owner for every line source (a file, a spool directory).

Parsing a line, finding its event time, writing it to its partition, and
keeping it as a dead letter when it cannot be placed are one rule, applied
the same way whichever source the line came from; :class:`LineRecords` is it.
The bad-record policy and limit live here too, shared with the Kafka source: one rule for
when a run's dead letters are a flood, whichever source they came from.
"""

from __future__ import annotations

import json
import re
from typing import Callable

from tributary_read.choice import Choice
from tributary_read.errors import BadRecordError, SchemaConflictError, TimeOutOfRangeError, TimeUnitError
from tributary_read.write.json_batch import JsonBatch, LineBatch
from tributary_read.write.writer import TableWriter


class OnBadRecord(Choice):
    """What ingest does with a record it cannot place: write it to the dead-letter file, or stop."""

    DEAD_LETTER = "dead-letter"
    FAIL = "fail"


#: Bad records any run may keep as dead letters, whatever its size (see :class:`BadRecordLimit`).
ALLOWANCE = 10


class BadRecordLimit:
    """Counts a run's bad records and refuses a commit once they are a flood.

    A run is refused when its bad records are **both** more than :data:`ALLOWANCE` and over
    ``limit`` as a share of every record it has read so far. A fraction alone judges a small run
    by one record: one odd message in an hourly run of 51 is 2%, so a 1% limit failed every run of a
    quiet topic until someone raised it, while the same message in a run of 10,000 went through.
    The allowance lets such a handful through (as dead letters, with a warning: :func:`bad_records_warning`),
    and a flood still stops: past the allowance the fraction rules, and a run where every record is
    bad fails whatever the limit, since that is a wrong option (a misspelt field), not bad data.
    ``limit`` 0 allows no bad record at all (no allowance); None: no limit.

    Checked before each commit on the run's counts: a run's first commit is judged on its first
    batch, and a run that crosses the limit later keeps its earlier commits (each under the limit
    when it was made). Nothing of a refused batch is committed, so a rerun reads it again.
    """

    def __init__(self, limit: float | None, source: str, unit: str = "line", allowance: int = ALLOWANCE):
        self.limit = limit
        self.allowance = allowance if limit else 0
        self.source = source
        self.unit = unit  # what an offset counts: a file's lines, a Kafka partition's offsets
        self.bad = 0
        self.first: tuple[int, str] | None = None  # (offset, reason) of the run's first bad record
        self.first_at = ""  # where that offset counts, when the source has several (a Kafka partition)
        self._first_kind = ""
        self.alike = 0  # bad records with the first one's kind of reason

    def add(self, offset: int, reason: str, at: str = "") -> None:
        self.bad += 1
        kind = reason_kind(reason)
        if self.first is None:
            self.first, self._first_kind, self.first_at = (offset, reason), kind, at
        if kind == self._first_kind:
            self.alike += 1

    def over(self, read: int) -> bool:
        """Whether ``read`` records, with this run's bad ones, are over the limit."""
        if self.limit is None or not self.bad or not read:
            return False
        return self.bad == read or (self.bad > self.allowance and self.bad / read > self.limit)

    def check(self, read: int, commits: int, last_committed: int) -> None:
        """Raise BadRecordError when ``read`` records hold too many bad ones (nothing of the batch is committed)."""
        if not self.over(read):
            return
        share = self.bad / read
        upto = f" (up to {self.unit} {last_committed})" if last_committed >= 0 else ""
        kept = f"this run's {commits} earlier commits{upto} stand, nothing after" if commits else "nothing was committed"
        if self.bad == read:
            over, out = "every record is bad", "keep them all as dead letters (on-bad-record dead-letter)"
        else:
            over, out = f"over the max bad fraction {self.limit:g}", "raise that limit"
            if self.allowance:
                over += f" and more than the {self.allowance} bad records any run may keep"
        raise BadRecordError(
            f"{self.source}: {self.bad} of {read} records ({share:.1%}) cannot be placed, {over}; first: "
            f"{self._first()} ({self.alike} records like it); {kept}. Fix the input or the time "
            f"options and rerun, or {out}",
            max_bad_fraction="the max bad fraction", on_bad_record="on-bad-record dead-letter")

    def _first(self) -> str:
        assert self.first is not None
        offset, reason = self.first
        return f"{self.first_at + ' ' if self.first_at else ''}{self.unit} {offset}: {reason}"

    def report(self, read: int) -> dict | None:
        """The run's bad records for its JSON result (None: there were none)."""
        if not self.bad:
            return None
        offset, reason = self.first or (-1, "")
        return {"bad": self.bad, "read": read, "share": round(self.bad / read, 6) if read else None,
                "max_bad_fraction": self.limit, "allowance": self.allowance, "unit": self.unit,
                "over_fraction": self.limit is not None and self.bad / max(read, 1) > self.limit,
                "first": {**({"at": self.first_at} if self.first_at else {}), "offset": offset,
                          "reason": reason, "alike": self.alike}}


def bad_records_warning(report: dict) -> str:
    """One line for stderr from a run's :meth:`BadRecordLimit.report`: how many records went to dead
    letters, the first one, and, when only the allowance let them through, that the share was over the limit."""
    first = report["first"]
    at = f"{first['at']} " if first.get("at") else ""
    text = (f"{report['bad']} of {report['read']} records ({report['bad'] / max(report['read'], 1):.1%}) could "
            f"not be placed and went to dead letters; first: {at}{report.get('unit', 'line')} {first['offset']}: "
            f"{first['reason']} ({first['alike']} records like it)")
    if report.get("over_fraction"):
        n = report["allowance"]
        text += (f"; over the max bad fraction {report['max_bad_fraction']:g}, kept because a run may keep "
                 f"{n} bad records (more than {n} and over that fraction stops a run)")
    return text


def reason_kind(reason: str) -> str:
    """A reason without its values (quoted text, numbers): records failing the same way count as alike."""
    return re.sub(r"'[^']*'|\"[^\"]*\"|[0-9]+", "_", reason)


def bad_record_reason(e: Exception) -> str:
    """Why a record is bad, in one short line (a decoder's message can be long and cryptic)."""
    if isinstance(e, json.JSONDecodeError):
        return "not valid JSON"
    if isinstance(e, UnicodeDecodeError):
        # json detects UTF-16/32 from the first bytes, so name the codec it tried.
        return f"not valid {e.encoding.upper()} (byte {e.object[e.start]:#04x} at position {e.start})"
    if isinstance(e, RecursionError):
        return "JSON nested too deeply"
    return str(e)


def no_lone_surrogates(raw: bytes, doc) -> None:
    """ValueError if a string of ``doc`` (parsed from ``raw``) holds a lone surrogate: JSON lets an escape
    (``"\\ud800"``) name half a UTF-16 pair, and ``json.loads`` takes its UTF-8 form (bytes ED A0 80) too,
    but it is no character, so no UTF-8 text (a Parquet string) can hold it. Left in, it failed the whole
    file when it was encoded, at every rerun. Only a line with an escape or an ED byte can hold one."""
    if b"\\u" not in raw and b"\xed" not in raw:
        return
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"a lone surrogate \\u{ord(e.object[e.start]):04x} in a string: no text can hold it") from None


class LineRecords:
    """Writes source lines as records of the table, or as dead letters.

    ``extract(line, doc)``: the record's event time in epoch ms (a TimeSpec's
    extractor). ``unwrap``: turns a source line into the record first (dead-letter
    replay). The caller checks ``limit`` before each commit.
    """

    #: Fewer lines than this are taken one by one: a bulk parse has a fixed cost.
    MIN_BATCH = 64
    #: take_many's lines go in windows of this many; each spends at most TRIES bulk parses.
    WINDOW, TRIES = 4096, 24

    def __init__(self, table, writer: TableWriter, extract: Callable[[bytes, object], int], needs_json: bool,
                 on_bad_record: OnBadRecord, limit: BadRecordLimit,
                 unwrap: Callable[[bytes], bytes] | None = None,
                 field_time: tuple[tuple[str, ...], Callable[[object], int]] | None = None):
        """``field_time``: the time field's path and value rule (TimeSpec.field_time); with it, a
        Parquet or jsonl table's lines are parsed in bulk (:meth:`take_many`)."""
        self.writer, self.extract, self.unwrap = writer, extract, unwrap
        self.needs_json = needs_json or table.config.format == "parquet"
        self.as_rows = table.config.format == "parquet"
        self.fail = on_bad_record is OnBadRecord.FAIL
        self.limit = limit
        self.dead = 0
        self.bulk = 0  # lines taken in bulk (the rest one by one)
        self.batch: JsonBatch | LineBatch | None = None
        if field_time is not None and unwrap is None:
            if self.as_rows:
                self.batch = JsonBatch(writer, field_time)
            elif table.config.format == "jsonl":
                self.batch = LineBatch(writer, field_time)

    def take_many(self, lines: list[bytes], offset: int, source: str) -> None:
        """:meth:`take` each of ``lines`` (offsets from ``offset`` on); the same records, files and dead
        letters, written in bulk where :class:`JsonBatch` can (:func:`take_in_bulk`)."""
        take = self.take
        self.bulk += take_in_bulk(self.batch, lines, lambda j: take(lines[j], offset + j, source))

    def take(self, line: bytes, offset: int, source: str) -> None:
        """Write ``line`` (without its newline), ``offset`` of ``source``: a record, or a dead letter."""
        reason = None
        try:
            if self.unwrap is not None:
                line = self.unwrap(line)
            doc = json.loads(line) if self.needs_json else None
            if self.as_rows:
                no_lone_surrogates(line, doc)
            ts = self.extract(line, doc)
        except TimeUnitError as e:  # the job's unit is wrong, not this record: stop the run
            raise TimeUnitError(f"{source} line {offset}: {e}") from None
        except (ValueError, TypeError, OverflowError, RecursionError) as e:
            reason = bad_record_reason(e)
        else:
            try:
                self.writer.write(doc if self.as_rows and isinstance(doc, dict) else line, ts)
                return
            except (TimeOutOfRangeError, SchemaConflictError) as e:  # raised before anything was written
                reason = str(e)
        if self.fail:
            raise BadRecordError(f"{source} line {offset}: {reason}") from None
        self.writer.write_dead_letter(line, offset, reason, source)
        self.limit.add(offset, reason)
        self.dead += 1


def take_in_bulk(batch: JsonBatch | LineBatch | None, lines: list[bytes], take_at: Callable[[int], None],
                 on_bulk: Callable[[int, list[int]], None] | None = None) -> int:
    """Write ``lines`` in bulk where ``batch`` can, and ``take_at(j)`` each other line ``j`` one by one (its
    record or dead letter); returns how many went in bulk. The one rule of every line source (a file, a
    spool, Kafka values). An odd line is found by the row Arrow names, or by halving the run; a window of
    lines spends at most TRIES bulk parses, then goes one by one. ``on_bulk(start, times)``: lines
    ``start``.. were written in bulk, with these event times (ms)."""
    window_n, tries, min_batch = LineRecords.WINDOW, LineRecords.TRIES, LineRecords.MIN_BATCH
    bulk = 0
    for w in range(0, len(lines), window_n):
        window = lines[w:w + window_n]
        i, size, budget = 0, len(window), tries if batch is not None else 0
        while i < len(window):
            n = min(size, len(window) - i)
            if batch is not None and n >= min_batch and budget > 0:
                budget -= 1
                took, alone = batch.write(window[i:i + n], min_batch)
                if took and on_bulk is not None:
                    on_bulk(w + i, batch.times)
                bulk += took
                i += took
                if alone is None:  # it cannot tell which line: a shorter run
                    size = n // 2
                    continue
                end = min(len(window), i + alone)
            else:
                end = len(window) if budget <= 0 else i + n
            size = len(window)
            for j in range(i, end):
                take_at(w + j)
            i = end
    return bulk
