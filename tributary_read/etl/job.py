"""A job file (``JOB.toml``) as frozen values: what ``trib etl run`` reads, writes and syncs.

Every key is checked: an unknown key is an error naming it, never ignored, so
a typo (``lokback``) cannot silently fall back to a default and read the wrong
files. Relative paths (table roots, the SQL file, state and lock directories)
resolve against the job file's directory, so a job runs the same from any
working directory (cron starts in ``$HOME``, Airflow in a temporary one).
docs/etl.md lists every key.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import timezone, tzinfo
from typing import Any, Mapping
from urllib.parse import urlparse

from tributary_read.choice import Choice
from tributary_read.errors import InvalidInputError
from tributary_read.io.formats import FORMATS
from tributary_read.read.window import Schedule, WindowForm
from tributary_read.table.layout import Layout, parse_timezone
from tributary_read.table.timeunit import JOB_FILE, IntegerTimes
from tributary_read.timespec import parse_duration_ms

#: Job names become an app id (``etl:NAME``), consumer names and a lock file name.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
#: Spark temp view names: SQL identifiers.
_VIEW = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
HOUR_MS = 3_600_000


class InputMode(Choice):
    """How an input's files for one run are chosen (see docs/etl.md)."""

    #: a durable consumer: every file not delivered yet, exactly once across runs
    CONSUMER = "consumer"
    #: files whose modification time lies in the run's window
    MTIME = "mtime"
    #: files of the commits whose commit time lies in the run's window (trib tables)
    MANIFEST = "manifest"


@dataclass(frozen=True)
class InputSpec:
    """One ``[[inputs]]`` entry: a table (or plain directory) read as a temp view."""

    table: str  # as written in the job file (a root or a trib.toml alias)
    root: str  # resolved: an absolute path or a URI
    view: str
    mode: InputMode
    #: consumer mode: its name (default ``etl-<job>-<view>``), tracking, state and listing options
    consumer: str | None = None
    tracking: str = "auto"
    state_dir: str | None = None
    lookback_ms: int | None = None
    min_age_ms: int | None = None
    full_scan_every_ms: int | None = None
    #: mtime / manifest mode: the run's window (read/window.py ``Schedule``, built with the job's period
    #: and zone by :meth:`Job.schedule`); ``window_ms`` is the sliding form's length only
    window_form: WindowForm = WindowForm.ALIGNED
    window_ms: int | None = None
    lag_ms: int = 0
    #: a plain directory: its layout; format overrides for any input
    layout: Layout | None = None
    format: str | None = None
    schema: str | None = None
    hive_table: str | None = None
    read_options: Mapping[str, str] = field(default_factory=dict, hash=False)
    storage_options: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)
    #: read a manifest-tracked table's manifest even though files other tools wrote are left
    #: out (a warning); without it the run fails with exit 13 (tributary_read.read.tracking)
    allow_untracked: bool = False

    def to_json(self) -> dict:
        d: dict[str, Any] = {"table": self.table, "root": self.root, "view": self.view, "mode": str(self.mode)}
        if self.mode is InputMode.CONSUMER:
            d.update(consumer=self.consumer, tracking=self.tracking, state_dir=self.state_dir,
                     lookback_ms=self.lookback_ms, min_age_ms=self.min_age_ms)
        else:
            d.update(window_form=str(self.window_form), lag_ms=self.lag_ms)
            if self.window_form is WindowForm.SLIDING:
                d["window_ms"] = self.window_ms
        if self.layout is not None:
            d["layout"] = self.layout.to_dict()
        if self.format is not None:
            d["format"] = self.format
        if self.allow_untracked:
            d["allow_untracked"] = True
        for k in ("schema", "hive_table"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.read_options:
            d["options"] = dict(self.read_options)
        return d


@dataclass(frozen=True)
class OutputSpec:
    table: str
    root: str
    time_column: str
    storage_options: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)
    #: ``time_unit`` / ``allow_any_time``: how an integer time column becomes epoch ms, and its check
    times: IntegerTimes = IntegerTimes(spelling=JOB_FILE)

    def to_json(self) -> dict:
        return {"table": self.table, "root": self.root, "time_column": self.time_column,
                "time_unit": None if self.times.unit is None else str(self.times.unit),
                "allow_any_time": self.times.allow_any}


@dataclass(frozen=True)
class HiveSpec:
    """``[hive]``: sync the output's partitions after each commit (add new, refresh late)."""

    table: str
    metastore: str
    location_base: str | None = None
    batch_size: int | None = None
    state_dir: str | None = None

    @property
    def metastore_uri(self):
        """The metastore, parsed (:class:`~tributary_read.hive.uri.MetastoreURI`; checked when the job loaded)."""
        from tributary_read.hive.uri import MetastoreURI

        return MetastoreURI.parse(self.metastore)

    def to_json(self) -> dict:
        return {k: v for k, v in (("table", self.table), ("metastore", self.metastore),
                                  ("location_base", self.location_base), ("batch_size", self.batch_size),
                                  ("state_dir", self.state_dir)) if v is not None}


