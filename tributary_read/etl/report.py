"""What a run did (or, dry, would do): the report ``trib etl run`` prints, ``--json`` as :meth:`RunReport.to_json`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from tributary_read.read.window import iso
from tributary_read.table.manifest import Transaction

STEPS = ("resolve", "read", "commit", "sync", "ack")


def iso_z(ms: int) -> str:
    """``2024-01-01T05:00:00Z``: how schedulers spell a UTC time (milliseconds only when not zero)."""
    text = iso(ms)
    text = text.replace(".000+", "+") if ".000+" in text else text
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _doc(report: Any, *, unless_false: tuple[str, ...] = ()) -> dict[str, Any]:
    """A report's fields as JSON, in their order; a flag in ``unless_false`` appears only when set.

    Documents stay additive: a flag that is rarely true is omitted rather than
    printed false on every run.
    """
    d: dict[str, Any] = {}
    for f in fields(report):
        v = getattr(report, f.name)
        if f.name in unless_false and not v:
            continue
        d[f.name] = list(v) if isinstance(v, tuple) else v
    return d


@dataclass(frozen=True)
class Step:
    name: str
    status: str  # done | skipped | failed
    seconds: float = 0.0
    reason: str | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {"status": self.status, "seconds": round(self.seconds, 3)}
        if self.reason:
            d["reason"] = self.reason
        return d


@dataclass(frozen=True)
class Left:
    """Data an input's run saw and did not read, and why: ``later`` when a later run reads it by itself."""

    files: int
    why: str
    later: bool
    example: str | None = None

    def to_json(self) -> dict:
        return _doc(self)

    def line(self) -> str:
        then = "a later run reads them" if self.later else "no run reads them"
        eg = f"; e.g. {self.example}" if self.example else ""
        return f"{self.files} {'file' if self.files == 1 else 'files'} {self.why} ({then}{eg})"


@dataclass(frozen=True)
class InputReport:
    view: str
    table: str
    mode: str
    files: int
    bytes: int | None  # None: not known (a rerun that found its commit reads no input)
    records: int | None = None
    consumer: str | None = None
    plan_id: str | None = None
    window: Mapping | None = field(default=None, hash=False)
    late_files: tuple[str, ...] = ()
    beyond_horizon: tuple[str, ...] = ()
    skipped: int = 0
    paths: tuple[str, ...] = ()
    note: str | None = None
    #: files an opted-out input left unread (``allow_untracked = true``; tributary_read.read.tracking)
    untracked: Mapping | None = field(default=None, hash=False)
    #: what the input saw and did not read this run, and why (issue 32: never silent)
    left: tuple[Left, ...] = ()
    #: a consumer input: what its capped plan left for the next runs (files, bytes, oldest partition;
    #: tributary_read.read.backlog), delivered by them
    backlog: Mapping | None = field(default=None, hash=False)
    #: a consumer input: files of its plan left unread by ``trib consumer skip`` (the commit records them)
    skips: tuple[str, ...] = ()
    #: a consumer input: files its plan held back for min_age (tributary_read.read.min_age)
    deferred: int = 0

    def to_json(self, with_paths: bool = False) -> dict:
        d: dict[str, Any] = {"view": self.view, "table": self.table, "mode": self.mode, "files": self.files,
                             "bytes": self.bytes, "records": self.records, "late_files": list(self.late_files)}
        if self.consumer is not None:
            d.update(consumer=self.consumer, plan_id=self.plan_id, beyond_horizon=list(self.beyond_horizon),
                     deferred=self.deferred)
        if self.window is not None:
            d["window"] = dict(self.window)
        if self.skipped:
            d["skipped"] = self.skipped
        if self.note:
            d["note"] = self.note
        if self.untracked:
            d["untracked"] = dict(self.untracked)
        d["left"] = [x.to_json() for x in self.left]
        if self.backlog is not None:
            d["backlog"] = dict(self.backlog)
        if self.skips:
            d["skips"] = list(self.skips)
        if with_paths:
            d["paths"] = list(self.paths)
        return d


