"""Hive integration: the metastore interface, partition sync and partition commit.

Importing this package never imports pyhive or pyspark; the backends load them
when a metastore is opened. The imports stay eager: ``sync`` names both a
submodule and a function here, and a lazy ``__getattr__`` would hand out the
module once anything imported ``tributary_read.hive.sync``.
"""

from tributary_read.hive.dialect import DIALECTS
from tributary_read.hive.metastore import Metastore, open_metastore
from tributary_read.hive.model import HivePartition, HiveTable, PartitionStats, TableName
from tributary_read.hive.sync import SyncOptions, SyncPlan, SyncResult, plan_sync, sync

__all__ = [
    "DIALECTS", "HivePartition", "HiveTable", "Metastore", "PartitionStats", "TableName", "open_metastore",
    "SyncOptions", "SyncPlan", "SyncResult", "plan_sync", "sync",
]
