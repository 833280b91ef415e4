"""Hive integration: the metastore interface, partition sync and partition commit.

Importing this package never imports pyhive or pyspark; the backends load them
when a metastore is opened.
"""

from tributary_read.hive.metastore import (
    DIALECTS,
    HivePartition,
    HiveTable,
    Metastore,
    PartitionStats,
    TableName,
    open_metastore,
)
from tributary_read.hive.sync import SyncOptions, SyncPlan, SyncResult, plan_sync, sync

__all__ = [
    "DIALECTS", "HivePartition", "HiveTable", "Metastore", "PartitionStats", "TableName", "open_metastore",
    "SyncOptions", "SyncPlan", "SyncResult", "plan_sync", "sync",
]
