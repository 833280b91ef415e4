"""What ``trib metrics`` exposes: every metric family once, with its type and help, and the samples.

One table of names, so the text exposition, ``--json`` and the docs list the same families; times
are seconds (Prometheus's base unit), counters end in ``_total`` (promtool's lint).

The ETL job's label is ``etl_job``, never ``job``: Prometheus gives every scraped series its own
``job`` (the scrape config's) and renames a series' own ``job`` to ``exported_job``, so ``job``
would mean two things. Consumers carry it too (the job that owns them; empty, which Prometheus
reads as absent, for a consumer no job owns), so a consumer's lag joins its job's runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping


class Kind(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True)
class Family:
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]


#: A consumer's labels: its table, its name, and the ETL job that owns it ("" when none does).
_CONSUMER = ("table", "consumer", "etl_job")

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("trib_table_commits_total", Kind.COUNTER,
           "Commits made to the table's log since it was created (its latest version).", ("table",)),
    Family("trib_table_last_commit_timestamp_seconds", Kind.GAUGE,
           "Commit time of the table's newest commit.", ("table",)),
    Family("trib_partition_commit_watermark_seconds", Kind.GAUGE,
           "The partition-commit policy's clock, read from the log: a partition is complete once its end "
           "plus the delay is at or before it.", ("table",)),
    Family("trib_consumer_pending_files", Kind.GAUGE,
           "Data files committed after the consumer's last ack (manifest consumers; exact).", _CONSUMER),
    Family("trib_consumer_pending_bytes", Kind.GAUGE,
           "Bytes of the pending files.", _CONSUMER),
    Family("trib_consumer_pending_records", Kind.GAUGE,
           "Records of the pending files, where the manifest counts them.", _CONSUMER),
    Family("trib_consumer_oldest_pending_age_seconds", Kind.GAUGE,
           "Seconds since the oldest pending file became readable (its commit time); 0 with nothing pending.",
           _CONSUMER),
    Family("trib_consumer_last_ack_timestamp_seconds", Kind.GAUGE,
           "Time of the consumer's last ack.", _CONSUMER),
    Family("trib_consumer_pending_plan_created_timestamp_seconds", Kind.GAUGE,
           "Creation time of the plan handed out and not acked yet (absent: no plan pending).",
           _CONSUMER),
    Family("trib_etl_runs_total", Kind.COUNTER,
           "Runs of an ETL job writing the table, by how they ended: success, already_committed, failed, "
           "refused (input to fix) or killed (found in flight by the next run).", ("table", "etl_job", "outcome")),
    Family("trib_etl_last_success_schedule_time_seconds", Kind.GAUGE,
           "The latest schedule time (the end of its interval) a run of the job committed or found committed.",
           ("table", "etl_job")),
    Family("trib_etl_restated_partitions_total", Kind.COUNTER,
           "Output partitions a restate job's commits recomputed and replaced whole (its scheduled runs' and "
           "its backfills'); each is named with its cause in the run's report.", ("table", "etl_job")),
    Family("trib_etl_restated_records_before_total", Kind.COUNTER,
           "Records the restated partitions held before they were replaced.", ("table", "etl_job")),
    Family("trib_etl_restated_records_after_total", Kind.COUNTER,
           "Records the restated partitions hold after (minus before: the records restates added).",
           ("table", "etl_job")),
    Family("trib_metrics_generated_timestamp_seconds", Kind.GAUGE,
           "When these values were read (a textfile older than its refresh is stale).", ()),
)}


@dataclass(frozen=True)
class Sample:
    family: str
    labels: Mapping[str, str] = field(hash=False)
    value: float

    def __post_init__(self):
        f = FAMILIES[self.family]  # an unknown name is a bug here, not a new series
        if tuple(self.labels) != f.labels:
            raise ValueError(f"{self.family}: labels {tuple(self.labels)} are not {f.labels}")

    def to_json(self) -> dict:
        return {"name": self.family, "labels": dict(self.labels), "value": self.value}
