"""Hive SQL scripts on Spark (``trib sql -f``): statements with their lines, ``${var}``s, results.

A script is split on ``;`` outside quotes, backticks and comments, as Hive's CLI does, and each
statement remembers the line it starts on, so an error can say where to look. ``${var}`` and
``${hivevar:var}`` are replaced before Spark sees the text, from ``--var`` and the window of
``--schedule-time``; an undefined one is an error, never an empty string. ``${hiveconf:..}``,
``${system:..}`` and ``${env:..}`` are left to Spark's own substitution
(``spark.sql.variable.substitute``), which reads them from the session.

``set k=v`` lines are Spark SET statements: seed 002's ``set dip.mapreduce.input.fileinputformat.*``
lines land in the session conf, which Spark copies into the Hadoop configuration its Hive table
scans list with, where trib's path filter reads them.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import re
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Callable, Iterable, Iterator, Mapping

from tributary_read.errors import InvalidInputError, SqlStatementError


@dataclass(frozen=True)
class Statement:
    number: int  # 1-based, among the script's statements
    line: int  # 1-based line of its first character
    text: str


@dataclass(frozen=True)
class Result:
    """The last statement's rows; ``truncated`` when a limit was given and more existed.

    Without a limit, ``rows`` is an iterator that fetches a partition at a time as it is read
    (read it once): a script that prints every row never holds the whole result in the driver.
    """

    columns: list[str]
    rows: Iterable[list[Any]]
    truncated: bool = False
    statements: int = 0
    timings_ms: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        out = {"columns": self.columns, "rows": list(self.rows)}
        if self.truncated:
            out["truncated"] = True
        return out


def split_statements(text: str) -> list[Statement]:
    """Statements of a Hive script; empty ones (only blanks and comments) are skipped."""
    out: list[Statement] = []
    buf: list[str] = []
    start_line = None
    line = 1
    i, n = 0, len(text)
    quote = None  # ', " or `
    while i < n:
        c = text[i]
        if quote:
            buf.append(c)
            if c == "\\" and quote != "`" and i + 1 < n:
                buf.append(text[i + 1])
                line += text[i + 1] == "\n"
                i += 2
                continue
            if c == quote:
                quote = None
        elif c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            if start_line is not None:  # a comment before a statement is not part of it
                buf.append(text[i:j])
            i = j
            continue
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            chunk = text[i:j]
            if start_line is not None:
                buf.append(chunk)
            line += chunk.count("\n")
            i = j
            continue
        elif c == ";":
            if start_line is not None:
                out.append(Statement(len(out) + 1, start_line, "".join(buf).strip()))
            buf, start_line = [], None
            i += 1
            continue
        else:
            if c in "'\"`":
                quote = c
            buf.append(c)
            if start_line is None and not c.isspace():
                start_line = line
        if c == "\n":
            line += 1
        i += 1
    if quote:
        raise InvalidInputError(f"unterminated {quote} quote in the script's last statement "
                                f"(line {start_line})")
    if start_line is not None:
        out.append(Statement(len(out) + 1, start_line, "".join(buf).strip()))
    return out


#: ``${name}`` / ``${hivevar:name}``: SQL script variables (Hive's hivevar), not layout tokens.
_VAR = re.compile(r"\$[{](hivevar:)?([A-Za-z_][A-Za-z0-9_.]*)[}]")


def substitute(stmt: Statement, variables: Mapping[str, str]) -> Statement:
    """``${var}`` / ``${hivevar:var}`` replaced; an undefined one names itself and its line."""

    def repl(m: re.Match) -> str:
        name = m.group(2)
        if name not in variables:
            line = stmt.line + stmt.text[: m.start()].count("\n")
            raise InvalidInputError(f"undefined variable ${{{m.group(1) or ''}{name}}} in statement "
                                    f"{stmt.number} (line {line}): give the variable {name}=VALUE",
                                    var="the variable")
        return str(variables[name])

    return Statement(stmt.number, stmt.line, _VAR.sub(repl, stmt.text))


def window_variables(schedule_time: str | int, period_ms: int, lag_ms: int = 0,
                     timezone: str = "UTC", form: str = "aligned", window_ms: int | None = None) -> dict[str, str]:
    """The variables a scheduled run's script may use: the :class:`~tributary_read.read.window.Schedule` window.

    ``${schedule_time_ms}`` is the schedule time as given.
    """
    from tributary_read.read.window import Schedule, _instant, iso
    from tributary_read.table.layout import parse_timezone

    tz = parse_timezone(timezone)
    schedule = Schedule(period_ms, lag_ms, form, window_ms, tz)
    when = _instant(schedule_time, tz, "schedule_time", "schedule time")
    w = schedule.window(when)
    start_local = _dt.datetime.fromtimestamp(w.start_ms / 1000, tz=_dt.timezone.utc).astimezone(tz)
    return {
        "schedule_time_ms": str(when),
        "window_start_ms": str(w.start_ms),
        "window_end_ms": str(w.end_ms),
        "window_start": iso(w.start_ms, tz),
        "window_end": iso(w.end_ms, tz),
        "window_dt": start_local.strftime("%Y%m%d%H"),
    }


def _jsonable(v: Any) -> Any:
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "asDict"):
        return _jsonable(v.asDict(recursive=True))
    return v


#: The longest error line kept: room for a long path and the advice after it (the jar's refusal of a
#: window that splits a compacted file names it by its full URI).
LINE_LIMIT = 1000


def error_line(e: BaseException) -> str:
    """The engine's own one-line reason, dug out of py4j's wrapping when needed.

    Spark reports a UDF that refuses its arguments while the query is analysed as "Cannot
    instantiate the Hive UDF ..."; the reason (trib's own refusal, e.g. a time without an
    offset) is only in the cause, so the root cause is added when the line does not hold it.
    """
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    java = getattr(e, "java_exception", None) or getattr(e, "_origin", None)
    if java is not None:
        try:
            root = java
            while root.getCause() is not None and root.getCause() != root:
                root = root.getCause()
            reason = str(root.toString()).splitlines()[0]
            message = str(root.getMessage() or "").strip()
        except Exception:  # noqa: BLE001 - a gone JVM: the line as it is
            return first[:LINE_LIMIT]
        if first.startswith("An error occurred while calling"):
            first = reason
        elif root != java and message and message.splitlines()[0] not in first:
            return f"{first[:LINE_LIMIT]} (cause: {message.splitlines()[0][:300]})"
    return first[:LINE_LIMIT]


def quiet_statement_logs() -> None:
    """Leave a failed statement's report to :func:`error_line`'s one line.

    pyspark logs every statement that fails with a query context (an analysis error,
    a UDF's refusal) as a JSON record with its Java stack on stderr, before the
    exception reaches trib: a second, long report of the same failure.
    """
    import logging

    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def run_script(spark, statements: list[Statement], variables: Mapping[str, str], *, limit: int | None = None,
               progress: Callable[[Statement], None] | None = None) -> Result:
    """Run every statement in order; return the last one's rows: all of them, or at most ``limit``.

    Commands (SET, DDL, INSERT) run as Spark executes them, eagerly. A query that is not the last
    statement is analyzed, not run, since nothing would read its rows. The last one's first
    partition is fetched here, so a query that fails at once fails before anything is printed;
    the rest stream as ``rows`` is read (``toLocalIterator``), as spark-sql and beeline print
    every row, never the whole result in the driver's memory at once. A failure later in the
    stream is the same one-line error, after the rows already read.
    """
    import time

    if not statements:
        raise InvalidInputError("the script has no statements")
    if limit is not None and limit < 0:
        raise InvalidInputError(f"the limit must not be negative, not {limit}", limit="the limit")
    rendered = [substitute(s, variables) for s in statements]  # every ${} checked before anything runs
    timings: list[int] = []
    df = None
    rows: Iterable[list[Any]] = []
    truncated = False
    for stmt in rendered:
        if progress:
            progress(stmt)
        t0 = time.monotonic()
        try:
            df = spark.sql(stmt.text)
            if stmt is rendered[-1]:
                if limit is None:
                    rows = _stream(df, stmt)
                else:
                    taken = df.take(limit + 1)
                    rows, truncated = [[_jsonable(v) for v in r] for r in taken[:limit]], len(taken) > limit
        except SqlStatementError:
            raise
        except Exception as e:  # noqa: BLE001 - every engine error becomes one line naming the statement
            raise _failed(stmt, e) from e
        timings.append(int((time.monotonic() - t0) * 1000))
    return Result(list(df.columns), rows, truncated, len(rendered), timings)


def _failed(stmt: Statement, e: BaseException) -> SqlStatementError:
    return SqlStatementError(f"statement {stmt.number} (line {stmt.line}) failed: {error_line(e)}")


def _stream(df, stmt: Statement) -> Iterator[list[Any]]:
    """The rows of ``df`` a partition at a time; the first is fetched now, so an early failure is raised here."""
    it = iter(df.toLocalIterator(prefetchPartitions=True))
    try:
        first = next(it, None)
    except Exception as e:  # noqa: BLE001 - the engine's error, one line naming the statement
        raise _failed(stmt, e) from e
    if first is None:
        return iter(())

    def rest() -> Iterator[list[Any]]:
        try:
            for r in chain([first], it):
                yield [_jsonable(v) for v in r]
        except Exception as e:  # noqa: BLE001 - as above, after the rows already read
            raise _failed(stmt, e) from e
    return rest()