@dataclass(frozen=True)
class SparkSpec:
    """``[spark]``: where the SQL runs; ``deploy_mode``/``archives`` are for ``trib etl submit``."""

    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict, hash=False)
    deploy_mode: str | None = None
    archives: str | None = None  # a packed Python environment (conda-pack / venv-pack)

    def to_json(self) -> dict:
        return {"master": self.master, "conf": dict(self.conf), "deploy_mode": self.deploy_mode,
                "archives": self.archives}


@dataclass(frozen=True)
class Job:
    """A parsed job file. Build it with :meth:`load` (or :meth:`from_dict` in tests)."""

    name: str
    path: str  # the job file, absolute ("" when built from a dict)
    sql_path: str
    sql: str
    inputs: tuple[InputSpec, ...]
    output: OutputSpec
    hive: HiveSpec | None = None
    spark: SparkSpec = field(default_factory=SparkSpec)
    #: schedule times are floored to this period in ``timezone`` (one run per period)
    period_ms: int = HOUR_MS
    timezone: str = "UTC"
    #: count each input's records (one extra pass over inputs whose manifest has no counts)
    count_inputs: bool = True
    lock_dir: str | None = None

    @property
    def app_id(self) -> str:
        """The transaction's app id in the output's log: one per job."""
        return f"etl:{self.name}"

    @property
    def tz(self) -> tzinfo:
        return parse_timezone(self.timezone) if self.timezone != "UTC" else timezone.utc

    def schedule(self, spec: InputSpec) -> Schedule:
        """The window rule of an mtime or manifest input: the job's period and zone, the input's lag and form."""
        return Schedule(self.period_ms, spec.lag_ms, spec.window_form, spec.window_ms, self.tz)

    @property
    def catalog(self):
        """The metastore the job's Spark session must have as its catalog: ``[hive] metastore`` when it
        is the Spark catalog (the sync then runs on that session); None when the sync opens its own client."""
        u = self.hive.metastore_uri if self.hive is not None else None
        return u if u is not None and u.is_spark_catalog else None

    @property
    def base_dir(self) -> str:
        return os.path.dirname(self.path) if self.path else os.getcwd()

    @classmethod
    def load(cls, path: str | os.PathLike, config: Mapping | None = None,
             storage_options: Mapping[str, str] | None = None) -> Job:
        """Read and check a job file.

        ``config`` is trib.toml (table aliases and ``[storage]``);
        ``storage_options`` override both for every table (``trib -o KEY=VALUE``).
        """
        path = os.path.abspath(os.fspath(path))
        try:
            import tomllib
        except ModuleNotFoundError:  # pragma: no cover - 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise InvalidInputError(f"job file {path} does not exist") from None
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise InvalidInputError(f"cannot read job file {path}: {e}") from None
        return cls.from_dict(data, path, config, storage_options)

    @classmethod
    def from_dict(cls, data: Mapping, path: str = "", config: Mapping | None = None,
                  storage_options: Mapping[str, str] | None = None) -> Job:
        return _Parser(path, config or {}, storage_options).job(data)

    def to_json(self) -> dict:
        return {"name": self.name, "path": self.path, "sql": self.sql_path, "period_ms": self.period_ms,
                "timezone": self.timezone, "inputs": [i.to_json() for i in self.inputs],
                "output": self.output.to_json(), "hive": self.hive.to_json() if self.hive else None,
                "spark": self.spark.to_json()}


# -- parsing --------------------------------------------------------------------------
_SECTIONS = {"job", "inputs", "output", "hive", "spark"}
_JOB_KEYS = {"name", "sql", "period", "timezone", "count_inputs", "lock_dir"}
_INPUT_KEYS = {"table", "view", "mode", "consumer", "tracking", "state_dir", "lookback", "min_age",
               "full_scan_every", "window", "window_form", "lag", "layout", "partition", "timezone", "format",
               "schema", "hive_table", "options", "allow_untracked"}
_CONSUMER_ONLY = {"consumer", "tracking", "state_dir", "lookback", "min_age", "full_scan_every"}
_WINDOW_ONLY = {"window", "window_form", "lag"}
_OUTPUT_KEYS = {"table", "time_column", "time_unit", "allow_any_time"}
_HIVE_KEYS = {"table", "metastore", "location_base", "batch_size", "state_dir"}
_SPARK_KEYS = {"master", "conf", "deploy_mode", "archives"}


