"""A run's OpenLineage events (docs/observability.md): what it read, exactly, and what it committed.

* START once the inputs are resolved: each input table with the exact files of this run;
* before the commit, the COMPLETE event (all but the output's commit) is kept in the output's outbox
  (:mod:`tributary_read.lineage.outbox`): the commit keeps only counts, and a window's files cannot be
  resolved again, so this is what a run killed after its commit leaves for the next one;
* after the commit, the sync and the ack, the COMPLETE of every kept event whose transaction is
  committed is sent (this run's, and one an earlier run could not send), then dropped.

Every try of one (job, schedule time) has one run id. A backfill (``trib etl run JOB --restate``,
tributary_read/etl/backfill.py) sends the same events as its own run (each call one, under its own app id
and transaction), its interval as the nominal time and in a ``tributary_backfill`` run facet. Nothing here
fails a run: with no transport configured nothing is built, and a send that fails is one warning line
(the event stays kept).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from tributary_read.etl.record import BACKFILL_PREFIX
from tributary_read.lineage.event import facet, input_dataset, iso_ms, run_event, run_id, table_output
from tributary_read.lineage.outbox import Outbox
from tributary_read.lineage.runs import namespace
from tributary_read.lineage.transport import Emitter, error_text

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.etl.run import _Run


def _emitter(run: _Run) -> Emitter | None:
    em = getattr(run, "lineage", None)
    if em is None:
        em = run.lineage = Emitter(lambda msg: run.say(f"warning: {msg}"))
    return em if em.enabled else None


def _identity(run: _Run) -> tuple[str, str]:
    """The run's app id and its key in the outbox: a scheduled run's schedule time; a backfill's interval and
    call time (the offsets of its transaction: each call is a run of its own)."""
    if run.backfill is not None:
        return BACKFILL_PREFIX + run.job.name, f"{run.backfill[0]}_{run.backfill[1]}_{run.t}"
    return run.job.app_id, str(run.t)


def _commit(run: _Run, app: str, key: str):
    """The commit of the run kept under (``app``, ``key``) in the output's log, or None."""
    from tributary_read.etl.record import backfill_transaction, find_commit

    if app.startswith(BACKFILL_PREFIX):
        start, end, call = (int(x) for x in key.split("_"))
        return run.output.log.find_transaction(backfill_transaction(run.job.name, start, end, call))
    return find_commit(run.output, app, int(key))


def _event(run: _Run, event_type: str, error: str | None = None) -> dict:
    from tributary_read.read.window import Schedule

    facets = {}
    if run.backfill is not None:  # the event time it recomputes, and that it is a backfill
        nominal, rid = run.backfill, run_id("etl-restate", run.job.name, run.t)
        facets["tributary_backfill"] = facet("tributary_backfill", interval={
            "start": iso_ms(nominal[0]), "end": iso_ms(nominal[1])})
    else:
        nominal = Schedule(run.job.period_ms, tz=run.job.tz).interval(run.t)  # the period before the run
        rid = run_id("etl", run.job.name, run.t)
    hive = run.job.hive
    inputs = [input_dataset(i.table, i.paths, size=i.bytes, rows=i.records, version=i.plan_id,
                            columns=run.input_columns.get(i.view), hive_table=spec.hive_table,
                            hive_namespace=_hive_namespace(hive.metastore) if hive and spec.hive_table else None)
              for spec, i in zip(run.job.inputs, run.inputs)]
    return run_event(event_type, run=rid, namespace=namespace(), job=run.job.name, event_ms=int(time.time() * 1000),
                     nominal=nominal, inputs=inputs, error=error, facets=facets)


@contextmanager
def failing(run: _Run) -> Iterator[None]:
    """Around a run: a failure sends FAIL (a signal, ABORT), unless the log holds the run's commit (a
    failure after it, at the sync or the ack: its kept COMPLETE is sent by the next run).

    The run's kept COMPLETE is dropped with it (replaced by the FAIL when that could not be sent), unless
    the commit's outcome is unknown (a lost reply: the next run reads the log and sends COMPLETE or, past
    :data:`STALE_MS`, FAIL).
    """
    try:
        yield
    except BaseException as e:
        em = _emitter(run) if not run.dry_run else None
        if em is not None:
            try:
                from tributary_read.errors import CommitStateUnknownError
                from tributary_read.exits import Terminated

                app, key = _identity(run)
                if _commit(run, app, key) is None:
                    stopped = isinstance(e, (Terminated, KeyboardInterrupt))
                    ev = _event(run, "ABORT" if stopped else "FAIL", None if stopped else f"{type(e).__name__}: {e}")
                    box = Outbox(run.output.storage)
                    if isinstance(e, CommitStateUnknownError):
                        em.send(ev)  # the kept COMPLETE stays: the next run reads the log
                    elif em.send(ev):
                        box.drop(app, key)
                    else:
                        box.put(app, key, ev)  # the next run sends it
            except Exception as sent:  # noqa: BLE001 - lineage never fails the run (nor hides its error)
                run.say(f"warning: lineage: {error_text(sent)}")
        raise


