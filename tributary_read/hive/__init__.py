"""Hive integration: the metastore interface, partition sync and partition commit.

Importing this package never imports pyhive or pyspark; the backends load them
when a metastore is opened.
"""

from .metastore import (
    DIALECTS,
    HivePartition,
    HiveTable,
    Metastore,
    PartitionStats,
    TableName,
    open_metastore,
)
from .sync import SyncOptions, SyncPlan, SyncResult, plan_sync, sync

__all__ = [
    "DIALECTS", "HivePartition", "HiveTable", "Metastore", "PartitionStats", "TableName", "open_metastore",
    "SyncOptions", "SyncPlan", "SyncResult", "plan_sync", "sync",
]
