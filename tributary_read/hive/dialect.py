"""What differs between the engines behind a metastore, held in a table, not in if-chains.

Add an engine by adding a row to :data:`DIALECTS`; the SQL itself stays the
same templates (:mod:`tributary_read.hive.sql`) for every engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """What one engine does differently. Add an engine by adding a row to DIALECTS."""

    name: str
    #: template that refreshes one partition's statistics
    refresh: str
    #: most partitions one ADD/DROP statement may carry
    max_batch: int
    #: session setting sizing the engine's own metastore calls per statement
    batch_conf: str | None
    #: whether ``refresh`` rewrites Hive's numFiles/totalSize partition parameters
    refresh_sets_hive_params: bool
    #: substrings of an error that mean "no such table"
    not_found: tuple[str, ...]


DIALECTS: dict[str, Dialect] = {
    # Spark's ALTER path copies the old numFiles/totalSize back, so the metastore
    # keeps them; ANALYZE ... NOSCAN updates Spark's own size, which its planner
    # prefers, and drops a row count that no longer holds.
    "spark": Dialect("spark", "analyze_partition_noscan", 5000, "spark.sql.addPartitionInBatch.size", False,
                     ("TABLE_OR_VIEW_NOT_FOUND", "Table or view not found", "NoSuchTableException")),
    # Hive can answer count(*) from numRows, so a refresh recounts rows.
    "hive": Dialect("hive", "analyze_partition", 1000, None, True,
                    ("Table not found", "[Error 10001]", "NoSuchObjectException")),
    # The metastore's own Thrift API (no SQL engine): the metastore recounts numFiles/totalSize
    # when a partition's numFiles is -1 on alter; one add/drop request carries a batch.
    "metastore": Dialect("metastore", "", 1000, None, True, ("NoSuchObjectException",)),
}
