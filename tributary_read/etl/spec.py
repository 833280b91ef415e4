"""The job file's values: what ``trib etl run`` reads, writes and syncs, as frozen dataclasses.

:mod:`tributary_read.etl.job` parses a job file into these and a
:class:`~tributary_read.etl.job.Job` (and re-exports them); they are apart so
that each module stays small enough to read whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlparse

from tributary_read.choice import Choice
from tributary_read.read.window import WindowForm
from tributary_read.secret import redacted, redacted_url
from tributary_read.table.layout import Layout
from tributary_read.table.timeunit import JOB_FILE, IntegerTimes

HOUR_MS = 3_600_000
#: ``[output] schema_change``: refuse a run that breaks the output's recorded schema (the default), or allow it.
SCHEMA_CHANGES = ("refuse", "allow")


class OutputMode(Choice):
    """``[output] mode``: what a run does with the output partitions its new input touches (docs/etl.md)."""

    #: the SQL's rows over the new input are added to their partitions (row-to-row SQL)
    APPEND = "append"
    #: each partition the new input touches is recomputed from its complete input and replaced whole
    #: (aggregates, which a late record must correct; tributary_read/etl/restate.py)
    RESTATE = "restate"


class RestateBy(Choice):
    """``[output] restate_by``: how a restate job's recomputed partition reaches directory readers (docs/etl.md).
    Unset: ``swap`` where the output's file system can swap two directories (a local Linux one), else ``move``."""

    #: the partition's directory and the new files' directory swap names in one step: every reader exact
    SWAP = "swap"
    #: the new files stay in a directory of their own and the Hive sync moves the partition's location
    #: there (as ``INSERT OVERWRITE`` does): Hive and trib exact, a plain directory reader sees the old one
    MOVE = "move"


class Restated(Choice):
    """``[[inputs]] restated``: what an append job does with an input table's restated partitions."""

    #: refuse the run (exit 3): their new files hold every record of the partition again, so appending them
    #: doubles what was read before
    REFUSE = "refuse"
    #: read their new files as new rows, knowingly (rows read before are read again)
    READ = "read"


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
    #: the consumer's first run: ``earliest`` (None: the default), ``latest`` or an instant (consumer_state.InitialPosition)
    initial_position: str | int | None = None
    #: acknowledge a digest-only sealed partition that changed inexactly (a warning); without it the partition is
    #: held back and the run, having committed and acked the rest, exits 17
    allow_beyond_horizon: bool = False
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
    #: consumer mode: a delivered file that changed in a way no byte range delivers (shrank, rewritten,
    #: removed, Parquet grew) is acknowledged and reported; without it its partition is held back, the
    #: rest committed, and the run exits 17 (read.ledger)
    allow_changed: bool = False
    #: consumer mode: at most this many files per run, oldest partitions first (an integer or "off"; None:
    #: the default cap, consumer_state.DEFAULT_MAX_FILES); the rest is the run's backlog
    max_files: int | str | None = None
    #: an append job's answer to a restatement in the input (a restate job recomputes what it feeds instead)
    restated: Restated = Restated.REFUSE

    def source(self):
        """What the input reads (:class:`~tributary_read.read.resolve.Source`): its trib table, or the plain
        directory with the job's layout."""
        from tributary_read.read.resolve import Source

        return Source.open(self.root, self.storage_options, self.layout)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"table": self.table, "root": self.root, "view": self.view, "mode": str(self.mode)}
        if self.mode is InputMode.CONSUMER:
            d.update(consumer=self.consumer, tracking=self.tracking, state_dir=self.state_dir,
                     lookback_ms=self.lookback_ms, min_age_ms=self.min_age_ms)
            if self.initial_position is not None:
                d["initial_position"] = self.initial_position
            if self.allow_beyond_horizon:
                d["allow_beyond_horizon"] = True
            if self.max_files is not None:
                d["max_files"] = self.max_files
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
        if self.allow_changed:
            d["allow_changed"] = True
        if self.restated is not Restated.REFUSE:
            d["restated"] = str(self.restated)
        for k in ("schema", "hive_table"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.read_options:
            d["options"] = redacted(self.read_options)
        return d


@dataclass(frozen=True)
class OutputSpec:
    table: str
    root: str
    time_column: str
    storage_options: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)
    #: ``time_unit`` / ``allow_any_time``: how an integer time column becomes epoch ms, and its check
    times: IntegerTimes = IntegerTimes(spelling=JOB_FILE)
    #: ``refuse`` (default): a run whose columns break the table's recorded schema fails with exit 3
    #: before writing; ``allow``: it commits, and the new columns become the recorded ones
    schema_change: str = "refuse"
    mode: OutputMode = OutputMode.APPEND
    #: a restate job's ``restate_by`` (None: decided by the output's storage, table/restate_swap.py)
    restate_by: RestateBy | None = None

    def to_json(self) -> dict:
        return {"table": self.table, "root": self.root, "time_column": self.time_column,
                "time_unit": None if self.times.unit is None else str(self.times.unit),
                "allow_any_time": self.times.allow_any, "schema_change": self.schema_change, "mode": str(self.mode),
                **({"restate_by": str(self.restate_by)} if self.restate_by is not None else {})}


