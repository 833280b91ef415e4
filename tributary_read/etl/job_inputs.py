"""The ``[[inputs]]`` entries of a job file: each checked key by key, into an :class:`InputSpec`.

A part of :class:`tributary_read.etl.job._Parser` (its mixin), apart so that each
module stays small enough to read whole; the helpers it calls (``fail``,
``string``, ``duration``, ``root_of``, ``path_of``, ``str_map``) are the parser's.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from tributary_read.errors import InvalidInputError
from tributary_read.etl.spec import _CONSUMER_ONLY, _INPUT_KEYS, _WINDOW_ONLY, InputMode, InputSpec, Restated
from tributary_read.io.formats import FORMATS
from tributary_read.read.window import WindowForm

#: Spark temp view names: SQL identifiers.
_VIEW = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Keywords Spark SQL (ANSI mode) and HiveQL reserve: an unquoted view name cannot be one of them.
_RESERVED = frozenset("""
ALL ALTER AND ANTI ANY ARRAY AS AUTHORIZATION BETWEEN BOTH BY CASE CAST CHECK COLLATE COLUMN CONSTRAINT CREATE
CROSS CUBE CURRENT CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP CURRENT_USER DELETE DESCRIBE DISTINCT DROP ELSE END
ESCAPE EXCEPT EXISTS FALSE FETCH FILTER FOR FOREIGN FROM FULL FUNCTION GRANT GROUP GROUPING HAVING IN INNER INSERT
INTERSECT INTERVAL INTO IS JOIN LATERAL LEADING LEFT LIKE LIMIT MINUS NATURAL NOT NULL OF ON ONLY OR ORDER OUTER
OVERLAPS PARTITION PRIMARY REFERENCES RIGHT ROLLUP ROW ROWS SELECT SEMI SESSION_USER SET SOME TABLE TABLESAMPLE
THEN TIME TO TRAILING TRUE UNION UNIQUE UNKNOWN UPDATE USER USING VALUES WHEN WHERE WINDOW WITH
""".split())


class _InputParser:
    def choice(self, cls, d: Mapping, key: str, section: str, default: str):
        """``section.key`` as a member of the Choice ``cls`` (``default`` when absent); else one line naming them."""
        try:
            return cls.parse(self.string(d, key, section) or default, f"{section}.{key}")
        except InvalidInputError as e:
            raise self.fail(str(e)) from None

    def restate_by(self, d: Mapping, mode):
        """``[output] restate_by`` (None: absent), for a restate job only (``mode``: the output's)."""
        from tributary_read.etl.spec import OutputMode, RestateBy

        if "restate_by" not in d:
            return None
        if mode is not OutputMode.RESTATE:
            raise self.fail('output.restate_by is for a restate job: add mode = "restate", or drop restate_by')
        return self.choice(RestateBy, d, "restate_by", "output", "swap")

    def input(self, x: Any, i: int, job: str) -> InputSpec:
        section = f"inputs[{i}]"
        d = self.table_of(x, section)
        self.check_keys(d, _INPUT_KEYS, section)
        table = self.string(d, "table", section, required=True)
        view = self.string(d, "view", section, required=True)
        if not _VIEW.match(view):
            raise self.fail(f"{section}.view {view!r} must be a SQL identifier (letters, digits, '_')")
        if view.upper() in _RESERVED:  # `FROM select` does not parse: the job would fail only at its first run
            raise self.fail(f"{section}.view {view!r} is a SQL keyword: choose another name")
        mode = self.choice(InputMode, d, "mode", section, "consumer")
        wrong = (_WINDOW_ONLY if mode is InputMode.CONSUMER else _CONSUMER_ONLY) & set(d)
        if wrong:
            k = sorted(wrong)[0]
            raise self.fail(f"{section}.{k} does not apply to mode {mode} "
                            f"({'consumer' if k in _CONSUMER_ONLY else 'mtime and manifest'} inputs only)")
        root, options = self.root_of(table)
        kw: dict[str, Any] = {}
        if mode is InputMode.CONSUMER:
            from tributary_read.read.consumer_state import check_name

            name = self.string(d, "consumer", section) or f"etl-{job}-{view}"
            try:
                check_name(name)
            except InvalidInputError as e:
                raise self.fail(f"{section}.consumer: {e}") from None
            tracking = self.string(d, "tracking", section) or "auto"
            if tracking not in ("auto", "manifest", "listing", "mtime", "both"):
                raise self.fail(f"{section}.tracking {tracking!r}: choose auto, manifest, listing or both")
            state_dir = self.string(d, "state_dir", section)
            kw.update(consumer=name, tracking=tracking, state_dir=self.path_of(state_dir) if state_dir else None,
                      lookback_ms=self.duration(d, "lookback", section),
                      min_age_ms=self.duration(d, "min_age", section, positive=False),
                      full_scan_every_ms=self.duration(d, "full_scan_every", section, positive=False))
            changed = d.get("allow_changed", False)
            if not isinstance(changed, bool):
                raise self.fail(f"{section}.allow_changed must be true or false, not {changed!r}")
            kw["allow_changed"] = changed
            kw["max_files"] = self.max_files(d, section)
        else:
            kw.update(self.window(d, section))
        layout = self.string(d, "layout", section)
        if layout is None and ("partition" in d or "timezone" in d):
            raise self.fail(f"{section}.partition and .timezone describe a layout: give {section}.layout too")
        if layout is not None:
            from tributary_read.read.resolve import plain_layout

            try:
                kw["layout"] = plain_layout(layout, self.string(d, "partition", section),
                                            self.string(d, "timezone", section) or "UTC")
            except InvalidInputError as e:
                raise self.fail(f"{section}.layout: {e}") from None
        if mode is InputMode.CONSUMER:  # after the layout: a refused initial position names its zone
            kw.update(self.first_run(d, section, root, options, kw.get("layout")))
        fmt = self.string(d, "format", section)
        if fmt is not None:  # compressed text files are read by their extension (.gz, .zst)
            if fmt not in FORMATS:
                raise self.fail(f"{section}.format {fmt!r}: choose one of {', '.join(FORMATS)}")
            kw["format"] = fmt
        kw["schema"] = self.string(d, "schema", section)
        kw["hive_table"] = self.string(d, "hive_table", section)
        kw["read_options"] = self.str_map(d.get("options", {}), f"{section}.options")
        allow = d.get("allow_untracked", False)
        if not isinstance(allow, bool):
            raise self.fail(f"{section}.allow_untracked must be true or false, not {allow!r}")
        kw["allow_untracked"] = allow
        kw["restated"] = self.choice(Restated, d, "restated", section, "refuse")
        return InputSpec(table, root, view, mode, storage_options=options, **kw)

    def first_run(self, d: Mapping, section: str, root: str, options: Mapping[str, str], layout) -> dict[str, Any]:
        """``initial_position`` and ``allow_beyond_horizon`` of a consumer input, checked as the job loads.

        An unquoted TOML date-time (``initial_position = 2024-01-01T06:00:00``) is the one instant
        parser's text, so it is read as a quoted one would be: with an offset, taken; without one,
        refused like every other time without an offset, never read as some zone.
        """
        from datetime import date, time

        from tributary_read.read.consumer_state import InitialPosition

        pos = d.get("initial_position")
        if isinstance(pos, (date, time)):
            pos = pos.isoformat()
        if pos is not None:
            given = pos if isinstance(pos, (str, int)) and not isinstance(pos, bool) else repr(pos)
            try:
                InitialPosition.of(given)
            except InvalidInputError:
                try:
                    InitialPosition.of(given, zone_of(root, options, layout))
                except InvalidInputError as e:
                    raise self.fail(f"{section}.initial_position: {e}") from None
        allow = d.get("allow_beyond_horizon", False)
        if not isinstance(allow, bool):
            raise self.fail(f"{section}.allow_beyond_horizon must be true or false, not {allow!r}")
        return {"initial_position": pos, "allow_beyond_horizon": allow}

    def max_files(self, d: Mapping, section: str) -> int | str | None:
        """``max_files`` of a consumer input (an integer, or ``"off"``), checked as the job loads."""
        from tributary_read.read.consumer_state import max_files_of

        cap = d.get("max_files")
        try:
            max_files_of(cap)
        except InvalidInputError as e:
            raise self.fail(f"{section}.max_files: {e}") from None
        return cap

    def window(self, d: Mapping, section: str) -> dict[str, Any]:
        """``window_form``, ``window`` and ``lag`` of an mtime or manifest input.

        Before the forms had names, the ETL read [T - lag - window, T - lag)
        (now ``"sliding"``) while ``trib files`` read the last whole period
        before T - lag (``"aligned"``, now the default everywhere). Where the
        two differ, a job that names no form is refused rather than silently
        moved to the other window: it says which one it means.
        """
        window = self.duration(d, "window", section)
        lag = self.duration(d, "lag", section, positive=False) or 0
        form_s = self.string(d, "window_form", section)
        if form_s is None:
            if lag or (window is not None and window != self.period_ms):
                raise self.fail(
                    f"{section}: a lag or window needs window_form: \"aligned\" reads the last whole period "
                    f"ending by T - lag (as trib files does; the default when neither is given), \"sliding\" reads "
                    f"[T - lag - window, T - lag) (what trib etl run read before; docs/etl.md)")
            form = WindowForm.ALIGNED
        else:
            try:
                form = WindowForm.parse(form_s, f"{section}.window_form")
            except InvalidInputError as e:
                raise self.fail(str(e)) from None
        if window == self.period_ms:
            window = None  # the same thing said twice (and the calendar's period, 23 or 25 h on a DST day)
        if form is WindowForm.ALIGNED and window is not None:
            raise self.fail(f"{section}.window: the aligned form reads exactly one period (job.period); "
                            "drop window, or say window_form = \"sliding\"")
        if window is not None:  # consecutive runs are one period apart: any other length cannot tile
            from tributary_read.timespec import format_duration_ms

            w, p = format_duration_ms(window), format_duration_ms(self.period_ms)
            if window < self.period_ms:
                raise self.fail(f"{section}.window {w} is shorter than job.period {p}: runs are one period "
                                f"apart, so the rest of every period would never be read; drop window (it "
                                f"defaults to the period) or make job.period {w}")
            raise self.fail(f"{section}.window {w} is longer than job.period {p}: runs are one period apart, so "
                            "files would be read by more than one run, and an mtime or manifest input keeps no "
                            "record to drop them; drop window (it defaults to the period), or read late files "
                            "exactly once with mode = \"consumer\"")
        return {"window_form": form, "window_ms": window, "lag_ms": lag}


def zone_of(root: str, options: Mapping[str, str], layout):
    """A table's zone (its stored layout's, or the plain directory's), or None when it cannot be read."""
    from tributary_read.errors import TributaryError
    from tributary_read.read.resolve import Source

    try:
        src = Source.open(root, options, layout)
    except (TributaryError, OSError):
        return None  # the run reports an unreadable input; this only words a refusal
    return src.layout.tz if src.layout is not None else None
