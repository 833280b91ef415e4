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

from tributary_read.errors import InvalidInputError
from tributary_read.etl.job_inputs import _InputParser
from tributary_read.etl.job_stream import parse_stream
from tributary_read.etl.remote import is_connect_url
from tributary_read.etl.spec import (  # noqa: F401 - the values and each section's keys; is_uri as before
    _HIVE_KEYS, _JOB_KEYS, _OUTPUT_KEYS, _SECTIONS, _SPARK_KEYS, HOUR_MS, HiveSpec, InputMode, InputSpec, OutputSpec,
    SparkSpec, StreamSpec, is_uri)
from tributary_read.read.window import Schedule
from tributary_read.secret import redacted_url
from tributary_read.table.layout import parse_timezone
from tributary_read.table.timeunit import JOB_FILE, IntegerTimes
from tributary_read.timespec import parse_duration_ms

#: Job names become an app id (``etl:NAME``), consumer names and a lock file name.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def app_id(job_name: str) -> str:
    """The app id of job ``job_name``'s transactions in its output's log (:attr:`Job.app_id`)."""
    return f"etl:{job_name}"


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
    #: ``[stream]``: a streaming job (``trib etl stream``), which has no ``[[inputs]]``
    stream: StreamSpec | None = None

    @property
    def app_id(self) -> str:
        """The transaction's app id in the output's log: one per job."""
        return app_id(self.name)

    def needs(self, command: str) -> None:
        """Refuse a streaming job in ``trib etl run|submit`` and a batch job in ``trib etl stream``."""
        if (self.stream is not None) != (command == "stream"):
            other = "trib etl stream" if self.stream is not None else "trib etl run"
            what = "[stream]" if self.stream is not None else "[[inputs]] and no [stream]"
            raise InvalidInputError(f"job {self.name} has {what}: run it with {other}, not trib etl {command}")

    @property
    def tz(self) -> tzinfo:
        return parse_timezone(self.timezone) if self.timezone != "UTC" else timezone.utc

    @property
    def catalog(self):
        """The metastore the job's Spark session must have as its catalog: ``[hive] metastore`` when it
        is the Spark catalog (the sync then runs on that session); None when the sync opens its own client."""
        u = self.hive.metastore_uri if self.hive is not None else None
        return u if u is not None and u.is_spark_catalog else None

    def schedule(self, spec: InputSpec) -> Schedule:
        """The window rule of an mtime or manifest input: the job's period and zone, the input's lag and form."""
        return Schedule(self.period_ms, spec.lag_ms, spec.window_form, spec.window_ms, self.tz)

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
                "spark": self.spark.to_json(), **({"stream": self.stream.to_json()} if self.stream else {})}


# -- parsing --------------------------------------------------------------------------


class _Parser(_InputParser):
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
        stream = parse_stream(self, data["stream"]) if "stream" in data else None
        if stream is not None and raw_inputs is not None:
            raise self.fail("a job reads either [stream] (trib etl stream) or [[inputs]] (trib etl run), not both")
        if stream is None and not raw_inputs:
            raise self.fail("missing [[inputs]] (at least one table to read), or [stream] for trib etl stream")
        if raw_inputs is not None and not isinstance(raw_inputs, list):
            raise self.fail("inputs must be an array of tables: write [[inputs]]")
        inputs = tuple(self.input(x, i, name) for i, x in enumerate(raw_inputs or ()))
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
        from tributary_read.io.location import same_location

        own = next((i for i in inputs if same_location(i.root, output.root)), None)
        if own is not None:  # each run would read what the run before it wrote, every hour, forever
            raise self.fail(f"input {own.view} reads the job's own [output] table {output.root}: a job cannot "
                            "read its output; write to another table")
        if stream is not None and hive is not None and hive.create:
            raise self.fail("hive.create is for trib etl run: a stream job mounts into an existing Hive table")
        if stream is not None and output.mode != "append":
            raise self.fail("output.mode restate is for trib etl run: a stream job appends each batch")
        if stream is not None and spark.remote:
            raise self.fail("spark.remote is for trib etl run: trib etl stream runs its driver here")
        if stream is not None and spark.deploy_mode == "cluster":
            raise self.fail("spark.deploy_mode cluster: trib etl stream runs its driver here (client)")
        return Job(name, self.path, sql_path, sql, inputs, output, hive, spark, period, tz, count,
                   self.path_of(lock_dir) if lock_dir else None, stream)

    def sql(self, value: str) -> tuple[str, str]:
        """The SQL file: relative to the job file (or absolute), else a warehouse example shipped in ``sql/warehouse/``.

        Only the warehouse examples are job SQL; the metastore templates are trib's own DDL.
        """
        local = self.path_of(value)

        def candidates():
            yield local
            if not is_uri(value) and os.sep not in value and "/" not in value:
                from tributary_read.hive.sql import WAREHOUSE_DIR  # imports the hive package: only if needed

                yield str(WAREHOUSE_DIR / value)

        for c in candidates():
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
        raise self.fail(f"job.sql {value!r} not found (looked at {local}, and among the packaged "
                        "sql/warehouse/ examples)")

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
        from tributary_read.etl.spec import SCHEMA_CHANGES, OutputMode

        change = self.string(d, "schema_change", "output") or "refuse"
        if change not in SCHEMA_CHANGES:
            raise self.fail(f"output.schema_change {change!r}: choose {' or '.join(SCHEMA_CHANGES)}")
        mode = self.choice(OutputMode, d, "mode", "output", "append")
        root, options = self.root_of(table)
        return OutputSpec(table, root, col, options, times, change, mode, self.restate_by(d, mode))

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
        create = d.get("create", False)
        if not isinstance(create, bool):
            raise self.fail(f"hive.create must be true or false, not {create!r}")
        return HiveSpec(table, metastore, self.string(d, "location_base", "hive"), batch,
                        self.path_of(state_dir) if state_dir else None,
                        self.duration(d, "full_sync_every", "hive"), create)

    def spark(self, x: Any) -> SparkSpec:
        d = self.table_of(x, "spark")
        self.check_keys(d, _SPARK_KEYS, "spark")
        mode = self.string(d, "deploy_mode", "spark")
        if mode not in (None, "client", "cluster"):
            raise self.fail(f"spark.deploy_mode {mode!r}: choose client or cluster")
        archives = self.string(d, "archives", "spark")
        remote = self.string(d, "remote", "spark")
        if remote is not None:
            if not is_connect_url(remote):
                raise self.fail(f"spark.remote = {redacted_url(remote)!r}: a Spark Connect server is sc://HOST:PORT")
            other = next((k for k in ("master", "deploy_mode", "archives") if d.get(k) is not None), None)
            if other:
                raise self.fail(f"spark.remote runs the job on a Spark Connect server; spark.{other} is for a "
                                "driver of its own: give one or the other")
        return SparkSpec(self.string(d, "master", "spark"), self.str_map(d.get("conf", {}), "spark.conf"), mode,
                         self.path_of(archives) if archives else None, remote)
