"""The one parser of durations and instants, for every front end.

The CLI, job files and the Spark helper call these functions; the jar's twin
(``trib.udfs.TimeSpec``) implements the same grammar and is held equal by a
parity test (tests/test_timespec.py). Two rules make a spelling mean one thing
everywhere:

* **A duration carries its unit** (``500ms``, ``30s``, ``10m``, ``1h``, ``7d``,
  ``2w``). A bare ``3600`` could be seconds or milliseconds, so it is refused;
  ``0`` alone is the one exception, because it is zero in every unit. A value
  must come to a whole number of milliseconds (``1.9ms`` is refused, not cut
  to 1 ms).
* **An instant carries its offset** (``2024-01-01T05:00:00Z``, ``...+08:00``)
  or is epoch milliseconds. A time without an offset was read as the table's
  zone by one command and as UTC by another, 8 hours apart for a table in
  Asia/Shanghai; it is refused, with the same time written both ways.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from decimal import Decimal, InvalidOperation
from typing import Iterable

from tributary_read.errors import InvalidInputError

#: 9999-12-31T23:59:59.999Z: the last instant a bound can name, and the longest duration.
MAX_INSTANT_MS = 253_402_300_799_999
#: 0001-01-01T00:00:00Z: the first.
MIN_INSTANT_MS = -62_135_596_800_000
#: Below this an epoch integer is almost certainly *seconds* (1e11 ms is 1973).
SECONDS_LIMIT = 100_000_000_000

UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
DURATION_EXAMPLES = "e.g. 500ms, 30s, 10m, 1h, 7d"
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d|w)\s*$")
_ZERO = re.compile(r"^\s*0+(?:\.0+)?\s*$")
_DIGITS = re.compile(r"^\s*-?[0-9]+\s*$")
#: ISO-8601 as java.time's ISO_OFFSET_DATE_TIME reads it (plus a space for the T, and no offset, refused
#: with a hint): the jar's TimeSpec uses the same expression.
_ISO = re.compile(r"^\s*([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[Tt ]([0-9]{2}):([0-9]{2})"
                  r"(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?)?\s*(Z|z|[+-][0-9]{2}:?[0-9]{2})?\s*$")


def parse_duration_ms(value: str | int, what: str = "duration") -> int:
    """Milliseconds of a duration spelled with its unit (see the module docstring)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidInputError(f"{what} {value!r} is not a duration ({DURATION_EXAMPLES})")
    text = str(value)
    if _ZERO.match(text):
        return 0
    m = _DURATION.match(text)
    if not m:
        if _DIGITS.match(text):
            n = text.strip()
            hint = f"write {n}s or {n}ms" if not n.startswith("-") else "a duration is never negative"
            raise InvalidInputError(f"{what} {n} has no unit: {hint} ({DURATION_EXAMPLES})")
        raise InvalidInputError(f"{what} {text.strip()!r} is not a duration ({DURATION_EXAMPLES})")
    try:
        ms = Decimal(m.group(1)) * UNITS_MS[m.group(2)]
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise InvalidInputError(f"{what} {text.strip()!r} is not a duration ({DURATION_EXAMPLES})") from None
    if ms != ms.to_integral_value():
        raise InvalidInputError(f"{what} {text.strip()} is not a whole number of milliseconds")
    if ms > MAX_INSTANT_MS:
        raise InvalidInputError(f"{what} {text.strip()} is longer than 9999 years")
    return int(ms)


def parse_timeout_ms(value: str | int, what: str = "timeout") -> int:
    """A timeout: a duration with its unit, or a bare number of seconds (> 0).

    Metastore URIs took ``?timeout=SECONDS`` before durations carried units, and a
    URI in a job file or a table's settings must keep its meaning: a timeout is
    never milliseconds by accident, so the bare form stays seconds here only.
    """
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text is not None and re.match(r"^[0-9]+(?:\.[0-9]+)?$", text):
        exact = Decimal(text) * 1000
        if exact != exact.to_integral_value() or exact > MAX_INSTANT_MS:
            raise InvalidInputError(f"{what} {text} is not a whole number of milliseconds up to 9999 years")
        ms = int(exact)
    else:
        ms = parse_duration_ms(value, what)
    if ms <= 0:
        raise InvalidInputError(f"{what} {value!r} must be positive ({DURATION_EXAMPLES})")
    return ms


def format_duration_ms(ms: int) -> str:
    """A duration as :func:`parse_duration_ms` reads it back: the largest unit that divides it (``90s``, ``1m``)."""
    if ms == 0:
        return "0s"
    for unit in ("w", "d", "h", "m", "s"):
        if ms % UNITS_MS[unit] == 0:
            return f"{ms // UNITS_MS[unit]}{unit}"
    return f"{ms}ms"