@dataclass(frozen=True)
class OutputReport:
    """The output table and what the run's commit (or the commit it found) holds."""

    table: str
    time_column: str
    files: int | None = None  # None: nothing committed yet (a dry run)
    records: int | None = None
    partitions: tuple[str, ...] = ()
    version: int | None = None
    #: a restate job's commit: each partition it recomputed, with its records before and after and its cause
    #: (tributary_read/etl/restated.py)
    restated: tuple[Mapping[str, Any], ...] = ()

    def to_json(self) -> dict:
        d: dict[str, Any] = {"table": self.table, "time_column": self.time_column}
        if self.files is not None:
            d.update(files=self.files, records=self.records, partitions=list(self.partitions),
                     version=self.version, restated=[dict(r) for r in self.restated])
        elif self.partitions:  # a restate job's dry run: the partitions the run would recompute
            d["partitions"] = list(self.partitions)
        return d


@dataclass(frozen=True)
class HiveReport:
    """The Hive step: ``mode`` ``commit`` mounts the commit's partitions; ``full`` also syncs the whole table."""

    table: str
    metastore: str
    added: tuple[str, ...] = ()
    refreshed: tuple[str, ...] = ()
    relocated: tuple[str, ...] = ()
    statements: int = 0
    mode: str = "commit"

    def to_json(self) -> dict:
        return _doc(self)


@dataclass(frozen=True)
class AckReport:
    """One recorded plan the ack step acked (``already_acked``: it was, before; ``stale``: the consumer moved on)."""

    view: str
    consumer: str
    plan_id: str
    already_acked: bool = False
    stale: bool = False
    #: the partitions the acked plan held back (``P (what changed)``): the run exits 17 naming them
    held: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return _doc(self, unless_false=("stale", "held"))


@dataclass(frozen=True)
class RecoveredReport:
    """A plan an earlier committed run left unacked, acked first (or, dry, that would be)."""

    view: str
    consumer: str
    plan_id: str
    schedule_time: str
    version: int
    would_ack: bool = False

    def to_json(self) -> dict:
        return _doc(self, unless_false=("would_ack",))


@dataclass(frozen=True)
class RunReport:
    """What a run did (or, dry, would do); ``trib etl run --json`` prints :meth:`to_json`."""

    job: str
    schedule_time_ms: int
    given_time_ms: int
    transaction: Transaction
    dry_run: bool
    already_committed: bool
    version: int | None
    inputs: tuple[InputReport, ...]
    output: OutputReport
    hive: HiveReport | None = None
    acked: tuple[AckReport, ...] = ()
    recovered: tuple[RecoveredReport, ...] = ()
    steps: tuple[Step, ...] = ()
    sql_path: str = ""
    sql: str = ""
    #: the Hive table looked up before the commit (:class:`~tributary_read.hive.ddl.TableCheck`): a dry run's
    #: check, or a table a run created; None otherwise
    hive_table: Any = None
    #: what the output table's Iceberg mirror did after the commit (:class:`~tributary_read.iceberg.auto.Mirrored`);
    #: None: the table mirrors nothing, or the run committed nothing
    iceberg: Any = None

    @property
    def schedule_time(self) -> str:
        return iso_z(self.schedule_time_ms)

    @property
    def skipped_steps(self) -> list[str]:
        return [s.name for s in self.steps if s.status == "skipped"]

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "job": self.job, "schedule_time": self.schedule_time, "schedule_time_ms": self.schedule_time_ms,
            "dry_run": self.dry_run, "already_committed": self.already_committed, "version": self.version,
            "transaction": self.transaction.to_json(),
            "inputs": [i.to_json(with_paths=self.dry_run) for i in self.inputs],
            "sql": self.sql_path, "output": self.output.to_json(), "hive": self.hive.to_json() if self.hive else None,
            "acked": [a.to_json() for a in self.acked], "recovered": [a.to_json() for a in self.recovered],
            "steps": {s.name: s.to_json() for s in self.steps}, "skipped_steps": self.skipped_steps,
        }
        if self.given_time_ms != self.schedule_time_ms:
            d["given_schedule_time"] = iso_z(self.given_time_ms)
        if self.hive_table is not None:
            d["hive_table"] = self.hive_table.to_json()
        if self.iceberg is not None:
            d["iceberg"] = self.iceberg.to_json()
        if self.dry_run:
            d["sql_text"] = self.sql
        return d

    def raise_error(self) -> None:
        """End the run with its Iceberg mirror's failure (exit 8 or 10), once the report is printed: the
        run's commit stands, and the error names the catch-up command."""
        if self.iceberg is not None:
            self.iceberg.raise_error()