class _Parser:
    def __init__(self, path: str, config: Mapping, storage_options: Mapping[str, str] | None = None):
        self.path = path
        self.overrides = dict(storage_options or {})
        self.base = os.path.dirname(path) if path else os.getcwd()
        self.config = config
        self.where = os.path.basename(path) or "the job"
        self.period_ms = HOUR_MS

    # -- helpers -------------------------------------------------------------------
    def fail(self, msg: str) -> InvalidInputError:
        return InvalidInputError(f"{self.where}: {msg}")

    def table_of(self, value: Any, section: str) -> Mapping:
        if not isinstance(value, dict):
            raise self.fail(f"[{section}] must be a table, not {type(value).__name__}")
        return value

    def check_keys(self, d: Mapping, allowed: set[str], section: str) -> None:
        for k in d:
            if k not in allowed:
                raise self.fail(f"unknown key {k!r} in [{section}] (known: {', '.join(sorted(allowed))})")

    def string(self, d: Mapping, key: str, section: str, *, required: bool = False) -> str | None:
        v = d.get(key)
        if v is None:
            if required:
                raise self.fail(f"[{section}] needs {key!r}")
            return None
        if not isinstance(v, str) or not v.strip():
            raise self.fail(f"{section}.{key} must be a non-empty string, not {v!r}")
        return v.strip()

    def duration(self, d: Mapping, key: str, section: str, *, positive: bool = True) -> int | None:
        v = d.get(key)
        if v is None:
            return None
        try:
            ms = parse_duration_ms(v, f"{section}.{key}")
        except InvalidInputError as e:
            raise self.fail(str(e)) from None
        if positive and ms == 0:
            raise self.fail(f"{section}.{key} must be positive, not {v!r}")
        return ms

    def path_of(self, value: str) -> str:
        """A local path relative to the job file's directory; a URI as given."""
        if is_uri(value):
            return value
        return os.path.normpath(os.path.join(self.base, os.path.expanduser(value)))

    def root_of(self, name: str) -> tuple[str, dict[str, str]]:
        from tributary_read.table.config import resolve_table

        root, options = resolve_table(name, self.config)
        if root == name:  # not an alias: a root, relative to the job file
            root = self.path_of(name)
        return root, {**options, **self.overrides}

    # -- sections ------------------------------------------------------------------
    def job(self, data: Mapping) -> Job:
        self.check_keys(data, _SECTIONS, "top level")
        if "job" not in data:
            raise self.fail("missing [job] (name and sql)")
        j = self.table_of(data["job"], "job")
        self.check_keys(j, _JOB_KEYS, "job")
        name = self.string(j, "name", "job", required=True)
        if not _NAME.match(name):
            raise self.fail(f"job.name {name!r} must be letters, digits, '_', '.' or '-' (at most 100)")
        sql_path, sql = self.sql(self.string(j, "sql", "job", required=True))
        period = self.period_ms = self.duration(j, "period", "job") or HOUR_MS
        tz = self.string(j, "timezone", "job") or "UTC"
        try:
            parse_timezone(tz)
        except InvalidInputError as e:
            raise self.fail(f"job.timezone: {e}") from None
        count = j.get("count_inputs", True)
        if not isinstance(count, bool):
            raise self.fail(f"job.count_inputs must be true or false, not {count!r}")
        lock_dir = self.string(j, "lock_dir", "job")
        raw_inputs = data.get("inputs")
        if not raw_inputs:
            raise self.fail("missing [[inputs]] (at least one table to read)")
        if not isinstance(raw_inputs, list):
            raise self.fail("inputs must be an array of tables: write [[inputs]]")
        inputs = tuple(self.input(x, i, name) for i, x in enumerate(raw_inputs))
        views = [i.view.lower() for i in inputs]
        dup = next((v for v in views if views.count(v) > 1), None)
        if dup:
            raise self.fail(f"two inputs use view {dup!r}: each view name must be unique")
        consumers = [(i.root, i.state_dir, i.consumer) for i in inputs if i.consumer]
        if len(set(consumers)) != len(consumers):
            raise self.fail("two inputs use the same consumer of the same table: give each its own consumer name")
        if "output" not in data:
            raise self.fail("missing [output] (table and time_column)")
        output = self.output(data["output"])
        hive = self.hive(data["hive"]) if "hive" in data else None
        spark = self.spark(data["spark"]) if "spark" in data else SparkSpec()
        return Job(name, self.path, sql_path, sql, inputs, output, hive, spark, period, tz, count,
                   self.path_of(lock_dir) if lock_dir else None)

    def sql(self, value: str) -> tuple[str, str]:
        """The SQL file: relative to the job file (or absolute), else a name in the packaged ``sql/``."""
        local = self.path_of(value)
        candidates = [local]
        if not is_uri(value) and os.sep not in value and "/" not in value:
            import tributary_read.sql as packaged

            candidates.append(os.path.join(os.path.dirname(packaged.__file__), value))
        for c in candidates:
            if os.path.isfile(c):
                try:
                    with open(c, encoding="utf-8") as f:
                        text = f.read()
                except (OSError, UnicodeDecodeError) as e:
                    raise self.fail(f"cannot read job.sql {c}: {e}") from None
                text = text.strip().rstrip(";").strip()
                if not text:
                    raise self.fail(f"job.sql {c} is empty")
                return c, text
        raise self.fail(f"job.sql {value!r} not found (looked at {local} and in the packaged sql/ directory)")

    def input(self, x: Any, i: int, job: str) -> InputSpec:
        section = f"inputs[{i}]"
        d = self.table_of(x, section)
        self.check_keys(d, _INPUT_KEYS, section)
        table = self.string(d, "table", section, required=True)
        view = self.string(d, "view", section, required=True)
        if not _VIEW.match(view):
            raise self.fail(f"{section}.view {view!r} must be a SQL identifier (letters, digits, '_')")
        mode_s = self.string(d, "mode", section) or "consumer"
        try:
            mode = InputMode.parse(mode_s, f"{section}.mode")
        except InvalidInputError as e:
            raise self.fail(str(e)) from None
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
        return InputSpec(table, root, view, mode, storage_options=options, **kw)

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
        if form is WindowForm.ALIGNED and window == self.period_ms:
            window = None  # the same thing said twice
        if form is WindowForm.ALIGNED and window is not None:
            raise self.fail(f"{section}.window: the aligned form reads exactly one period (job.period); "
                            "drop window, or say window_form = \"sliding\"")
        return {"window_form": form, "window_ms": window, "lag_ms": lag}

    def str_map(self, v: Any, what: str) -> dict[str, str]:
        if not isinstance(v, dict):
            raise self.fail(f"{what} must be a table of KEY = VALUE")
        out = {}
        for k, x in v.items():
            if isinstance(x, bool):
                x = "true" if x else "false"
            if not isinstance(x, (str, int, float)):
                raise self.fail(f"{what}.{k} must be a string, number or boolean, not {x!r}")
            out[str(k)] = str(x)
        return out

    def output(self, x: Any) -> OutputSpec:
        d = self.table_of(x, "output")
        self.check_keys(d, _OUTPUT_KEYS, "output")
        table = self.string(d, "table", "output", required=True)
        col = self.string(d, "time_column", "output", required=True)
        unit = self.string(d, "time_unit", "output")
        allow_any = d.get("allow_any_time", False)
        if not isinstance(allow_any, bool):
            raise self.fail(f"output.allow_any_time must be true or false, not {allow_any!r}")
        try:
            times = IntegerTimes(unit, allow_any, JOB_FILE)
        except InvalidInputError as e:
            raise self.fail(f"output.{'allow_any_time' if unit is None else 'time_unit'}: {e}") from None
        root, options = self.root_of(table)
        return OutputSpec(table, root, col, options, times)

    def hive(self, x: Any) -> HiveSpec:
        d = self.table_of(x, "hive")
        self.check_keys(d, _HIVE_KEYS, "hive")
        table = self.string(d, "table", "hive", required=True)
        metastore = self.string(d, "metastore", "hive", required=True)
        from tributary_read.hive.uri import MetastoreURI  # light: no backend is imported

        try:
            MetastoreURI.parse(metastore)
        except InvalidInputError as e:
            raise self.fail(f"hive.metastore: {e}") from None
        if not re.match(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)?$", table):
            raise self.fail(f"hive.table {table!r} must be db.table or table")
        batch = d.get("batch_size")
        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            raise self.fail(f"hive.batch_size must be a whole number >= 1, not {batch!r}")
        state_dir = self.string(d, "state_dir", "hive")
        return HiveSpec(table, metastore, self.string(d, "location_base", "hive"), batch,
                        self.path_of(state_dir) if state_dir else None)

    def spark(self, x: Any) -> SparkSpec:
        d = self.table_of(x, "spark")
        self.check_keys(d, _SPARK_KEYS, "spark")
        mode = self.string(d, "deploy_mode", "spark")
        if mode not in (None, "client", "cluster"):
            raise self.fail(f"spark.deploy_mode {mode!r}: choose client or cluster")
        archives = self.string(d, "archives", "spark")
        return SparkSpec(self.string(d, "master", "spark"), self.str_map(d.get("conf", {}), "spark.conf"), mode,
                         self.path_of(archives) if archives else None)


def is_uri(value: str) -> bool:
    scheme = urlparse(value).scheme
    return len(scheme) > 1  # C:\ is a drive, not a scheme
