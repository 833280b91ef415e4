"""Layouts: directory templates such as ``{yyyy}_{MM}_{dd}/{HH}`` and partition specs.

A layout maps a directory to partition values plus the start of the time period
the directory holds, and maps a time back to a directory. Parsing is strict:
only ASCII digits, exact widths, real calendar values, and the directory must
format back to itself; anything else is reported, never guessed, because a
guessed partition is a silently wrong Hive mount.

This is the only module that parses templates: partition filters, plain-directory
defaults and the Hive partition -> directory mapping all ask a :class:`Layout`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from functools import cached_property
from typing import Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tributary_read.errors import InvalidLayoutError, TimeOutOfRangeError

#: token -> (width, datetime field, period it implies). Ordered coarse to fine.
TOKENS: dict[str, tuple[int, str, timedelta | None]] = {
    "yyyy": (4, "year", None),
    "MM": (2, "month", None),
    "dd": (2, "day", timedelta(days=1)),
    "HH": (2, "hour", timedelta(hours=1)),
    "mm": (2, "minute", timedelta(minutes=1)),
}
_ORDER = list(TOKENS)
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters a directory segment may carry besides tokens: no separators, no
# quotes, nothing a metastore or shell would interpret.
_LITERAL = re.compile(r"^[A-Za-z0-9_=\-.+]*$")


def parse_timezone(name: str) -> tzinfo:
    """``UTC``, an IANA name, or a fixed offset like ``+08:00``."""
    if name in ("UTC", "Z", "utc"):
        return timezone.utc
    m = re.fullmatch(r"([+-])([0-9]{2}):?([0-9]{2})", name or "")
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3))
        if hours > 23 or minutes > 59:  # "+08:99" is a typo, not 09:39
            raise InvalidLayoutError(f"bad UTC offset {name!r}")
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if m.group(1) == "-" else delta)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # "America" is a directory of the tz database
        raise InvalidLayoutError(f"unknown timezone {name!r}") from None


def _parts(template: str, what: str) -> list[str | tuple[str]]:
    """Split a template into literal strings and ``(token,)`` tuples."""
    out: list[str | tuple[str]] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(template):
        if m.start() > pos:
            out.append(template[pos : m.start()])
        tok = m.group(1)
        if tok not in TOKENS:
            raise InvalidLayoutError(
                f"unknown token {{{tok}}} in {what} {template!r}; known: "
                + ", ".join("{%s}" % t for t in TOKENS)
            )
        out.append((tok,))
        pos = m.end()
    if pos < len(template):
        out.append(template[pos:])
    for p in out:
        # fullmatch: with match(), '$' would let a trailing newline through.
        if isinstance(p, str) and ("{" in p or "}" in p or not _LITERAL.fullmatch(p)):
            raise InvalidLayoutError(f"bad literal {p!r} in {what} {template!r}")
    return out


def _regex(parts: list[str | tuple[str]]) -> re.Pattern:
    rx = []
    seen: set[str] = set()
    for p in parts:
        if isinstance(p, tuple):
            tok = p[0]
            width = TOKENS[tok][0]
            # A token repeated inside one segment must match the same digits.
            rx.append(f"(?P={tok})" if tok in seen else f"(?P<{tok}>[0-9]{{{width}}})")
            seen.add(tok)
        else:
            rx.append(re.escape(p))
    return re.compile("".join(rx))


def _format(parts: list[str | tuple[str]], values: dict[str, str]) -> str:
    return "".join(values[p[0]] if isinstance(p, tuple) else p for p in parts)


def default_partition(directory: str) -> str:
    """The spec of a plain directory: ``dt=`` + every token of the template, in order of appearance.

    It uses every token, so the mapping stays one-to-one (one directory, one
    partition); a malformed template is left for :class:`Layout` to reject.
    """
    toks = dict.fromkeys(m.group(1) for m in _PLACEHOLDER.finditer(directory) if m.group(1) in TOKENS)
    return "dt=" + "".join("{%s}" % t for t in toks)


@dataclass(frozen=True)
class PartitionDir:
    """A directory that parsed under the layout."""

    path: str
    values: dict[str, str] = field(hash=False)
    start_ms: int
    end_ms: int  # exclusive: the next period's start

    @property
    def spec(self) -> str:
        """``dt=2020062401`` / ``dt=20200624/hr=01``: the Hive partition name."""
        return "/".join(f"{k}={v}" for k, v in self.values.items())


@dataclass(frozen=True)
class Layout:
    """A directory template plus the Hive partition keys derived from it.

    Args:
        directory: e.g. ``{yyyy}_{MM}_{dd}/{HH}`` or ``dt={yyyy}{MM}{dd}{HH}``.
        partition: e.g. ``dt={yyyy}{MM}{dd}{HH}`` or ``dt={yyyy}{MM}{dd},hr={HH}``.
        timezone: the zone the directory times are written in.
    """

    directory: str
    partition: str
    timezone: str = "UTC"

    def __post_init__(self):
        for what, v in (("layout", self.directory), ("partition spec", self.partition), ("timezone", self.timezone)):
            if not isinstance(v, str):  # table.json is data from disk: a number here is corruption
                raise InvalidLayoutError(f"{what} must be a string, not {type(v).__name__} {v!r}")
        # Parse eagerly so a bad layout fails at construction, with its message.
        self._segments  # noqa: B018
        self._keys  # noqa: B018
        self.tz  # noqa: B018

    @cached_property
    def tz(self) -> tzinfo:
        return parse_timezone(self.timezone)

    @cached_property
    def _segments(self) -> list[list[str | tuple[str]]]:
        if not self.directory or self.directory.startswith("/") or self.directory.endswith("/"):
            raise InvalidLayoutError(f"malformed layout {self.directory!r}")
        raw = self.directory.split("/")
        if any(not s for s in raw):
            raise InvalidLayoutError(f"empty segment in layout {self.directory!r}")
        # Directories are joined under ROOT: '..' would write outside the table,
        # '.', '\\' and a hidden first character ('_', '.': Hive and every trib
        # reader skip such directories) would write data nobody reads back.
        bad = [s for s in raw if s in (".", "..") or s[:1] in ("_", ".") or "\\" in s]
        if bad:
            raise InvalidLayoutError(
                f"layout {self.directory!r} has segment {bad[0]!r}: segments must stay inside ROOT "
                "and must not start with '_' or '.' (hidden from Hive and trib readers)")
        segs = [_parts(s, "layout") for s in raw]
        toks = [p[0] for s in segs for p in s if isinstance(p, tuple)]
        uniq = [t for t in _ORDER if t in toks]
        if not uniq or uniq != _ORDER[: len(uniq)] or len(uniq) < 3:
            raise InvalidLayoutError(
                f"layout {self.directory!r} must name a contiguous run of "
                "{yyyy},{MM},{dd}[,{HH}[,{mm}]]"
            )
        return segs

    @cached_property
    def _regexes(self) -> list[re.Pattern]:
        return [_regex(s) for s in self._segments]

    @cached_property
    def tokens(self) -> list[str]:
        toks = {p[0] for s in self._segments for p in s if isinstance(p, tuple)}
        return [t for t in _ORDER if t in toks]

    @cached_property
    def period(self) -> timedelta:
        period = TOKENS[self.tokens[-1]][2]
        assert period is not None  # _segments insists on {dd} at least: only {yyyy} and {MM} have none
        return period

    @cached_property
    def _specs(self) -> list[tuple[str, str, list[str | tuple[str]]]]:
        """(key, template, parsed template) per partition key, in spec order."""
        specs = []
        for spec in self.partition.split(","):
            key, sep, tmpl = spec.strip().partition("=")
            if not sep or not _KEY.fullmatch(key) or not tmpl:
                raise InvalidLayoutError(f"malformed partition spec {self.partition!r}")
            parts = _parts(tmpl, "partition")
            for p in parts:
                if isinstance(p, tuple) and p[0] not in self.tokens:
                    raise InvalidLayoutError(
                        f"partition uses {{{p[0]}}}, which the layout {self.directory!r} lacks"
                    )
            specs.append((key, tmpl, parts))
        if len({k for k, _, _ in specs}) != len(specs):
            raise InvalidLayoutError(f"duplicate key in partition spec {self.partition!r}")
        return specs

    @cached_property
    def _keys(self) -> list[tuple[str, list[str | tuple[str]]]]:
        return [(k, parts) for k, _, parts in self._specs]

    @property
    def keys(self) -> list[str]:
        return [k for k, _ in self._keys]

    @cached_property
    def partition_templates(self) -> dict[str, str]:
        """Key -> its template, in spec order: ``{"dt": "{yyyy}{MM}{dd}", "hr": "{HH}"}``."""
        return {k: tmpl for k, tmpl, _ in self._specs}

    @cached_property
    def partition_parts(self) -> dict[str, tuple[str | tuple[str], ...]]:
        """Key -> its parsed template: literal strings and ``(token,)`` tuples, in order.

        For engines that build partition values themselves (Spark's columns in
        :mod:`tributary_read.spark.columns`) without parsing the template again.
        """
        return {k: tuple(parts) for k, parts in self._keys}

    @cached_property
    def directory_fields(self) -> tuple[str, dict[str, tuple[int, int]]]:
        """The directory template as an engine matches it: a regex, and token -> (offset, width).

        Every segment has a fixed width (literals and zero-padded tokens), so a
        token's first occurrence sits at a fixed offset in the ``depth``
        segments before a file name: an engine slices it out (cheaper per row
        than a regex per token) once the regex has vouched for the shape. The
        regex uses only syntax Python and Java share (numbered groups, ``\\N``
        back-references for a repeated token), so Spark's ``rlike`` runs it.
        """
        rx: list[str] = []
        offsets: dict[str, tuple[int, int]] = {}
        groups: dict[str, int] = {}
        pos = 0
        for i, seg in enumerate(self._segments):
            if i:
                rx.append("/")
                pos += 1
            for p in seg:
                if isinstance(p, tuple):
                    tok, width = p[0], TOKENS[p[0]][0]
                    if tok in groups:
                        rx.append(f"\\{groups[tok]}")
                    else:
                        groups[tok] = len(groups) + 1
                        offsets[tok] = (pos, width)
                        rx.append(f"([0-9]{{{width}}})")
                    pos += width
                else:
                    rx.append(re.escape(p))
                    pos += len(p)
        return "".join(rx), offsets

    @cached_property
    def partition_tokens(self) -> list[str]:
        """The tokens the partition spec uses, coarse to fine."""
        toks = {p[0] for _, parts in self._keys for p in parts if isinstance(p, tuple)}
        return [t for t in _ORDER if t in toks]

    @cached_property
    def _spans(self) -> dict[str, tuple[re.Pattern, str]]:
        """Key -> (value regex, finest token) for keys whose values order like time.

        Only templates whose tokens run coarse to fine from ``{yyyy}``, each once,
        qualify: for them fixed-width zero-padded digits compare as strings
        exactly as in time, so a string condition on the value is a time range.
        """
        out = {}
        for key, parts in self._keys:
            toks = [p[0] for p in parts if isinstance(p, tuple)]
            if toks and toks == _ORDER[: len(toks)]:
                out[key] = (_regex(parts), toks[-1])
        return out

    def value_span(self, key: str, value: str) -> tuple[int, int] | None:
        """The time span [start, end) in ms a partition value stands for, when string order is time order.

        None when the key's template does not order like time, the value does not
        fit it, or the span lies outside what datetime can show: the caller then
        simply prunes nothing by this value.
        """
        span = self._spans.get(key)
        if span is None:
            return None
        rx, last = span
        m = rx.fullmatch(value)
        if not m:
            return None
        v = {k: int(x) for k, x in m.groupdict().items()}
        try:
            start = datetime(v["yyyy"], v.get("MM", 1), v.get("dd", 1), v.get("HH", 0), v.get("mm", 0))
        except ValueError:
            return None
        tz = self.tz
        try:  # the last period of year 9999 has no end datetime can show: it prunes nothing
            if last == "yyyy":
                end = start.replace(year=start.year + 1)
            elif last == "MM":
                end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
            else:
                end = start + {"dd": timedelta(days=1), "HH": timedelta(hours=1), "mm": timedelta(minutes=1)}[last]
            return int(start.replace(tzinfo=tz).timestamp() * 1000), int(end.replace(tzinfo=tz).timestamp() * 1000)
        except (ValueError, OverflowError, OSError):
            return None

    def check_one_to_one(self) -> None:
        """Refuse (InvalidLayoutError) a partition spec that omits a token of the directory template.

        Several directories would then share one partition (``dt={yyyy}{MM}{dd}`` over hourly
        directories: 24), and a Hive partition has exactly one location. ``trib table create``
        refuses such a table and ``trib partitions sync`` (:class:`PartitionMapper`) such a layout,
        by this one rule; a :class:`Layout` itself allows it, so a table made before create
        refused it still opens.
        """
        missing = [t for t in self.tokens if t not in self.partition_tokens]
        if missing:
            raise InvalidLayoutError(
                f"partition spec {self.partition!r} omits {', '.join('{%s}' % t for t in missing)} of layout "
                f"{self.directory!r}: several directories would share one Hive partition; name every token "
                f"of the layout in the partition spec (e.g. {default_partition(self.directory)!r})")

    @property
    def depth(self) -> int:
        return len(self._segments)

    # -- directory -> partition ------------------------------------------
    def parse(self, path: str) -> PartitionDir:
        """Parse a root-relative directory; raise InvalidLayoutError if it does not fit."""
        segs = path.strip("/").split("/")
        if len(segs) != self.depth:
            raise InvalidLayoutError(f"{path!r} does not match layout {self.directory!r}")
        values: dict[str, str] = {}
        for seg, rx in zip(segs, self._regexes):
            m = rx.fullmatch(seg)
            if not m:
                raise InvalidLayoutError(f"{path!r} does not match layout {self.directory!r}")
            for tok, val in m.groupdict().items():
                if values.setdefault(tok, val) != val:
                    raise InvalidLayoutError(f"{path!r} repeats {{{tok}}} with different values")
        try:
            start = datetime(
                int(values["yyyy"]), int(values["MM"]), int(values["dd"]),
                int(values.get("HH", 0)), int(values.get("mm", 0)), tzinfo=self.tz,
            )
        except ValueError:
            raise InvalidLayoutError(f"{path!r} is not a real date/time") from None
        try:
            # Round-trip via UTC: astimezone() into start's own zone is a no-op, so a
            # local time skipped by a DST jump would otherwise format back to itself.
            if self.dir_for_datetime(start.astimezone(timezone.utc)) != path.strip("/"):
                raise InvalidLayoutError(
                    f"{path!r} does not round-trip under layout {self.directory!r}"
                )
            return self._partition(path.strip("/"), values, start)
        except OverflowError:
            # e.g. 9999-12-31 has no next period to end at.
            raise InvalidLayoutError(f"{path!r} is outside the supported time range") from None

    def fits_top(self, name: str) -> bool:
        """Whether a directory directly under the root can begin one of this layout's partition paths."""
        return self._regexes[0].fullmatch(name) is not None

    def try_parse(self, path: str) -> PartitionDir | None:
        try:
            return self.parse(path)
        except InvalidLayoutError:
            return None

    def _partition(self, path: str, values: dict[str, str], start: datetime) -> PartitionDir:
        end = self._next(start)
        pvals = {k: _format(parts, values) for k, parts in self._keys}
        return PartitionDir(path, pvals, _to_ms(start), _to_ms(end))

    def _next(self, start: datetime) -> datetime:
        # Add the period in wall-clock terms and re-localise, so a day in a DST
        # zone is 23 or 25 hours, as the directory names say.
        naive = start.replace(tzinfo=None) + self.period
        return naive.replace(tzinfo=self.tz)

    # -- time -> directory -------------------------------------------------
    def _values(self, dt: datetime) -> dict[str, str]:
        return {t: f"{getattr(dt, TOKENS[t][1]):0{TOKENS[t][0]}d}" for t in self.tokens}

    def dir_for_datetime(self, dt: datetime) -> str:
        local = dt.astimezone(self.tz)
        values = self._values(local)
        return "/".join(_format(s, values) for s in self._segments)

    def for_time(self, ts_ms: int) -> PartitionDir:
        """The partition directory that holds an event at ``ts_ms`` (epoch ms).

        Raises TimeOutOfRangeError, never a bare OverflowError/ValueError/OSError,
        when the time or the end of its period falls outside datetime's years
        1..9999 in the table's zone (``9999-12-31T23:30Z`` has no hour end,
        ``-1e17`` ms is ~3 million years BC): callers treat it as a bad record.
        """
        try:
            local = datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).astimezone(self.tz)
            values = self._values(local)
            start = datetime(
                local.year, local.month, local.day,
                local.hour if "HH" in self.tokens else 0,
                local.minute if "mm" in self.tokens else 0, tzinfo=self.tz,
            )
            path = "/".join(_format(s, values) for s in self._segments)
            return self._partition(path, values, start)
        except (OverflowError, ValueError, OSError):
            shown = str(ts_ms)
            shown = shown if len(shown) <= 24 else f"{shown[:8]}...({len(shown)} digits)"
            raise TimeOutOfRangeError(
                f"event time {shown} ms is out of range: no partition of layout {self.directory!r} "
                f"holds it in zone {self.timezone} (years 0001..9999)"
            ) from None

    def to_dict(self) -> dict:
        return {"directory": self.directory, "partition": self.partition, "timezone": self.timezone}