def enabled(run: _Run) -> bool:
    """Whether this run sends lineage events (a transport is configured)."""
    return _emitter(run) is not None


def started(run: _Run) -> None:
    """START, once the inputs are resolved."""
    em = _emitter(run)
    if em is not None:
        em.send(_event(run, "START"))


def keep(run: _Run) -> None:
    """Before the commit: the COMPLETE event, less its output, into the output's outbox."""
    if _emitter(run) is not None:
        try:
            Outbox(run.output.storage).put(*_identity(run), _event(run, "COMPLETE"))
        except Exception as e:  # noqa: BLE001 - lineage never fails the run
            run.say(f"warning: lineage: the COMPLETE event of {run.job.name} could not be kept: {error_text(e)}")


#: A kept event whose hour is not committed this long after it was kept belongs to a run that died
#: before its commit (kill -9): the next run sends FAIL for it and drops it. Runs of one job on other
#: machines are not under this machine's lock, so a younger one may be a live run's (``trib clean``'s
#: grace period, for the same reason).
STALE_MS = 24 * 3_600_000


def completed(run: _Run) -> None:
    """After the ack: send every kept COMPLETE whose transaction is committed (this run's first), every
    kept FAIL or ABORT (its run could not send it), and FAIL for a stale one whose run died before its
    commit."""
    em = _emitter(run)
    if em is None:
        return
    box = Outbox(run.output.storage)
    app, mine = _identity(run)
    try:
        keys = box.keys(app)
        for key in sorted(keys, key=lambda k: (k != mine, k)):
            commit = _commit(run, app, key)
            ev = box.get(app, key)
            if ev is None:
                continue
            now = int(time.time() * 1000)
            if commit is None and ev.get("eventType") in ("FAIL", "ABORT"):
                pass  # a failed run's own terminal event, not sent when it ended
            elif commit is None:  # its run died before the commit, or is still to commit (on another machine)
                if now - _kept_ms(ev) < STALE_MS:
                    continue
                ev.update(eventType="FAIL")  # as ingest's: ABORT is a stop someone asked for (a signal)
                called = int(key.rsplit("_", 1)[-1])  # a schedule time, or a backfill's call time (_identity)
                ev["run"]["facets"]["errorMessage"] = facet(
                    "errorMessage", message=f"the run of {iso_ms(called)} ended before its commit without a word "
                    f"(killed); found by the run of {iso_ms(run.t)}", programmingLanguage="PYTHON")
            else:  # committed (a kept FAIL whose hour a later try committed is that try's COMPLETE)
                ev["eventType"] = "COMPLETE"
                ev["run"]["facets"].pop("errorMessage", None)
                ev["outputs"] = [_output(run, commit)]
            ev["eventTime"] = iso_ms(now)
            if em.send(ev):
                box.drop(app, key)
    except Exception as e:  # noqa: BLE001 - lineage never fails the run
        run.say(f"warning: lineage: {error_text(e)}")


def completed_without_commit(run: _Run) -> None:
    """COMPLETE for a backfill that found nothing to do (no commit: its output has no version)."""
    em = _emitter(run)
    if em is not None:
        ev = _event(run, "COMPLETE")
        ev["outputs"] = [table_output(run.output, [])]
        em.send(ev)


def _kept_ms(ev: dict) -> int:
    from tributary_read.errors import TributaryError
    from tributary_read.timespec import parse_instant

    try:
        return parse_instant(ev["eventTime"])
    except (KeyError, TypeError, ValueError, TributaryError):
        return 0  # unreadable: as old as can be


def _output(run: _Run, commit) -> dict:
    """The output dataset of ``commit`` (its restated partitions and their causes as the commit records them:
    the same for the run that made it and for one that sends its event later)."""
    from tributary_read.etl.restated import restated
    from tributary_read.io.parquet_schema import recorded_columns

    hive = run.job.hive
    return table_output(run.output, [commit], hive_table=hive.table if hive else None,
                        hive_namespace=_hive_namespace(hive.metastore) if hive else None,
                        columns=recorded_columns(commit.transaction.meta if commit.transaction else None),
                        restated=restated(commit))


def _hive_namespace(metastore: str) -> str:
    from tributary_read.hive.uri import MetastoreURI

    return MetastoreURI.parse(metastore).lineage_namespace
