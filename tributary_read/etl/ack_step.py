"""Step 5, ack (and step 0, recovery): ack the consumer plans a commit recorded.

Only plans recorded in a commit are ever acked, so a file is acked only once
its rows are committed. A run first acks what the job's last commit recorded
but a crash left unacked (only the last commit can have any), so those files
are never read twice, even when the crashed hour is never rerun. Acking one
plan twice is a no-op, so the step simply runs again after a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tributary_read.errors import TributaryError
from tributary_read.etl.record import SCHEDULE_KEY, InputRecord, RunRecord
from tributary_read.etl.report import AckReport, RecoveredReport, iso_z

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.etl.run import _Run


def recover(run: _Run) -> None:
    """Ack the plans the job's last commit recorded but never acked (see the module docstring)."""
    last = run.output.log.last_transaction(run.job.app_id)
    if last is None:
        return
    for r in RunRecord.of(last.transaction).plans:
        c = consumer_for(run, r)
        pending = c.pending() if c.exists() else None
        if pending is None or pending.plan_id != r.plan_id:
            continue
        at = iso_z(last.transaction.offsets.get(SCHEDULE_KEY, 0))
        if not run.dry_run:
            run.say(f"acking plan {r.plan_id} of consumer {c.name}, committed at version {last.version} "
                    f"by the run of {at} (it ended before its ack)")
            c.ack(r.plan_id)
        run.recovered.append(RecoveredReport(r.view, c.name, r.plan_id, at, last.version, would_ack=run.dry_run))


def consumer_for(run: _Run, r: InputRecord):
    """The consumer of a recorded input (its table as recorded; options and layout from the job)."""
    from tributary_read.read.consumer import Consumer
    from tributary_read.read.resolve import Source

    spec = next((s for s in run.job.inputs if s.view == r.view), None)
    options = spec.storage_options if spec is not None else {}
    layout = spec.layout if spec is not None else None
    root = r.table or (spec.root if spec else None)
    if not root:
        raise TributaryError(f"the commit records input {r.view!r} without its table; ack it by hand")
    return Consumer(Source.open(root, options, layout), r.consumer, r.state_dir, options)


def ack(run: _Run, plans: tuple[InputRecord, ...]) -> None:
    """Ack each recorded plan; acking one twice is a no-op.

    A stale plan (the consumer moved past it: acked earlier and followed by
    later plans, or reset by hand) has nothing left to ack here; it is
    reported, not raised, because the output's commit already stands. A plan
    that held partitions back is acked like any other; the run then ends with
    PartitionsHeldError (exit 17) naming them.
    """
    from tributary_read.errors import StalePlanError

    for r in plans:
        c = consumer_for(run, r)
        try:
            result = c.ack(r.plan_id)
            run.acked.append(AckReport(r.view, c.name, r.plan_id, result.already_acked,
                                       held=tuple(f"{h.path} ({', '.join(h.changes)})" for h in result.held)))
            if result.held:  # acked: the rest is committed; the run still ends with exit 17 (run_job)
                run.held.append(f"input {r.view}: {c.held_error(result.held, r.plan_id)}")
        except StalePlanError as e:
            run.say(f"warning: input {r.view}: {e}")
            run.acked.append(AckReport(r.view, c.name, r.plan_id, already_acked=True, stale=True))