def _to_ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


class PartitionMapper:
    """Maps Hive partition values back to the layout directory they mount.

    Requires a one-to-one layout: the partition spec must use every token of the
    directory template, or several directories would share one partition, and a
    Hive partition has exactly one location.
    """

    def __init__(self, layout: Layout):
        layout.check_one_to_one()
        self.layout = layout
        # The partition names themselves (``dt=.../hr=...``) read as a layout.
        inverse = "/".join(f"{k}={t}" for k, t in layout.partition_templates.items())
        self._inverse = Layout(inverse, layout.partition, layout.timezone)

    def directory(self, values: Mapping[str, str]) -> str | None:
        """The layout directory of these values, or None when they are not the layout's."""
        keys = self.layout.keys
        if [k.lower() for k in values] != [k.lower() for k in keys]:
            return None
        vals = list(values.values())
        if not all(isinstance(v, str) and v and "/" not in v for v in vals):
            return None
        p = self._inverse.try_parse("/".join(f"{k}={v}" for k, v in zip(keys, vals)))
        if p is None:
            return None
        d = self.layout.for_time(p.start_ms)
        return d.path if list(d.values.values()) == vals else None


class PartitionCache:
    """Memoises :meth:`Layout.for_time` per UTC minute for the writer's hot path.

    When the zone's offset is one whole number of minutes throughout a UTC
    minute, all events in it fall in the same partition (periods are a minute or
    more). That holds for every zone today but not for historical local mean
    time (Africa/Monrovia was UTC-00:44:30 until 1972), so such minutes are
    computed every time instead of memoised.
    """

    def __init__(self, layout: Layout, limit: int = 100_000):
        self.layout = layout
        self.limit = limit
        self._cache: dict[int, PartitionDir] = {}

    def __call__(self, ts_ms: int) -> PartitionDir:
        key = ts_ms // 60_000
        p = self._cache.get(key)
        if p is None:
            p = self.layout.for_time(ts_ms)
            if self._uniform(key):
                if len(self._cache) >= self.limit:
                    self._cache.clear()
                self._cache[key] = p
        return p

    def _uniform(self, minute: int) -> bool:
        """True when one whole-minute offset covers the minute (changes fall on whole seconds)."""
        first = datetime.fromtimestamp(minute * 60, self.layout.tz).utcoffset()
        last = datetime.fromtimestamp(minute * 60 + 59, self.layout.tz).utcoffset()
        assert first is not None  # an aware datetime: its zone gives an offset
        return first == last and first % timedelta(minutes=1) == timedelta(0)
