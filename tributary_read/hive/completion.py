"""Is a partition complete? The partition-commit policy's answer, read from the table's log alone.

A partition exists from its first file, while data is still arriving; Airflow's Hive sensors ask the
metastore whether it exists. Completeness is the question the partition-commit policy
(:mod:`tributary_read.hive.commit`) already answers when it mounts a partition or writes its success
file: the partition's end plus the policy's delay has passed on the policy's clock. Here that clock is
read from the log, never from the metastore (which may be Kerberized, down, or mounted early):

* ``event``: the log's watermark (:func:`~tributary_read.hive.commit.log_watermark`, the one the
  committer uses);
* ``processing``: the newest commit's time. A writer that committed after the partition's end plus
  the delay had every record that arrived by then; the wall clock alone would call an hour complete
  while its writer is down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from tributary_read.errors import InvalidInputError, TributaryError
from tributary_read.hive.commit import (
    CommitPolicy,
    commit_watermark,
    is_due,
    log_watermark,
    partitions_of_files,
    read_mark,
)
from tributary_read.hive.describe import parse_partition_name
from tributary_read.table.config import Table
from tributary_read.table.layout import PartitionDir, PartitionMapper
from tributary_read.table.manifest import KIND_DATA


@dataclass(frozen=True)
class Completion:
    """One partition's answer: ``complete`` once ``clock_ms`` reached ``due_ms``."""

    partition: str  # the Hive partition name, dt=2024010105
    directory: str
    complete: bool
    files: int  # committed files in it now (0: an hour with no data, complete all the same once due)
    due_ms: int
    clock: str
    clock_ms: int

    def to_json(self) -> dict:
        return {"partition": self.partition, "directory": self.directory, "complete": self.complete,
                "files": self.files, "due_ms": self.due_ms, "clock": self.clock, "clock_ms": self.clock_ms}


def resolve_partition(table: Table, text: str) -> PartitionDir:
    """A partition as the user names it: its directory (``2024_01_01/05``), its Hive name
    (``dt=2024010105``), or, for a one-key layout, its value (``2024010105``, an asset's partition key)."""
    layout = table.layout
    p = layout.try_parse(text.strip("/"))
    if p is None:
        if "=" in text:
            try:
                values = parse_partition_name(text)
            except (ValueError, TributaryError):
                values = {}
        else:
            values = {layout.keys[0]: text} if len(layout.keys) == 1 else {}
        d = PartitionMapper(layout).directory(values) if values else None
        p = layout.try_parse(d) if d else None
    if p is None:
        keys = "/".join(f"{k}=..." for k in layout.keys)
        raise InvalidInputError(f"partition {text!r} is not one of table {table.uri}: give its directory "
                                f"({layout.directory}) or its Hive name ({keys})", partitions="partition")
    return p


def policy_clock_ms(table: Table, policy: CommitPolicy, version: int,
                    partitions: Callable[[], Mapping[str, PartitionDir]] | None = None) -> int:
    """The policy's clock at ``version``, read from the log: the event watermark, or the newest commit's time.

    ``partitions``: the log's partitions, for an event clock whose newest commit carries no writer
    watermark (a full state read); None takes the committer's mark instead (one small read: a
    metrics scrape).
    """
    log = table.log
    if policy.clock == "event":
        if partitions is None:
            given = commit_watermark(log.read_commit(version)) if version else None
            return given if given is not None else read_mark(table).watermark_ms
        return log_watermark(log, version, partitions)
    newest = log.read_commit(version) if version else None
    return newest.timestamp_ms if newest is not None else 0


def completion(table: Table, partitions: Sequence[str]) -> list[Completion]:
    """Each partition's completeness under the table's partition-commit policy (refused without one)."""
    policy = CommitPolicy.from_json(table.config.partition_commit)
    if not policy.enabled:
        raise InvalidInputError(
            f"table {table.uri} has no partition-commit policy, so nothing in its log says when a partition "
            "is complete: configure one (docs/partitions.md), or wait for the ETL run that writes it")
    wanted = [resolve_partition(table, t) for t in partitions]
    log = table.log
    version = log.latest_version()
    state = log.state(version) if version else None
    files = list(state.files.values()) if state else []
    clock = policy_clock_ms(table, policy, version, lambda: partitions_of_files(table, files))
    out = []
    for p in wanted:
        n = sum(1 for f in files if f.kind == KIND_DATA and f.path.startswith(p.path + "/"))
        out.append(Completion(p.spec, p.path, is_due(policy, p, clock), n, p.end_ms + policy.delay_ms,
                              policy.clock, clock))
    return out
