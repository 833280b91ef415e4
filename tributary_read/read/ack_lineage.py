"""The OpenLineage events of ``trib consumer ack`` (docs/observability.md): a consumer's run is its plan.

The consumer's run is whatever read the plan's files between ``trib files --consumer`` and the ack; the
ack is its commit. So the job is ``consumer:NAME``, its input the table with the plan id as version,
the exact files read as the subset (the plan's, less those ``trib consumer skip`` left unread; above
1,000 files their partitions) and the plan's rows, bytes and files as statistics. One run id per plan:
acking a plan again (a retry) is the same run.

* START just before the ack, and the COMPLETE event, kept in the consumer's outbox (the table's
  ``_tributary/lineage/consumer:NAME/``, or the state directory's for a read-only table) under the plan
  id, so that a kill -9 between the ack and the send leaves it for the next ack to send.
* After the ack, every kept event whose plan the consumer's states show acked is sent (this one first),
  then dropped; one whose plan was not acked (another plan, a reset) is dropped unsent; one whose plan is
  still pending waits. Acking an already-acked plan sends its kept event if there is one, else nothing.
* An ack that fails sends FAIL (a signal: ABORT), unless the state shows the plan acked after all.

Only the CLI's ack emits: the ack inside ``trib etl run`` belongs to that run's own events. Nothing
here fails the ack: with no transport configured this is a plain :meth:`Consumer.ack`; an error is one
warning line.
"""

from __future__ import annotations

from typing import Callable, Mapping

from tributary_read.faults import crash_point
from tributary_read.lineage.event import input_dataset, iso_ms, run_event, run_id
from tributary_read.lineage.outbox import Outbox
from tributary_read.lineage.transport import Emitter
from tributary_read.lineage.runs import in_flight, namespace, now_ms, running, warn_error
from tributary_read.read.consumer import AckResult, Consumer


def ack(consumer: Consumer, plan_id: str, warn: Callable[[str], None],
        env: Mapping[str, str] | None = None) -> AckResult:
    """``consumer.ack(plan_id)``, with its events (see the module docstring)."""
    sender = Emitter(warn, env)
    if not sender.enabled:
        return consumer.ack(plan_id)
    app, box = f"consumer:{consumer.name}", Outbox(consumer.storage)
    complete = None
    try:
        plan = consumer.pending()
        if plan is not None and plan.plan_id == plan_id:
            complete = event(consumer, plan, "COMPLETE")
            sender.send({**complete, "eventType": "START", "eventTime": iso_ms(now_ms())})
            box.put(app, plan_id, running(complete, plan_id=plan_id))
    except Exception as e:  # noqa: BLE001 - lineage never fails the ack
        warn_error(warn, "START", e)
    try:
        result = consumer.ack(plan_id)
    except BaseException as e:
        if complete is not None:
            _failed(consumer, box, app, sender, complete, e, warn)
        raise
    crash_point("consumer.after_ack")
    _flush(consumer, box, app, sender, warn, first=plan_id)
    return result


def event(consumer: Consumer, plan, event_type: str) -> dict:
    """The event of ``plan``'s run: the table as input, its exact files, rows, bytes and files."""
    skipped = set(consumer.skipped(plan))
    files = [f for f in plan.files if f.path not in skipped]
    paths = [f.path for f in files]
    records = [f.records for f in files]
    rows = sum(records) if all(r is not None for r in records) else None
    ds = input_dataset(consumer.source.uri, paths, size=sum(f.readable_bytes for f in files), rows=rows,
                       version=plan.plan_id)
    return run_event(event_type, run=run_id("ack", f"{consumer.name}\0{plan.plan_id}", plan.created_ms),
                     namespace=namespace(), job=f"consumer:{consumer.name}", event_ms=now_ms(), inputs=[ds])


def _failed(consumer: Consumer, box: Outbox, app: str, sender: Emitter, complete: dict, e: BaseException,
            warn: Callable[[str], None]) -> None:
    from tributary_read.exits import Terminated

    plan_id = complete["inputs"][0]["facets"]["version"]["datasetVersion"]
    try:
        if consumer.acked(plan_id):  # the ack landed, its reply did not: the kept COMPLETE is the event
            _flush(consumer, box, app, sender, warn, first=plan_id)
            return
        stopped = isinstance(e, (KeyboardInterrupt, Terminated))
        ev = run_event("ABORT" if stopped else "FAIL", run=complete["run"]["runId"], namespace=namespace(),
                       job=complete["job"]["name"], event_ms=now_ms(), inputs=complete["inputs"],
                       error=None if stopped else f"{type(e).__name__}: {e}")
        if sender.send(ev):
            box.drop(app, plan_id)
        else:
            box.put(app, plan_id, ev)  # as the ETL's and ingest's: the next ack sends it
    except Exception as sent:  # noqa: BLE001 - lineage never hides the ack's own error
        warn_error(warn, "FAIL", sent)


def _flush(consumer: Consumer, box: Outbox, app: str, sender: Emitter, warn: Callable[[str], None],
           first: str) -> None:
    """Send the kept events of acked plans (``first`` first), drop those of plans never to be acked."""
    try:
        keys = box.keys(app)
        for key in sorted(keys, key=lambda k: (k != first, k)):
            entry = box.get(app, key)
            if entry is None:
                continue
            if in_flight(entry) is not None:
                acked = consumer.acked(key)
                if acked is None and _pending(consumer, key):
                    continue  # not acked yet: the ack of that plan sends it
                if not acked:
                    box.drop(app, key)  # never acked (another plan, a reset), or too old to tell
                    continue
                entry = entry["event"]
            entry["eventTime"] = iso_ms(now_ms())
            if sender.send(entry):
                box.drop(app, key)
            else:
                box.put(app, key, entry)  # acked: kept as an event ready to send
    except Exception as e:  # noqa: BLE001
        warn_error(warn, "COMPLETE", e)


def _pending(consumer: Consumer, plan_id: str) -> bool:
    plan = consumer.pending()
    return plan is not None and plan.plan_id == plan_id
