"""The samples of one table: its log, its partition-commit clock, its manifest consumers.

Each value costs a few small reads: the latest version (existence probes), the newest commit, the
consumers' state and plan documents, and for a manifest consumer the commits after its last ack.
No checkpoint's file list is parsed and nothing is listed but the consumers' directory.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

from tributary_read.metrics.sample import Sample
from tributary_read.table.config import Table, Tracking
from tributary_read.table.manifest import KIND_DATA


def table_samples(table: Table) -> list[Sample]:
    labels = {"table": table.uri}
    log = table.log
    version = log.latest_version()
    out = [Sample("trib_table_commits_total", labels, float(version))]
    newest = log.read_commit(version) if version else None
    if newest is not None:
        out.append(Sample("trib_table_last_commit_timestamp_seconds", labels, newest.timestamp_ms / 1000))
    settings = table.config.partition_commit
    if not version or not settings or (isinstance(settings, Mapping) and not settings.get("policies")):
        return out  # no policy: the Hive modules (tens of ms to import) are not needed
    from tributary_read.hive.commit import CommitPolicy
    from tributary_read.hive.completion import policy_clock_ms

    policy = CommitPolicy.from_json(table.config.partition_commit)
    if policy.enabled:
        out.append(Sample("trib_partition_commit_watermark_seconds", labels,
                          policy_clock_ms(table, policy, version) / 1000))
    return out


def consumer_samples(source, consumer, now_ms: Callable[[], int] | None = None,
                     listing: bool = False) -> list[Sample]:
    """A consumer's ack and plan times; for a manifest consumer, what its next plans will deliver.

    ``source``: the consumer's table (a Table or a Source: a plain directory's consumers have no table).

    Pending is the new data of the commits after the acked version, less what a later commit removed
    (an expire): exact, with records, and its age from the commit that made the oldest file readable.
    A listing (or both) consumer's pending data is known only from a listing: with ``listing``, a
    read-only preview of its next plan lists the table (files, bytes, records where every file's
    count is known, and the oldest file's age from its mtime); without, it is not given.
    """
    from tributary_read.read.resolve import Source

    src = Source.of(source)
    now = (now_ms or (lambda: int(time.time() * 1000)))()
    state = consumer.current()
    plan = consumer.pending()
    labels = {"table": src.uri, "consumer": consumer.name, "etl_job": owning_job(state, plan)}
    out = []
    if state is not None and state.updated_ms:
        out.append(Sample("trib_consumer_last_ack_timestamp_seconds", labels, state.updated_ms / 1000))
    if plan is not None:
        out.append(Sample("trib_consumer_pending_plan_created_timestamp_seconds", labels, plan.created_ms / 1000))
    mode = state.mode if state is not None else None
    if mode is None or Tracking(mode) is not Tracking.MANIFEST or src.table is None:  # never acked, or listing
        return out + (_listed_pending(_with_layout(consumer, state, plan), labels, now) if listing else [])
    log = src.table.log
    pending: dict[str, tuple[int, int, int]] = {}  # path -> (bytes, records, commit time)
    for c in log.commits(state.manifest_version, log.latest_version()):
        for f in c.removed:
            pending.pop(f.path, None)
        for f in c.new_data:
            if f.kind == KIND_DATA:
                pending[f.path] = (f.size, f.records, c.timestamp_ms)
    oldest = min((t for _, _, t in pending.values()), default=None)
    out += [Sample("trib_consumer_pending_files", labels, float(len(pending))),
            Sample("trib_consumer_pending_bytes", labels, float(sum(b for b, _, _ in pending.values()))),
            Sample("trib_consumer_pending_records", labels, float(sum(r for _, r, _ in pending.values()))),
            Sample("trib_consumer_oldest_pending_age_seconds", labels,
                   max(0.0, (now - oldest) / 1000) if oldest is not None else 0.0)]
    return out


def _with_layout(consumer, state, plan):
    """A plain directory's consumer before its first ack knows its layout only from its pending plan."""
    if consumer.source.layout is not None or state is not None or plan is None or not plan.delta.get("layout"):
        return consumer
    import copy
    from dataclasses import replace

    from tributary_read.table.layout import Layout

    out = copy.copy(consumer)  # the same state storage (and its options), read with the plan's layout
    out.source = replace(consumer.source, layout=Layout(**plan.delta["layout"]))
    return out


def _listed_pending(consumer, labels: dict, now: int) -> list[Sample]:
    """What a plan made now would deliver (:meth:`Consumer.preview`: lists, writes nothing)."""
    files = consumer.preview(now_ms=now).files
    oldest = min((f.mtime_ms for f in files if f.mtime_ms is not None), default=None)
    out = [Sample("trib_consumer_pending_files", labels, float(len(files))),
           Sample("trib_consumer_pending_bytes", labels, float(sum(f.readable_bytes for f in files)))]
    if all(f.records is not None for f in files):
        out.append(Sample("trib_consumer_pending_records", labels, float(sum(f.records for f in files))))
    out.append(Sample("trib_consumer_oldest_pending_age_seconds", labels,
                      max(0.0, (now - oldest) / 1000) if oldest is not None else 0.0))
    return out


def owning_job(state, plan) -> str:
    """The ETL job a consumer serves: recorded in its state at the job's first ack, and before that in
    the plan the job was handed (a job whose first hour fails still owns its consumer); "" for none."""
    owner = (state.owner if state is not None else None) or (plan.delta.get("owner") if plan is not None else None)
    return str(owner.get("job", "")) if owner else ""


def etl_samples(table: Table) -> list[Sample]:
    """Each job that keeps a run book in ``table`` (its output): runs by outcome, the last success."""
    from tributary_read.etl.runs import OUTCOMES, RESTATED, job_books, read_book

    out = []
    for job in job_books(table):
        book = read_book(table, job)
        for outcome in OUTCOMES:
            out.append(Sample("trib_etl_runs_total", {"table": table.uri, "etl_job": job, "outcome": outcome},
                              float(book["counts"][outcome])))
        last = book["last_success_schedule_ms"]
        if last:
            out.append(Sample("trib_etl_last_success_schedule_time_seconds", {"table": table.uri, "etl_job": job},
                              last / 1000))
        if book["restated"] is not None:  # a job that has restated partitions (an append job has no such series)
            out += [Sample(f"trib_etl_restated_{k}_total", {"table": table.uri, "etl_job": job},
                           float(book["restated"][k])) for k in RESTATED]
    return out