def parse_instant(value: str | int, tz: tzinfo | Iterable[tzinfo] | None = None, what: str = "time") -> int:
    """Epoch ms from ISO-8601 with an offset (or ``Z``), or from epoch milliseconds.

    ``tz`` (the table's or job's zone, or several: an ETL job's and its
    tables') only shapes the error for a time given without an offset: the
    message shows it with ``Z`` and with each zone's offset, so the fix is a
    copy and paste of the reading the user meant.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidInputError(f"unparsable {what} {value!r}")
    text = str(value).strip()
    if not text:
        raise InvalidInputError(f"empty {what}")
    if _DIGITS.match(text):
        v = int(text)
        if v < 0 or 0 < v < SECONDS_LIMIT:
            raise InvalidInputError(f"{what} {text[:30]} looks like epoch seconds, not milliseconds "
                                    "(e.g. 1592928000000)")
        if v > MAX_INSTANT_MS:
            raise InvalidInputError(f"{what} {text[:30]} is past the year 9999 (epoch ms)")
        return v
    m = _ISO.match(text)
    if not m:
        raise InvalidInputError(f"unparsable {what} {text[:60]!r}: use ISO-8601 with an offset "
                                "(2020-06-24T01:05:00+08:00, 2020-06-23T17:05:00Z) or epoch milliseconds")
    y, mo, d, hh, mi, ss, frac, off = m.groups()
    try:
        local = datetime(int(y), int(mo), int(d), int(hh or 0), int(mi or 0), int(ss or 0))
    except ValueError:
        raise InvalidInputError(f"unparsable {what} {text[:60]!r}: not a valid date and time") from None
    wall = local.isoformat() + (f".{frac}" if frac else "")
    if hh is None:
        raise InvalidInputError(f"{what} {text[:60]} is a date, not an instant: write {wall}Z (UTC)")
    if off is None:
        raise InvalidInputError(_no_offset(what, local, wall, tz, text))
    if off in ("Z", "z"):
        offset_s = 0
    else:
        sign = -1 if off[0] == "-" else 1
        digits = off[1:].replace(":", "")
        oh, om = int(digits[:2]), int(digits[2:])
        if oh > 18 or om > 59 or (oh == 18 and om):
            raise InvalidInputError(f"{what} {text[:60]!r}: the offset {off} is outside -18:00..+18:00")
        offset_s = sign * (oh * 3600 + om * 60)
    wall_ms = int((local - datetime(1970, 1, 1)).total_seconds()) * 1000 + int((frac or "0").ljust(3, "0")[:3])
    return wall_ms - offset_s * 1000


def _no_offset(what: str, local: datetime, wall: str, tz: tzinfo | Iterable[tzinfo] | None, text: str) -> str:
    """The refusal of a time without an offset, with every reading spelled out (UTC first, once each)."""
    msg = f"{what} {text[:60]} has no UTC offset: write {wall}Z (UTC)"
    zones = [] if tz is None else [tz] if isinstance(tz, tzinfo) else list(tz)
    seen = {"UTC"}
    for zone in zones:
        name = getattr(zone, "key", None) or str(zone)
        if zone is timezone.utc or name in seen:
            continue
        seen.add(name)
        offs = [_spelled(o) for o in _wall_offsets(local, zone)]
        if not offs:
            msg += f" ({wall} does not exist in {name}: its clocks skip it)"
        elif len(offs) == 1:
            msg += f" or {wall}{offs[0]} ({name})"
        else:
            msg += f" or {wall}{offs[0]} or {wall}{offs[1]} ({name}: that wall time happens twice)"
    return msg


def _wall_offsets(local: datetime, zone: tzinfo) -> list[timedelta]:
    """The offsets a wall time has in a zone: none in a gap (its clocks skip it), two in an overlap, earlier first.

    Suggesting the one offset ``utcoffset`` guesses would name an instant the
    user never meant: a skipped time read with the offset before the change,
    or one of two readings of a repeated hour.
    """
    out: list[timedelta] = []
    for fold in (0, 1):
        aware = local.replace(tzinfo=zone, fold=fold)
        off = aware.utcoffset() or timedelta(0)
        if aware.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None) == local and off not in out:
            out.append(off)
    return out


def _spelled(off: timedelta) -> str:
    mins = int(off.total_seconds()) // 60
    return f"{'-' if mins < 0 else '+'}{abs(mins) // 60:02d}:{abs(mins) % 60:02d}"


def iso(ms: int, tz: tzinfo = timezone.utc) -> str:
    """ISO-8601 with milliseconds and the offset: what :func:`parse_instant` reads back."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone(tz).isoformat(timespec="milliseconds")
