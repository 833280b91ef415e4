"""``TribPartitionSensor``: waits until trib's log says partitions are complete, not merely present."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Sequence

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from tributary_read.airflow.condition import Condition, waits_on
from tributary_read.errors import TributaryError


class TribPartitionSensor(BaseSensorOperator):
    """Wait for complete partitions of a trib table, or for an ETL job's run (docs/airflow.md).

    :param table: the table's root (a path or a storage URI).
    :param partitions: partitions of a table with a partition-commit policy, by directory, Hive name or
        value (``2024010105``): complete once the policy's delay has passed on its clock.
    :param job: instead, an ETL job's name: done once it committed its run for ``schedule_time``
        (default: the DAG run's data interval end).
    :param deferrable: wait in the triggerer instead of holding a worker slot.

    Reads only the table's log, never the metastore. A wrong path or partition fails at once (no
    retry); storage that does not answer is polled again. The XCom is what the log said.
    """

    template_fields: Sequence[str] = ("table", "partitions", "job", "schedule_time")

    def __init__(self, *, table: str, partitions: Sequence[str] | str = (), job: str | None = None,
                 schedule_time: str | None = None, storage_options: dict | None = None,
                 deferrable: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.table = table
        self.partitions = partitions
        self.job = job
        self.schedule_time = schedule_time
        self.storage_options = storage_options
        self.deferrable = deferrable

    def _condition(self, context) -> Condition:
        parts = (self.partitions,) if isinstance(self.partitions, str) else tuple(self.partitions)
        when = self.schedule_time
        if self.job and not when:
            end = context.get("data_interval_end")
            if end is None:
                raise AirflowFailException("trib: this run has no data interval end: give schedule_time")
            when = end.isoformat()
        try:
            return Condition(str(self.table), tuple(str(p) for p in parts), self.job, when, self.storage_options)
        except TributaryError as e:
            raise AirflowFailException(f"trib: {e}") from None

    def poke(self, context) -> PokeReturnValue:
        cond = self._condition(context)
        try:
            met, detail = cond.check()
        except TributaryError as e:
            if not waits_on(e):
                raise AirflowFailException(f"trib: {e}") from None
            self.log.warning("trib: %s (%s); poking again", e, type(e).__name__)
            return PokeReturnValue(False)
        self.log.info("trib: %s", _summary(detail))
        return PokeReturnValue(met, detail if met else None)

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        from tributary_read.airflow.triggers import TribCompletionTrigger

        timeout = self.timeout
        deadline = time.time() + float(timeout) if timeout is not None else None
        self.defer(trigger=TribCompletionTrigger(self._condition(context).to_kwargs(), float(self.poke_interval),
                                                 deadline),
                   method_name="execute_complete",
                   timeout=timedelta(seconds=float(timeout)) if timeout is not None else None)

    def execute_complete(self, context, event: dict | None = None) -> Any:
        event = event or {}
        status = event.get("status")
        if status == "complete":
            self.log.info("trib: %s", _summary(event))
            return {k: v for k, v in event.items() if k != "status"}
        if status == "timeout":
            raise AirflowSensorTimeout(f"trib: not complete after {self.timeout} s: {_summary(event)}")
        raise AirflowFailException(f"trib: {event.get('message') or event}")


def _summary(detail: dict) -> str:
    if "job" in detail:
        state = f"committed as version {detail['version']}" if detail.get("committed") else "not committed yet"
        return f"job {detail['job']} @ {detail['schedule_time']}: {state}"
    from tributary_read.timespec import iso

    parts = detail.get("partitions") or []
    return "; ".join(f"{p['partition']}: {'complete' if p['complete'] else 'not complete'} "
                     f"({p['files']} files; due at {iso(p['due_ms'])}, the {p['clock']} clock is at "
                     f"{iso(p['clock_ms'])})" for p in parts) or "nothing known"
