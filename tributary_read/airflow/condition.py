"""What the partition sensor and its trigger wait for, asked of the table's log alone (no Airflow here).

Two questions, one per kind of table:

* a table with a partition-commit policy (``trib ingest``, ``trib partitions commit``): are these
  partitions complete? (:func:`tributary_read.hive.completion.completion`: the policy's delay has
  passed on its clock, read from the log);
* an ETL output: has job ``job`` committed its run for ``schedule_time``?
  (:func:`tributary_read.etl.run.committed_run`).

The metastore is never asked: a partition exists there from its first file, and a Kerberized or
stopped metastore must not stop a sensor that only reads files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from tributary_read.errors import InvalidInputError, TributaryError


@dataclass(frozen=True)
class Condition:
    table: str
    partitions: tuple[str, ...] = ()
    job: str | None = None
    schedule_time: str | None = None
    storage_options: Mapping[str, str] | None = field(default=None, hash=False)

    def __post_init__(self):
        if bool(self.partitions) == bool(self.job):
            raise InvalidInputError("wait for partitions of a partition-commit table, or for job's run of an ETL "
                                    "output: give one of partitions and job")
        if self.job and not self.schedule_time:
            raise InvalidInputError(f"waiting for job {self.job} needs the schedule time of its run")

    def to_kwargs(self) -> dict[str, Any]:
        return {"table": self.table, "partitions": list(self.partitions), "job": self.job,
                "schedule_time": self.schedule_time,
                "storage_options": dict(self.storage_options) if self.storage_options else None}

    def check(self) -> tuple[bool, dict]:
        """(met, what the log says): raises the trib error when the question cannot be answered."""
        from tributary_read.table.config import Table

        table = Table.load(self.table, self.storage_options)
        if self.job:
            from tributary_read.etl.run import committed_run

            assert self.schedule_time is not None
            c = committed_run(table, self.job, self.schedule_time)
            detail: dict[str, Any] = {"table": table.uri, "job": self.job, "schedule_time": self.schedule_time,
                                      "committed": c is not None}
            if c is not None:
                detail["version"] = c.version
            return c is not None, detail
        from tributary_read.hive.completion import completion

        parts = completion(table, self.partitions)
        return all(p.complete for p in parts), {"table": table.uri, "partitions": [p.to_json() for p in parts]}


def waits_on(e: TributaryError) -> bool:
    """Whether a sensor keeps waiting through ``e`` (storage briefly down) or fails now (a wrong path, a
    partition that is not the table's): the operator's one outcome table decides."""
    from tributary_read.airflow.outcome import Outcome, rule_for

    return rule_for(type(e)).outcome is Outcome.RETRY
