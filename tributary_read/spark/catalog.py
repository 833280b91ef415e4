"""The metastore through a SparkSession's catalog (Hive support enabled).

DDL goes through ``spark.sql`` with the same templates as HiveServer2. Two
things go through the JVM catalog instead, because SQL cannot do them:

* listing partitions *with* their locations and statistics in one metastore
  call (``externalCatalog.listPartitions``), where SQL needs a DESCRIBE each;
* making Hive's own ``numFiles``/``totalSize`` exact after files changed:
  Spark's ALTER path writes the old values back, and the metastore recomputes
  fast stats from the file system only when the values it receives differ from
  the stored ones. So the refresh sends a ``numFiles`` of -1 and the metastore
  recounts (and marks its row count as not accurate).

URI: ``spark`` uses the active session (or builds one with Hive support);
``spark?conf.spark.hadoop.hive.metastore.uris=thrift://h:9083`` sets builder
options for a new one.
"""

from __future__ import annotations

from typing import Sequence

from tributary_read.errors import InvalidInputError, MetastoreError, NoSuchHiveTableError, missing_extra
from tributary_read.hive.describe import parse_bracket_map, stats_from
from tributary_read.hive.dialect import DIALECTS
from tributary_read.hive.model import STALE_STATS_PARAMS, HivePartition, PartitionSpec, TableName
from tributary_read.hive.sql import check_values
from tributary_read.hive.sql_metastore import SqlMetastore
from tributary_read.hive.uri import MetastoreURI

_SEP = "\u0001"


class SparkCatalogMetastore(SqlMetastore):
    """Partition metadata through ``spark`` (a SparkSession with Hive support)."""

    lists_locations = True

    def __init__(self, spark):
        if spark.conf.get("spark.sql.catalogImplementation", "in-memory") != "hive":
            raise InvalidInputError("the SparkSession has no Hive support (use enableHiveSupport())")
        self.spark = spark
        super().__init__(DIALECTS["spark"])

    @classmethod
    def from_uri(cls, uri: str | MetastoreURI = "spark", spark=None) -> SparkCatalogMetastore:
        """On ``spark`` (the caller's session) when given: a job's sync must use the session its SQL ran on."""
        u = MetastoreURI.parse(uri)
        if spark is not None:
            return cls(spark)
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise missing_extra("pyspark", "spark") from None
        active = SparkSession.getActiveSession()
        if active is not None and not u.spark_conf():
            return cls(active)
        from tributary_read.spark.session import sql_session

        try:
            return cls(sql_session(None, None, "trib-partitions", catalog=u, udfs=False))
        except Exception as e:  # noqa: BLE001 - JVM start-up failures
            raise MetastoreError(f"cannot start a SparkSession with Hive support: {e}") from None

    @property
    def address(self) -> str:
        return "spark"

    def _execute(self, sql: str) -> list[tuple]:
        return [tuple(r) for r in self.spark.sql(sql).collect()]

    def _error(self, e: Exception) -> str:
        text = getattr(e, "desc", None) or str(e)
        lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
        return (lines[0] if lines else type(e).__name__)[:400]

    # -- the JVM catalog -------------------------------------------------------------
    @property
    def _catalog(self):
        return self.spark._jsparkSession.sessionState().catalog().externalCatalog()

    @property
    def _utils(self):
        return self.spark._jvm.org.apache.spark.api.python.PythonUtils

    def _jvm_call(self, what: str, table: TableName, fn):
        self.statements += 1
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - py4j errors carry the JVM exception text
            text = str(e)
            if any(m in text for m in self.dialect.not_found):
                raise NoSuchHiveTableError(f"Hive table {table} does not exist (spark)") from None
            line = next((ln.strip() for ln in text.splitlines() if "Exception" in ln), text.splitlines()[0])
            raise MetastoreError(f"spark catalog: {what} {table}: {line[:300]}") from None

    def list_partitions(self, table: TableName, with_locations: bool = False) -> list[HivePartition]:
        if not with_locations:
            return super().list_partitions(table)
        none = self.spark._jvm.scala.Option.apply(None)
        # One string for all partitions: one py4j round trip instead of several per partition.
        text = self._jvm_call("list partitions of", table, lambda: self._catalog.listPartitions(
            table.db, table.name, none).mkString(_SEP))
        return [p for p in (_parse_catalog_partition(chunk) for chunk in text.split(_SEP) if chunk) if p]

    def refresh_stats(self, table: TableName, values: Sequence[PartitionSpec]) -> int:
        n = super().refresh_stats(table, values)  # Spark's own size (ANALYZE ... NOSCAN)
        if not values:
            return n
        keys = self._keys_of(table)
        cat, utils = self._catalog, self._utils

        def recount():
            parts = []
            for v in values:
                p = cat.getPartition(table.db, table.name, utils.toScalaMap(check_values(keys, v)))
                params = p.parameters().updated("numFiles", "-1")
                for k in STALE_STATS_PARAMS:
                    params = params.removed(k)
                parts.append(p.copy(p.spec(), p.storage(), params, p.createTime(), p.lastAccessTime(), p.stats()))
            cat.alterPartitions(table.db, table.name, utils.toSeq(parts))
        self._jvm_call("recount statistics of", table, recount)
        return n

    @property
    def sets_hive_stats(self) -> bool:
        return True


def _parse_catalog_partition(chunk: str) -> HivePartition | None:
    """Parse one ``CatalogTablePartition.toString`` (``Key: value`` lines)."""
    chunk = chunk.rstrip()
    info: dict[str, str] = {}
    for line in (chunk[:-1] if chunk.endswith(")") else chunk).splitlines():
        key, sep, value = line.strip().partition(": ")
        if sep and key not in info:
            info[key] = value
    raw = info.get("Partition Values", "")
    if not (raw.startswith("[") and raw.endswith("]")):
        return None
    values: dict[str, str] = {}
    for item in raw[1:-1].split(", "):
        k, sep, v = item.partition("=")
        if not sep or k in values:
            # A value holding ", " cannot be split back; such a partition is
            # never one trib renders, so keep it visibly foreign.
            values = {"?": raw}
            break
        values[k] = v
    params = parse_bracket_map(info.get("Partition Parameters", "[]"))
    stats = stats_from({"statistics": info.get("Partition Statistics", "")}, params)
    return HivePartition(values, info.get("Location"), stats, params)
