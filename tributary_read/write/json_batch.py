"""Many JSON lines into Arrow in one call, typed exactly as record-by-record admission would type them.

Parsing a line with ``json.loads`` and converting the dicts to Arrow was most of
a Parquet ingest's cost; Arrow's JSON reader does both in C++. It is only a
shortcut: whenever its result could differ from what the per-record rules
(:mod:`tributary_read.io.parquet_schema`) would give, :meth:`JsonBatch.parse`
answers None and the caller takes the lines one by one, with their dead letters
and offsets. So it never decides anything itself; it declines.

What it guards against:

* **Line boundaries.** Each line is parsed as ``{"v": LINE}``, so a blank line,
  two objects on one line or a line that is not one JSON value fails the parse
  instead of shifting the rows; the row count must equal the line count.
* **Non-objects and nulls** (a line ``5`` or ``null``): the per-record path
  decides what they become.
* **Strings Arrow reads as timestamps** (``"2024-01-01"``): those fields are
  parsed again as strings, and remembered; their column order is the order in
  which the first line names them (Arrow puts declared fields first).
* **What an Arrow array cannot tell**: see :func:`parsed_type`.

A line the shortcut cannot take does not cost its whole run: where Arrow names
the row (a parse error, a null, a bad time), the lines before it are written in
bulk, it is taken alone, and the bulk parse goes on after it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa
import pyarrow.json as pj

from tributary_read.errors import TributaryError
from tributary_read.io.parquet_schema import parsed_type
from tributary_read.write.writer import TableWriter

_OPEN, _SEP, _CLOSE = b'{"v":', b'}\n{"v":', b"}\n"


_ROW = re.compile(r"in row (\d+)")


@dataclass(frozen=True)
class Cut:
    """Write the lines before ``at`` in bulk, then go on from ``at`` (nothing is wrong with it)."""

    at: int


class JsonBatch:
    """Writes runs of JSON lines of one source in bulk; remembers the fields that must be read as strings.

    ``field_time``: the time field's path and value rule (``TimeSpec.field_time``).
    """

    def __init__(self, writer: TableWriter, field_time: tuple[tuple[str, ...], Callable[[object], int]]):
        self.writer = writer
        self.keys, self.value_ms = field_time
        self._strings: dict[str, None] = {}  # top-level fields Arrow would take for timestamps, in first-seen order
        self._options = pj.ParseOptions()
        self.times: list[int] = []  # the event times of the lines the last write() wrote in bulk

    def write(self, lines: list[bytes], min_run: int) -> tuple[int, int | None]:
        """Write a leading run of ``lines`` in bulk: (how many, then how many to take one by one before
        trying again; None: all the rest). (len(lines), 0) when all were written."""
        got = self._whole(lines)
        if got is True:
            return len(lines), 0
        if got is None or got is False:
            return 0, None
        at, alone = (got.at, 0) if isinstance(got, Cut) else (got, 1)
        if at < min_run:  # near the start: those lines one by one, then again
            return 0, at + alone
        return (at, alone) if self._whole(lines[:at]) is True else (0, None)

    def _whole(self, lines: list[bytes]) -> bool | int | Cut | None:
        """True: all of ``lines`` written; False: the writer declined them; else :meth:`parse`'s answer (or
        the first row without a time), and nothing written."""
        got = self.parse(lines)
        if not isinstance(got, tuple):
            return got
        rows, types = got
        ts = self._times(rows)
        if not isinstance(ts, list):
            return ts
        done = self._write(lines, rows, types, ts)
        if done:
            self.times = ts
        return done

    def parse(self, lines: list[bytes]) -> tuple[pa.StructArray, dict] | int | Cut | None:
        """One row per line and each column's type (:func:`parsed_type`); else the index of the first line
        that stopped it, a Cut, or None when that is not known."""
        arr = self._read(lines)
        if not isinstance(arr, pa.StructArray):
            return arr
        t = arr.type
        if not t.num_fields:  # only empty objects: the per-record path's rule 4
            return None
        odd = [t.field(i).name for i in range(t.num_fields)
               if pa.types.is_timestamp(t.field(i).type) or pa.types.is_date(t.field(i).type)]
        if odd:
            for name in odd:
                self._strings[name] = None
            schema = pa.schema([("v", pa.struct([(n, pa.string()) for n in self._strings]))])
            self._options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")
            arr = self._read(lines)
            if not isinstance(arr, pa.StructArray):
                return arr
        if self._strings:
            arr = self._first_seen(arr, lines)
            if not isinstance(arr, pa.StructArray):
                return arr
        types = {}
        for i in range(arr.type.num_fields):
            ct = parsed_type(arr.field(i))
            if ct is None:
                return None
            types[arr.type.field(i).name] = ct
        return arr, types

    def _read(self, lines: list[bytes]) -> pa.StructArray | int | None:
        return read_values(lines, self._options)

    def _first_seen(self, arr: pa.StructArray, lines: list[bytes]) -> pa.StructArray | Cut | None:
        """``arr`` with its fields in first-seen order, when declared (string) fields put them out of it.

        Arrow puts declared fields first, and gives one that no line has as nulls no
        record gave: such a field is dropped (its name is in no line). One that the first
        line does not name has an unknown place: the run is cut before the line naming it.
        """
        try:
            doc = json.loads(lines[0])
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        t = arr.type
        names = [t.field(i).name for i in range(t.num_fields)]
        for name in self._strings:
            if name in doc or name not in names:
                continue
            key = json.dumps(name).encode()
            at = next((i for i, line in enumerate(lines[1:], 1) if key in line), None)
            if at is not None:
                return Cut(at)
            if arr.field(name).null_count != len(arr):  # named otherwise (an escape): no guess
                return None
            names.remove(name)
        order = [n for n in doc if n in names] + [n for n in names if n not in doc]
        if order == [t.field(i).name for i in range(t.num_fields)]:
            return arr
        return pa.StructArray.from_arrays([arr.field(n) for n in order], names=order)

    def _times(self, rows: pa.StructArray) -> list[int] | int | None:
        """Each row's event time by the field's one rule; else the first row without one, or None."""
        col = rows
        for k in self.keys:
            if not pa.types.is_struct(col.type) or col.type.get_field_index(k) < 0:
                return None
            col = col.field(k)
            if col.null_count:
                return _first_null(col)
        if not (pa.types.is_string(col.type) or pa.types.is_int64(col.type)):  # a double may have been 5 (int)
            return None
        value_ms, out = self.value_ms, []
        for i, v in enumerate(col.to_pylist()):
            try:
                out.append(value_ms(v))
            except Exception:  # noqa: BLE001 - whatever it is, the record-by-record path says it, with the offset
                return i
        return out

    def _write(self, lines: list[bytes], rows: pa.StructArray, types: dict, ts: list[int]) -> bool:
        try:
            parts = self.writer.partition_rows(ts)
        except (ValueError, OverflowError, OSError, TributaryError):  # a time no partition holds: one by one
            return False
        if len(parts) == 1:
            return self.writer.write_parsed([(parts[0][0], rows, types)])
        groups = []
        for part, idx in parts:  # each partition's lines parsed apart: their types are theirs alone
            assert idx is not None
            sub = self.parse([lines[i] for i in idx])
            if not isinstance(sub, tuple):
                return False
            groups.append((part, *sub))
        return self.writer.write_parsed(groups)


def read_values(lines: list[bytes], options: pj.ParseOptions) -> pa.StructArray | int | None:
    """Each line parsed as the value ``v`` of one row (``options`` declare what Arrow keeps of it); else the
    index of the first line the per-record path must judge, or None when Arrow names none."""
    blob = _OPEN + _SEP.join(lines) + _CLOSE
    odd = _odd_line(lines, blob)
    if odd is not None:
        return odd
    try:  # Arrow stores a string's bytes unchecked, where json.loads refuses them
        blob.decode("utf-8")
    except UnicodeDecodeError:
        return next((i for i, line in enumerate(lines) if not _utf8(line)), None)
    try:  # one block, so that the row an error names is the line's index
        table = pj.read_json(pa.BufferReader(blob), read_options=pj.ReadOptions(block_size=len(blob) + 1),
                             parse_options=options)
    except (pa.ArrowException, ValueError) as e:  # a line the per-record path must judge
        m = _ROW.search(str(e))
        return int(m.group(1)) if m and int(m.group(1)) < len(lines) else None
    if table.num_rows != len(lines) or table.num_columns != 1 or not pa.types.is_struct(table.schema[0].type):
        return None  # a line of two objects (no row named)
    arr = table.column(0).combine_chunks()
    return _first_null(arr) if arr.null_count else arr  # a line ``null``


#: A line this long may nest deeper than ``json.loads`` takes (it refuses about 1,000 levels; Arrow takes
#: any): one with :data:`DEEP_OPENERS` brackets or more is judged one by one.
DEEP_BYTES, DEEP_OPENERS = 800, 400


def _odd_line(lines: list[bytes], blob: bytes) -> int | None:
    """The first line the bulk parse could read otherwise than ``json.loads``: one holding a line break
    (the blob's rows are lines; a Kafka value may hold one) or nested possibly too deep for it."""
    odd = None
    if max(map(len, lines), default=0) >= DEEP_BYTES:
        odd = next((i for i, line in enumerate(lines)
                    if len(line) >= DEEP_BYTES and line.count(b"[") + line.count(b"{") >= DEEP_OPENERS), None)
    if blob.count(b"\n") != len(lines) or b"\r" in blob:  # the blob's own: one after each line
        brk = next(i for i, line in enumerate(lines) if b"\n" in line or b"\r" in line)
        odd = brk if odd is None else min(odd, brk)
    return odd


class LineBatch:
    """JSON lines of a ``jsonl`` table written in bulk, as they are: Arrow checks that each line is one JSON
    value and reads its time field (the other fields are parsed, not kept). Like :class:`JsonBatch` a
    shortcut that declines: a line without a time Arrow can read, or one Arrow may read otherwise
    than ``json.loads`` (:func:`read_values`), is the per-record path's to judge.

    The time field is declared a string or an integer, as the run's first line has it: a run whose
    lines differ is cut at the first that does.
    """

    def __init__(self, writer: TableWriter, field_time: tuple[tuple[str, ...], Callable[[object], int]]):
        self.writer = writer
        self.keys, self.value_ms = field_time
        self.times: list[int] = []  # the event times of the lines the last write() wrote in bulk
        self._options = {kind: self._declared(kind) for kind in (pa.int64(), pa.string())}

    def _declared(self, kind: pa.DataType) -> pj.ParseOptions:
        t = kind
        for k in reversed(self.keys):
            t = pa.struct([(k, t)])
        return pj.ParseOptions(explicit_schema=pa.schema([("v", t)]), unexpected_field_behavior="ignore")

    def write(self, lines: list[bytes], min_run: int) -> tuple[int, int | None]:
        """As :meth:`JsonBatch.write`: (lines written in bulk, then how many to take one by one)."""
        got = self._whole(lines)
        if got is True:
            return len(lines), 0
        if got is None or got is False:
            return 0, None
        if got < min_run:
            return 0, got + 1
        return (got, 1) if self._whole(lines[:got]) is True else (0, None)

    def _whole(self, lines: list[bytes]) -> bool | int | None:
        try:
            first = json.loads(lines[0])
            for k in self.keys:
                first = first[k]
        except Exception:  # noqa: BLE001 - whatever it is, the per-record path says it
            return 0
        arr = read_values(lines, self._options[pa.string() if isinstance(first, str) else pa.int64()])
        if not isinstance(arr, pa.StructArray):
            return arr
        col: pa.Array = arr
        for k in self.keys:
            col = col.field(k)
        if col.null_count:
            return _first_null(col)
        value_ms, ts = self.value_ms, []
        for i, v in enumerate(col.to_pylist()):
            try:
                ts.append(value_ms(v))
            except Exception:  # noqa: BLE001 - the record-by-record path says it, with the offset
                return i
        try:
            done = self.writer.write_lines(lines, ts)
        except (ValueError, OverflowError, OSError, TributaryError):  # a time no partition holds: one by one
            return False
        if done:
            self.times = ts
        return done


def _first_null(arr: pa.Array) -> int:
    return arr.is_null().to_pylist().index(True)


def _utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
