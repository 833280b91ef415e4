"""Resolve and read in one call: a DataFrame of exactly the run's files, and the :class:`Batch` behind it.

The Python face of what a scheduled job does with the CLI::

    trib files ROOT --consumer NAME --json     ->  df, batch = read_incremental(spark, ROOT, consumer=NAME)
    (process, commit the output)                   (process, commit the output)
    trib consumer ack ROOT NAME PLAN_ID        ->  batch.ack()

Both go through the same :class:`~tributary_read.read.consumer.Consumer`:
until a plan is acked, every call returns the same plan id and files, so a
run that crashed after reading (or after writing, before acking) and runs
again reads exactly the batch it read before, never a smaller or larger one.
An ack before the caller's output is committed would lose that batch on a
crash; an ack after it, followed by a crash, only leaves an already-acked
plan, which acks again as a no-op.

Without a consumer the batch is a window (``mode`` mtime, manifest, both or
auto, as :func:`~tributary_read.read.resolve.resolve`): a run's position is
its schedule time, which the caller owns, so :meth:`Batch.ack` has nothing to
move and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timezone
from typing import TYPE_CHECKING, Any, Mapping

from tributary_read.errors import ChangedFileError, InvalidInputError
from tributary_read.read.fileset import Conflict, FileSet, HeldPartition, LateFile, ResolvedFile
from tributary_read.read.window import TimeWindow
from tributary_read.timespec import parse_duration_ms

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.read.consumer import Consumer

#: ``plan_options`` a consumer's plan takes (:meth:`Consumer.plan`), and those ``resolve`` takes.
CONSUMER_OPTIONS = frozenset({"lookback_ms", "min_age_ms", "full_scan", "full_scan_every_ms", "parallel",
                              "progress", "now_ms", "layout", "initial_position", "allow_beyond_horizon",
                              "allow_changed", "max_files"})
RESOLVE_OPTIONS = frozenset({"since_version", "until_version", "partitions", "parallel", "progress", "layout",
                             "all_files"})
#: The library's parameter names -> this function's (TributaryError.reword).
PARAMETERS = {"read_window": "window", "state_dir": "state_dir", "lister": "lister", "consumer": "a consumer",
              "lookback": "lookback_ms", "min_age": "min_age_ms", "full_scan": "full_scan",
              "full_scan_every": "full_scan_every_ms", "since_version": "since_version",
              "until_version": "until_version", "partitions": "partitions", "parallel": "parallel",
              "all_files": "all_files=True", "versions": "since_version/until_version",
              "initial_position": "initial_position", "allow_changed": "allow_changed=True",
              "max_files": "max_files"}
#: A temp view is named by a plain SQL identifier (no quoting games in the caller's SQL).
_VIEW = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
NOT_A_CONSUMER = "not a consumer batch: nothing to ack (a window's position is the caller's schedule time)"


@dataclass(frozen=True)
class BatchAck:
    """What :meth:`Batch.ack` did: ``acked`` is True only when this call moved a consumer."""

    consumer: str | None
    plan_id: str | None
    acked: bool
    already_acked: bool = False
    version: int | None = None
    note: str = ""

    def to_json(self) -> dict:
        return {"consumer": self.consumer, "plan_id": self.plan_id, "acked": self.acked,
                "already_acked": self.already_acked, "version": self.version, "note": self.note}


@dataclass(frozen=True)
class Batch:
    """The files one :func:`read_incremental` call read, and how to commit having read them.

    ``late``: files a listing consumer found in partitions past its lookback
    horizon (reported once, not delivered); ``conflicts``: delivered files
    whose bytes changed since (acknowledged); ``held``: partitions held back
    because a delivered file there changed (nothing of them is read; ``ack``
    raises PartitionsHeldError naming them); ``deferred``: files younger than
    ``min_age_ms`` left for a later batch. Files that arrive late *inside* the horizon are
    simply in ``fileset`` (that is what a consumer is for).
    """

    fileset: FileSet
    consumer: str | None = None
    plan_id: str | None = None
    late: tuple[LateFile, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    deferred: int = 0
    view: str | None = None
    _owner: Consumer | None = field(default=None, compare=False, repr=False)
    held: tuple[HeldPartition, ...] = ()

    @property
    def files(self) -> tuple[ResolvedFile, ...]:
        return self.fileset.files

    @property
    def bytes(self) -> int:
        return self.fileset.bytes

    def ack(self) -> BatchAck:
        """Mark a consumer batch delivered; call it only once the output made from it is committed.

        Idempotent: acking the same batch again (a re-run after a crash that
        followed the ack) answers ``already_acked``. A stale plan (the consumer
        was reset or moved by someone else) raises StalePlanError. A batch
        without a consumer is not acked and the result says so. A batch whose
        plan held partitions back (a file delivered there was removed or
        rewritten) is acked, then raises PartitionsHeldError naming them, as
        ``trib consumer ack`` exits 17: the job ends failed, its output stands.
        """
        if self._owner is None:
            return BatchAck(None, None, False, note=NOT_A_CONSUMER)
        r = self._owner.ack(self.plan_id)
        if r.held:
            raise self._owner.held_error(r.held, self.plan_id)
        note = (f"plan {self.plan_id} was already acked" if r.already_acked
                else f"acked {self.plan_id}: consumer {self.consumer} at version {r.state.version}")
        return BatchAck(self.consumer, self.plan_id, not r.already_acked, r.already_acked, r.state.version, note)

    def to_json(self, *, files: bool = False) -> dict:
        """A summary for job logs (``files=True`` adds the whole FileSet document)."""
        fs = self.fileset
        d: dict[str, Any] = {
            "consumer": self.consumer, "plan_id": self.plan_id, "mode": fs.mode, "root": fs.root,
            "view": self.view, "files": len(fs.files), "bytes": fs.bytes, "skipped": len(fs.skipped),
            "late": [x.to_json() for x in self.late], "conflicts": [c.to_json() for c in self.conflicts],
            "deferred": self.deferred, "held": [h.to_json() for h in self.held],
            "plan": {k: v for k, v in fs.plan.items() if k not in ("conflicts", "beyond_horizon")},
        }
        if fs.untracked is not None:
            d["untracked"] = fs.untracked.to_json()
        if files:
            d["fileset"] = fs.to_json()
        return d


def read_incremental(spark, source, *, mode: str = "auto", window: TimeWindow | tuple | None = None,
                     schedule_time: str | int | None = None, period: str | int | None = None,
                     lag: str | int | None = None, window_form: str | None = None,
                     window_length: str | int | None = None, consumer: str | None = None, view: str | None = None,
                     options: Mapping[str, str] | None = None, state_dir: str | None = None,
                     schema=None, hive_table: str | None = None, metastore=None,
                     read_options: Mapping[str, str] | None = None, lister=None,
                     allow_untracked: bool = False, **plan_options) -> tuple[Any, Batch]:
    """Resolve this run's files and read exactly them: ``(DataFrame, Batch)``.

    Args:
        source: a table root or trib.toml alias,
            :class:`~tributary_read.table.config.Table` or
            :class:`~tributary_read.read.resolve.Source`.
        mode: as ``trib files --mode`` (a consumer: auto, manifest, mtime or both).
        window: an mtime (or, mode manifest, commit-time) window: a
            :class:`TimeWindow` or ``(start, end)`` as ``TimeWindow.parse``
            takes them. Not with a consumer, whose batch is whatever it has
            not delivered yet.
        schedule_time, period, lag, window_form, window_length: the window
            of a scheduled run, exactly as ``trib files --schedule-time
            --period --lag --window-form --window`` derives it
            (:class:`~tributary_read.read.window.Schedule`, in the table's
            zone). Durations are strings with a unit (``"1h"``) or ms.
        consumer: read the next batch of this durable consumer (see the module
            docstring); ``state_dir`` keeps its state outside a read-only table.
        view: also register the DataFrame as this temp view.
        options: storage options (credentials, endpoint), as for ``resolve``.
        schema, hive_table, metastore, read_options: passed to
            :func:`~tributary_read.spark.read.read_files` (``read_options``
            is its ``options``: Spark reader options such as a delimiter).
        lister: ``"spark"`` lists directories on the executors
            (:mod:`tributary_read.spark.listing`), or any DirectoryLister. Not
            with a consumer: its plan lists only what changed since its last
            batch, on the driver.
        allow_untracked: on a manifest-tracked table, read the manifest's
            files even though files other tools wrote in the batch's scope are
            left out (``batch.fileset.untracked`` names them); without it such a
            batch raises ``UntrackedDataError`` before anything is read.
        all_files: (a plan option) every file, on purpose. A read without a
            consumer, window, version or partition bound is refused: it would
            return every file on every run.
        plan_options: with a consumer, :meth:`Consumer.plan`'s
            ``lookback_ms``, ``min_age_ms``, ``full_scan``,
            ``full_scan_every_ms``, ``parallel``, ``now_ms``,
            ``initial_position`` (the first batch: ``"earliest"``, the
            default, ``"latest"`` or an instant) and ``allow_beyond_horizon``
            (acknowledge a partition sealed with a digest only that changed
            in a way it cannot tell apart; without it that partition is held
            back, the rest read, and ``batch.ack()`` raises PartitionsHeldError),
            ``allow_changed``
            (a delivered file that shrank, was rewritten or removed is
            reported in ``batch.conflicts`` and taken as it is; without it
            its partition is held back, the rest read, and ``batch.ack()``
            raises PartitionsHeldError; a file that only grew is read as a
            byte range either way),
            ``max_files`` (at most this many files per batch, whole
            partitions oldest first, like Spark's ``maxFilesPerTrigger``;
            default 100,000, 0 or ``"off"``: no cap; the rest is the batch's
            ``batch.fileset.plan["backlog"]``, delivered by the next batches);
            otherwise
            ``resolve``'s ``since_version``, ``until_version``,
            ``partitions``, ``parallel``. ``layout`` describes a plain directory.
    """
    from tributary_read.spark import require_pyspark

    require_pyspark()
    from tributary_read.read.resolve import Source
    from tributary_read.read.selection import ReadRequest, select
    from tributary_read.spark.read import read_files

    if view is not None and not (isinstance(view, str) and _VIEW.match(view)):
        raise InvalidInputError(f"bad view name {view!r}: letters, digits and '_', not starting with a digit",
                                view="view name")
    allowed = CONSUMER_OPTIONS if consumer is not None else RESOLVE_OPTIONS
    unknown = sorted(set(plan_options) - allowed)
    if unknown:
        raise InvalidInputError(f"unknown option{'s' * (len(unknown) > 1)} {', '.join(unknown)} for "
                                f"{'a consumer batch' if consumer is not None else 'a window read'}; "
                                f"choose from {', '.join(sorted(allowed))}")
    layout = plan_options.pop("layout", None)
    progress = plan_options.pop("progress", None)
    if isinstance(source, str):  # a root or a trib.toml alias, as the CLI and spark.write take them
        from tributary_read.table.config import load_config, resolve_table

        source, alias_options = resolve_table(source, load_config())
        options = {**alias_options, **(options or {})}
    src = Source.of(source, options, layout)
    tz = src.layout.tz if src.layout else timezone.utc
    if isinstance(window, tuple):
        window = TimeWindow.parse(*window, tz=tz)
    scheduled = (schedule_time, period, lag, window_form, window_length)
    if any(v is not None for v in scheduled):
        if window is not None:
            raise InvalidInputError("give a window or a schedule time, not both", window="window",
                                    schedule_time="schedule_time")
        window = TimeWindow.for_schedule(
            schedule_time=schedule_time, tz=tz, form=window_form,
            period_ms=None if period is None else parse_duration_ms(period, "period"),
            lag_ms=None if lag is None else parse_duration_ms(lag, "lag"),
            window_ms=None if window_length is None else parse_duration_ms(window_length, "window_length"))
    try:
        request = ReadRequest(mode=mode, consumer=consumer, state_dir=state_dir, window=window,
                              allow_untracked=allow_untracked, **plan_options)
        chosen = select(src, request, options=options, progress=progress,
                        lister=_lister(spark, lister, options))
    except InvalidInputError as e:  # this function's parameter names, where the message names one
        raise InvalidInputError(e.reword(PARAMETERS)) from None
    except ChangedFileError as e:
        raise ChangedFileError(e.reword(PARAMETERS)) from None
    fs, plan = chosen.fileset, chosen.plan
    if plan is not None:
        batch = Batch(fs, consumer, plan.plan_id, plan.beyond_horizon, plan.conflicts, plan.deferred, view,
                      chosen.consumer, plan.held)
    else:
        batch = Batch(fs, view=view)
    df = read_files(spark, batch.fileset, schema=schema, hive_table=hive_table, metastore=metastore,
                    options=read_options)
    if view is not None:
        df.createOrReplaceTempView(view)
    return df, batch


def _lister(spark, lister, options: Mapping[str, str] | None):
    if lister is None or not isinstance(lister, str):
        return lister
    if lister != "spark":
        raise InvalidInputError(f"unknown lister {lister!r}; use 'spark' (or omit it to list here)",
                                lister="lister")
    from tributary_read.spark.listing import spark_lister

    return spark_lister(spark, options)
