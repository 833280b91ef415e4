"""What a run read, as its commit keeps it: the transaction meta's ``inputs``.

The record is the only thing a rerun, or the next run's recovery, may trust
about a committed hour: it acks the plans recorded here, never the plans it
would make now. So it is written once, by the run that commits, and read back
from the log. Its JSON form is the dict form earlier versions wrote (view ->
table, mode, files, consumer, plan_id, state_dir, window), so commits already
in users' logs read the same; unknown keys are ignored, a malformed entry is
skipped rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tributary_read.table.manifest import Transaction

#: The offsets key of an ETL transaction (the aligned schedule time, epoch ms).
SCHEDULE_KEY = "schedule_time_ms"
#: The app id prefix of a job's backfills (``trib etl run JOB --restate``): apart from its scheduled runs'
#: (``etl:JOB``), so a scheduled run's recovery never takes one for its own.
BACKFILL_PREFIX = "etl-restate:"


@dataclass(frozen=True)
class InputRecord:
    """One input of a committed run: where it read, and the consumer plan to ack (if any)."""

    view: str
    table: str
    mode: str
    files: int = 0
    consumer: str | None = None
    plan_id: str | None = None
    state_dir: str | None = None
    window: tuple[int, int] | None = None  # [start_ms, end_ms] of a window input
    #: files of the plan left unread by ``trib consumer skip`` (acked with the plan: delivered, never read)
    skipped: tuple[str, ...] = ()

    def to_json(self) -> dict:
        d: dict[str, Any] = {"table": self.table, "mode": self.mode, "files": self.files}
        if self.plan_id is not None:
            d.update(consumer=self.consumer, plan_id=self.plan_id)
            if self.state_dir:
                d["state_dir"] = self.state_dir
            if self.skipped:
                d["skipped"] = list(self.skipped)
        if self.window is not None:
            d["window"] = list(self.window)
        return d

    @classmethod
    def from_json(cls, view: str, d: Mapping) -> InputRecord:
        w = d.get("window")
        window = (int(w[0]), int(w[1])) if isinstance(w, (list, tuple)) and len(w) == 2 else None
        files = d.get("files")
        skipped = d.get("skipped")
        skipped = tuple(str(p) for p in skipped) if isinstance(skipped, list) else ()
        return cls(str(view), str(d.get("table") or ""), str(d.get("mode") or ""),
                   files if isinstance(files, int) else 0, _opt(d.get("consumer")), _opt(d.get("plan_id")),
                   _opt(d.get("state_dir")), window, skipped)


@dataclass(frozen=True)
class RunRecord:
    """The inputs a run read, in the job's order (see the module docstring)."""

    inputs: tuple[InputRecord, ...] = ()

    @property
    def plans(self) -> tuple[InputRecord, ...]:
        """The consumer inputs: their plans are what the ack step acks."""
        return tuple(i for i in self.inputs if i.plan_id)

    def to_json(self) -> dict:
        return {i.view: i.to_json() for i in self.inputs}

    @classmethod
    def from_json(cls, d: Any) -> RunRecord:
        if not isinstance(d, Mapping):
            return cls()
        return cls(tuple(InputRecord.from_json(k, v) for k, v in d.items() if isinstance(v, Mapping)))

    @classmethod
    def of(cls, t: Transaction | None) -> RunRecord:
        """The record in ``t``'s meta (an empty record for a transaction without one)."""
        return cls.from_json((t.meta or {}).get("inputs")) if t is not None else cls()


def transaction_for(app_id: str, schedule_ms: int, schedule_time: str, record: RunRecord | None = None) -> Transaction:
    """The run's transaction: its identity is ``(app_id, schedule_ms)``; the meta carries the record."""
    meta: dict[str, Any] = {"schedule_time": schedule_time}
    if record is not None:
        meta["inputs"] = record.to_json()
    return Transaction(app_id, {SCHEDULE_KEY: schedule_ms}, meta)


#: The meta key of a restate run's partitions held back for what lay in them (etl/restate.py ``owed``): the
#: input that touched them was acked with the run's plan, so the next run finds them here.
HELD_KEY = "restate_held"
#: The meta key of the partitions a restate run recomputed because the job's last run held them back: what
#: ``held_back`` in its ``output.restated`` says, for the run and for every later reader of its commit.
OWED_KEY = "restate_owed"


def with_held(t: Transaction, held: tuple[str, ...], owed: tuple[str, ...] = ()) -> Transaction:
    """``t`` with the restate partitions its run held back, and those it recomputed for an earlier run that
    held them back, recorded (``t`` itself when there are none)."""
    meta = {**t.meta, **({HELD_KEY: list(held)} if held else {}), **({OWED_KEY: list(owed)} if owed else {})}
    return Transaction(t.app_id, t.offsets, meta) if held or owed else t


def held_partitions(t: Transaction | None, key: str = HELD_KEY) -> tuple[str, ...]:
    """The partitions :func:`with_held` recorded in ``t`` under ``key`` (none for a transaction without)."""
    held = (t.meta or {}).get(key) if t is not None else None
    return tuple(str(d) for d in held) if isinstance(held, list) else ()


def _opt(v: Any) -> str | None:
    return str(v) if v is not None and v != "" else None


def find_commit(table, app_id: str, schedule_ms: int):
    """The commit of ``(app_id, schedule_ms)`` in ``table``'s log, or None.

    The table state answers a new hour and a rerun of the latest at once; only
    a rerun of an older hour (a backfill) reads the job's commits
    (:meth:`~tributary_read.table.log.ManifestLog.find_transaction`).
    """
    return table.log.find_transaction(transaction_for_lookup(app_id, schedule_ms))


def transaction_for_lookup(app_id: str, schedule_ms: int) -> Transaction:
    return Transaction(app_id, {SCHEDULE_KEY: schedule_ms})


def backfill_transaction(job_name: str, start_ms: int, end_ms: int, call_ms: int) -> Transaction:
    """A backfill's transaction (tributary_read/etl/backfill.py): its own app id, the interval of event time
    it recomputes and the call's time as offsets, so each call commits once."""
    return Transaction(BACKFILL_PREFIX + job_name, {"start_ms": start_ms, "end_ms": end_ms, "call_ms": call_ms})
