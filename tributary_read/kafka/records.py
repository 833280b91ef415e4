"""A Kafka message as the table stores it: the value as a record or a line, its event time, and the
Kafka columns a user asked for (``--kafka-columns``); or why it cannot be placed (a ValueError, which
ingest turns into a dead letter)."""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, Sequence

from tributary_read.errors import InvalidInputError
from tributary_read.table.config import Table
from tributary_read.write.ingest import TimeSpec
from tributary_read.write.lines import no_lone_surrogates

COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "headers")


class Record:
    """Turns a Kafka message into what the table stores, or says why it cannot."""

    def __init__(self, table: Table, time_spec: TimeSpec | None, columns: Sequence[str]):
        fmt = table.config.format
        self.text = fmt == "text"
        self.rows = fmt == "parquet"
        self.columns = tuple(columns)
        if self.text and self.columns:
            raise InvalidInputError("a text table keeps each value as one line: it has no room for Kafka columns; "
                                    "use a jsonl or parquet table", kafka_columns="Kafka columns")
        if self.text and time_spec is not None and time_spec.field:
            raise InvalidInputError("a text table keeps values as text, so it has no time field: take the time "
                                    "with a time regex or from the Kafka timestamp", time_field="time field",
                                    time_regex="a time regex", time_source="the Kafka timestamp")
        self.extract = time_spec.extractor(table.layout.tz) if time_spec is not None else None
        self._field_time = time_spec.field_time(table.layout.tz) if time_spec is not None else None

    def bulk_field_time(self) -> tuple[tuple[str, ...], Callable[[object], int]] | None:
        """The time field's rule when values may be parsed in bulk (a JSON table whose records are the
        values as they are: no Kafka columns; the time from a field), else None: one by one."""
        return self._field_time if not self.text and not self.columns else None

    def convert(self, msg) -> tuple[bytes | dict, int]:
        value: bytes = msg.value()
        doc: Any = None
        if self.text:
            if b"\n" in value or b"\r" in value:
                raise ValueError("the value holds a line break: a text table keeps one line per record")
        else:
            doc = json.loads(value)
            if (self.columns or self.rows) and not isinstance(doc, dict):
                raise ValueError("the value is not a JSON object")
            if self.rows:
                no_lone_surrogates(value, doc)
        ts = self._time(msg, value, doc)
        if self.columns:
            doc = {**doc, **self._columns(msg)}
        if self.rows:
            return doc, ts
        if self.text:
            return value, ts
        if self.columns or b"\n" in value or b"\r" in value:  # one line per record, whatever the producer sent
            return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode(), ts
        return value, ts

    def _time(self, msg, value: bytes, doc) -> int:
        if self.extract is not None:
            return self.extract(value, doc)
        kind, ts = msg.timestamp()
        if kind == 0 or ts is None or ts < 0:  # TIMESTAMP_NOT_AVAILABLE
            raise ValueError("the record has no Kafka timestamp")
        return ts

    def _columns(self, msg) -> dict:
        out: dict = {}
        for c in self.columns:
            if c == "key":
                out["kafka_key"] = _text(msg.key())
            elif c == "topic":
                out["kafka_topic"] = msg.topic()
            elif c == "partition":
                out["kafka_partition"] = msg.partition()
            elif c == "offset":
                out["kafka_offset"] = msg.offset()
            elif c == "timestamp":
                out["kafka_timestamp"] = msg.timestamp()[1]
            elif c == "headers":
                out["kafka_headers"] = {k: _text(v) for k, v in (msg.headers() or [])}
        return out


def _text(b: bytes | None) -> str | None:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(b).decode("ascii")


def parse_columns(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    cols = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in cols if c not in COLUMNS]
    if bad:
        raise InvalidInputError(f"unknown Kafka column(s) {', '.join(bad)}; choose from {', '.join(COLUMNS)}",
                                kafka_columns="Kafka column(s)")
    return cols
