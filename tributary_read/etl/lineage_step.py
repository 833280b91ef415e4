"""A run's OpenLineage events (docs/observability.md): what it read, exactly, and what it committed.

* START once the inputs are resolved: each input table with the exact files of this run;
* before the commit, the COMPLETE event (all but the output's commit) is kept in the output's outbox
  (:mod:`tributary_read.lineage.outbox`): the commit keeps only counts, and a window's files cannot be
  resolved again, so this is what a run killed after its commit leaves for the next one;
* after the commit, the sync and the ack, the COMPLETE of every kept event whose transaction is
  committed is sent (this run's, and one an earlier run could not send), then dropped.

Every try of one (job, schedule time) has one run id. Nothing here fails a run: with no transport
configured nothing is built, and a send that fails is one warning line (the event stays kept).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

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


def _event(run: _Run, event_type: str, error: str | None = None) -> dict:
    from tributary_read.read.window import Schedule

    nominal = Schedule(run.job.period_ms, tz=run.job.tz).interval(run.t)  # the period before the run
    hive = run.job.hive
    inputs = [input_dataset(i.table, i.paths, size=i.bytes, rows=i.records, version=i.plan_id,
                            columns=run.input_columns.get(i.view), hive_table=spec.hive_table,
                            hive_namespace=_hive_namespace(hive.metastore) if hive and spec.hive_table else None)
              for spec, i in zip(run.job.inputs, run.inputs)]
    return run_event(event_type, run=run_id("etl", run.job.name, run.t), namespace=namespace(),
                     job=run.job.name, event_ms=int(time.time() * 1000), nominal=nominal, inputs=inputs, error=error)


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
                from tributary_read.etl.record import find_commit
                from tributary_read.exits import Terminated

                if find_commit(run.output, run.job.app_id, run.t) is None:
                    stopped = isinstance(e, (Terminated, KeyboardInterrupt))
                    ev = _event(run, "ABORT" if stopped else "FAIL", None if stopped else f"{type(e).__name__}: {e}")
                    box = Outbox(run.output.storage)
                    if isinstance(e, CommitStateUnknownError):
                        em.send(ev)  # the kept COMPLETE stays: the next run reads the log
                    elif em.send(ev):
                        box.drop(run.job.app_id, str(run.t))
                    else:
                        box.put(run.job.app_id, str(run.t), ev)  # the next run sends it
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
            Outbox(run.output.storage).put(run.job.app_id, str(run.t), _event(run, "COMPLETE"))
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
    from tributary_read.etl.record import find_commit

    box = Outbox(run.output.storage)
    try:
        keys = box.keys(run.job.app_id)
        for key in sorted(keys, key=lambda k: (k != str(run.t), k)):
            commit = find_commit(run.output, run.job.app_id, int(key))
            ev = box.get(run.job.app_id, key)
            if ev is None:
                continue
            now = int(time.time() * 1000)
            if commit is None and ev.get("eventType") in ("FAIL", "ABORT"):
                pass  # a failed run's own terminal event, not sent when it ended
            elif commit is None:  # its run died before the commit, or is still to commit (on another machine)
                if now - _kept_ms(ev) < STALE_MS:
                    continue
                ev.update(eventType="FAIL")  # as ingest's: ABORT is a stop someone asked for (a signal)
                ev["run"]["facets"]["errorMessage"] = facet(
                    "errorMessage", message=f"the run of {iso_ms(int(key))} ended before its commit without a word "
                    f"(killed); found by the run of {iso_ms(run.t)}", programmingLanguage="PYTHON")
            else:  # committed (a kept FAIL whose hour a later try committed is that try's COMPLETE)
                ev["eventType"] = "COMPLETE"
                ev["run"]["facets"].pop("errorMessage", None)
                ev["outputs"] = [_output(run, commit, mine=key == str(run.t))]
            ev["eventTime"] = iso_ms(now)
            if em.send(ev):
                box.drop(run.job.app_id, key)
    except Exception as e:  # noqa: BLE001 - lineage never fails the run
        run.say(f"warning: lineage: {error_text(e)}")


def _kept_ms(ev: dict) -> int:
    from tributary_read.errors import TributaryError
    from tributary_read.timespec import parse_instant

    try:
        return parse_instant(ev["eventTime"])
    except (KeyError, TypeError, ValueError, TributaryError):
        return 0  # unreadable: as old as can be


def _output(run: _Run, commit, mine: bool) -> dict:
    """The output dataset of ``commit``; ``mine``: it is this run's (only this run knows the input files
    that caused a restated partition; an earlier run's restates are named without them)."""
    from tributary_read.etl.restated import restated
    from tributary_read.io.parquet_schema import recorded_columns

    hive = run.job.hive
    return table_output(run.output, [commit], hive_table=hive.table if hive else None,
                        hive_namespace=_hive_namespace(hive.metastore) if hive else None,
                        columns=recorded_columns(commit.transaction.meta if commit.transaction else None),
                        restated=restated(commit, run if mine else None))


def _hive_namespace(metastore: str) -> str:
    from tributary_read.hive.uri import MetastoreURI

    return MetastoreURI.parse(metastore).lineage_namespace
