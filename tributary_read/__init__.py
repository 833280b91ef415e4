"""Tributary Read: exact incremental loads on Hive/Spark.

Names are loaded on first use (PEP 562), so ``import tributary_read`` stays
cheap for short CLI runs and never imports pyspark; the Spark and Hive helpers
import their heavy dependencies lazily too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import *  # noqa: F401,F403  (small, dependency-free; always loaded)
from .errors import __all__ as _errors_all
from .lazy import lazy_getattr

__version__ = "0.1.0"

#: public name -> submodule that defines it
_LAZY = {
    "IngestResult": "write.ingest", "TimeSpec": "write.ingest", "ingest": "write.ingest", "recover": "write.ingest",
    "Layout": "table.layout", "PartitionDir": "table.layout",
    "ManifestLog": "table.log", "TableState": "table.state",
    "clean": "table.maintenance", "verify": "table.maintenance",
    "Commit": "table.manifest", "FileEntry": "table.manifest", "Transaction": "table.manifest",
    "FileSet": "read.fileset", "ResolvedFile": "read.fileset", "LateFile": "read.fileset",
    "Conflict": "read.fileset", "ReadMode": "read.fileset", "Source": "read.resolve",
    "resolve": "read.resolve", "manifest_files": "read.resolve", "mtime_files": "read.resolve",
    "TimeWindow": "read.window", "PartitionFilter": "read.partition_filter",
    "Consumer": "read.consumer", "Plan": "read.consumer", "list_consumers": "read.consumer",
    "FileInfo": "io.storage", "Storage": "io.storage", "open_storage": "io.storage",
    "RollPolicy": "table.config", "Table": "table.config", "TableConfig": "table.config",
    "Protocol": "table.config", "Tracking": "table.config", "DataFormat": "io.formats",
    "TableWriter": "write.writer",
    "KafkaSource": "kafka.ingest", "KafkaIngestResult": "kafka.ingest", "ingest_kafka": "kafka.ingest",
    "SpoolSource": "spool.ingest", "SpoolResult": "spool.ingest", "OnComplete": "spool.ingest",
    "ingest_dir": "spool.ingest",
}

__all__ = sorted([*_errors_all, *_LAZY, "__version__"])


__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from tributary_read.read.consumer import Consumer, Plan, list_consumers
    from tributary_read.write.ingest import IngestResult, TimeSpec, ingest, recover
    from tributary_read.table.layout import Layout, PartitionDir
    from tributary_read.read.partition_filter import PartitionFilter
    from tributary_read.table.log import ManifestLog
    from tributary_read.table.state import TableState
    from tributary_read.table.maintenance import clean, verify
    from tributary_read.table.manifest import Commit, FileEntry, Transaction
    from tributary_read.read.fileset import Conflict, FileSet, LateFile, ReadMode, ResolvedFile
    from tributary_read.read.resolve import Source, manifest_files, mtime_files, resolve
    from tributary_read.io.storage import FileInfo, Storage, open_storage
    from tributary_read.table.config import Protocol, RollPolicy, Table, TableConfig, Tracking
    from tributary_read.io.formats import DataFormat
    from tributary_read.spool.ingest import OnComplete, SpoolResult, SpoolSource, ingest_dir
    from tributary_read.read.window import TimeWindow
    from tributary_read.write.writer import TableWriter
    from tributary_read.kafka.ingest import KafkaIngestResult, KafkaSource, ingest_kafka
