"""Tributary Read: exact incremental loads on Hive/Spark.

Names are loaded on first use (PEP 562), so ``import tributary_read`` stays
cheap for short CLI runs and never imports pyspark; the Spark and Hive helpers
import their heavy dependencies lazily too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import *  # noqa: F401,F403  (small, dependency-free; always loaded)
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

#: public name -> submodule that defines it
_LAZY = {
    "IngestResult": "ingest", "TimeSpec": "ingest", "ingest": "ingest", "recover": "ingest",
    "Layout": "layout", "PartitionDir": "layout",
    "ManifestLog": "log", "TableState": "log",
    "clean": "maintenance", "verify": "maintenance",
    "Commit": "manifest", "FileEntry": "manifest", "Transaction": "manifest",
    "FileSet": "resolve", "ResolvedFile": "resolve", "Source": "resolve",
    "manifest_files": "resolve", "mtime_files": "resolve",
    "TimeWindow": "window", "PartitionFilter": "listing",
    "Consumer": "consumer", "Plan": "consumer", "list_consumers": "consumer",
    "FileInfo": "storage", "Storage": "storage", "open_storage": "storage",
    "RollPolicy": "table", "Table": "table", "TableConfig": "table",
    "TableWriter": "writer",
}

__all__ = sorted([*_errors_all, *_LAZY, "__version__"])


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tributary_read' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .consumer import Consumer, Plan, list_consumers
    from .ingest import IngestResult, TimeSpec, ingest, recover
    from .layout import Layout, PartitionDir
    from .listing import PartitionFilter
    from .log import ManifestLog, TableState
    from .maintenance import clean, verify
    from .manifest import Commit, FileEntry, Transaction
    from .resolve import FileSet, ResolvedFile, Source, manifest_files, mtime_files
    from .storage import FileInfo, Storage, open_storage
    from .table import RollPolicy, Table, TableConfig
    from .window import TimeWindow
    from .writer import TableWriter