@dataclass(frozen=True)
class HiveSpec:
    """``[hive]``: sync the output's partitions after each commit (add new, refresh late)."""

    table: str
    metastore: str
    location_base: str | None = None
    batch_size: int | None = None
    state_dir: str | None = None
    #: the runs whose schedule time falls on a multiple of this (job's zone) also run a full sync
    full_sync_every: int | None = None
    #: a run that finds the table missing creates it (from the SQL's columns and the output's layout)
    create: bool = False

    @property
    def metastore_uri(self):
        """The metastore, parsed (:class:`~tributary_read.hive.uri.MetastoreURI`; checked when the job loaded)."""
        from tributary_read.hive.uri import MetastoreURI

        return MetastoreURI.parse(self.metastore)

    def to_json(self) -> dict:
        return {k: v for k, v in (("table", self.table), ("metastore", self.metastore),
                                  ("location_base", self.location_base), ("batch_size", self.batch_size),
                                  ("state_dir", self.state_dir), ("full_sync_every_ms", self.full_sync_every),
                                  ("create", self.create or None))
                if v is not None}


@dataclass(frozen=True)
class SparkSpec:
    """``[spark]``: where the SQL runs; ``deploy_mode``/``archives`` are for ``trib etl submit``; ``remote``: a
    Spark Connect server (``sc://HOST:PORT``) instead of a driver of this process (tributary_read/etl/remote.py)."""

    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict, hash=False)
    deploy_mode: str | None = None
    archives: str | None = None  # a packed Python environment (conda-pack / venv-pack)
    remote: str | None = None

    def to_json(self) -> dict:
        return {"master": self.master, "conf": redacted(self.conf), "deploy_mode": self.deploy_mode,
                "archives": self.archives, **({"remote": redacted_url(self.remote)} if self.remote else {})}


class StreamSource(Choice):
    """What ``[stream]`` reads: Spark's own streaming sources (docs/streaming.md)."""

    #: new files in a directory (Spark's file source: json, csv, parquet, orc, text)
    FILES = "files"
    #: Spark's ``rate`` source: generated rows (timestamp, value), for trials and benchmarks
    RATE = "rate"
    #: a Kafka topic through Spark's Kafka connector, which the cluster provides (spark-sql-kafka)
    KAFKA = "kafka"


@dataclass(frozen=True)
class StreamSpec:
    """``[stream]``: the streaming input of ``trib etl stream`` (the SQL reads it as ``view``)."""

    source: StreamSource
    checkpoint: str  # Spark's checkpointLocation: where the query keeps its offsets
    view: str = "stream"
    #: the processing-time trigger; None: Spark's default (the next batch as soon as the last ends)
    trigger_ms: int | None = None
    #: read what is there in as many batches as the limits say, then stop (``trigger = "available-now"``)
    available_now: bool = False
    path: str | None = None  # files: the directory
    format: str | None = None  # files: json, csv, parquet, orc or text
    schema: str | None = None  # files: DDL of the columns (a stream cannot infer one)
    max_files_per_trigger: int | None = None
    read_options: Mapping[str, str] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"source": str(self.source), "view": self.view, "checkpoint": self.checkpoint,
                             "trigger": "available-now" if self.available_now else self.trigger_ms}
        for k in ("path", "format", "schema", "max_files_per_trigger"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.read_options:
            d["options"] = redacted(self.read_options)
        return d


# -- the keys each section takes (anything else is an error naming it) -------------------
_SECTIONS = {"job", "inputs", "output", "hive", "spark", "stream"}
_STREAM_KEYS = {"source", "view", "checkpoint", "trigger", "path", "format", "schema", "max_files_per_trigger",
                "options"}
STREAM_FORMATS = ("json", "csv", "parquet", "orc", "text")
_JOB_KEYS = {"name", "sql", "period", "timezone", "count_inputs", "lock_dir"}
_INPUT_KEYS = {"table", "view", "mode", "consumer", "tracking", "state_dir", "lookback", "min_age",
               "full_scan_every", "window", "window_form", "lag", "layout", "partition", "timezone", "format",
               "schema", "hive_table", "options", "allow_untracked", "initial_position", "allow_beyond_horizon",
               "allow_changed", "max_files", "restated"}
_CONSUMER_ONLY = {"consumer", "tracking", "state_dir", "lookback", "min_age", "full_scan_every", "initial_position",
                  "allow_beyond_horizon", "allow_changed", "max_files"}
_WINDOW_ONLY = {"window", "window_form", "lag"}
_OUTPUT_KEYS = {"table", "time_column", "time_unit", "allow_any_time", "schema_change", "mode", "restate_by"}
_HIVE_KEYS = {"table", "metastore", "location_base", "batch_size", "state_dir", "full_sync_every", "create"}
_SPARK_KEYS = {"master", "conf", "deploy_mode", "archives", "remote"}


def is_uri(value: str) -> bool:
    scheme = urlparse(value).scheme
    return len(scheme) > 1  # C:\ is a drive, not a scheme
