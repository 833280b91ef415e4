"""Hive integration: the metastore interface, partition sync and partition commit.

Importing this package never imports pyhive or pyspark; the backends load them when a metastore is
opened. Its names load on first use (PEP 562), so that a module needing one small part (the Spark read's
quoting rule, ``hive.sql``) does not import the metastore and sync machinery: ~25 ms of every warm
``trib etl run`` on a loaded machine.

``sync`` names both a submodule and the function the package exports. The import system binds a
submodule on its package once anything imports it, which would turn ``hive.sync`` into the module
(with eager imports, the package's own ``from .sync import sync`` ran last and won). The package's
class keeps ``sync`` the function: a property whose setter ignores that binding.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from tributary_read.lazy import lazy_getattr

#: public name -> submodule that defines it
_LAZY = {
    "DIALECTS": "dialect",
    "Metastore": "metastore", "open_metastore": "metastore",
    "HivePartition": "model", "HiveTable": "model", "PartitionStats": "model", "TableName": "model",
    "SyncOptions": "sync", "SyncPlan": "sync", "SyncResult": "sync", "plan_sync": "sync",
}

__all__ = sorted([*_LAZY, "sync"])

__getattr__ = lazy_getattr(__name__, _LAZY)


class _Package(types.ModuleType):
    @property
    def sync(self):
        from tributary_read.hive.sync import sync

        return sync

    @sync.setter
    def sync(self, module) -> None:
        """The import system binding the submodule ``tributary_read.hive.sync``: the function stays."""


sys.modules[__name__].__class__ = _Package

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from tributary_read.hive.dialect import DIALECTS
    from tributary_read.hive.metastore import Metastore, open_metastore
    from tributary_read.hive.model import HivePartition, HiveTable, PartitionStats, TableName
    from tributary_read.hive.sync import SyncOptions, SyncPlan, SyncResult, plan_sync, sync
