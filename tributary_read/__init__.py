"""Tributary Read: exact incremental loads on Hive/Spark.

Importing this package never imports pyspark; Spark helpers live in
``tributary_read.spark`` and import it lazily.
"""

from .errors import (
    BadRecordError,
    CommitConflictError,
    InvalidInputError,
    InvalidLayoutError,
    ManifestCorruptError,
    MetastoreError,
    MissingDependencyError,
    NoSuchTableError,
    StorageError,
    TableExistsError,
    TributaryError,
    UnsupportedFormatVersionError,
    VerificationError,
)
from .ingest import IngestResult, TimeSpec, ingest, recover
from .layout import Layout, PartitionDir
from .log import ManifestLog, TableState
from .maintenance import clean, verify
from .manifest import Commit, FileEntry, Transaction
from .resolve import FileSet, ResolvedFile, manifest_files
from .storage import FileInfo, Storage, open_storage
from .table import RollPolicy, Table, TableConfig
from .writer import TableWriter

__version__ = "0.1.0"

__all__ = [name for name in dir() if not name.startswith("_")]
