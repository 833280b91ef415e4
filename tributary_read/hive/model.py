"""The Hive metastore's objects as trib sees them: table names, tables, partitions, statistics.

Plain frozen values: a backend builds them from what its engine answers
(:mod:`tributary_read.hive.describe`), and partition sync compares them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from tributary_read.errors import InvalidInputError

_IDENT = re.compile(r"^[A-Za-z0-9_]{1,128}$")

#: Hive partition parameters that no longer hold once the files changed. Setting numFiles to -1
#: (and dropping these) makes the metastore recount numFiles/totalSize from the files on alter.
STALE_STATS_PARAMS = ("numRows", "rawDataSize", "COLUMN_STATS_ACCURATE")
#: A partition's values by key, in the table's key order (``{"dt": "2024010100"}``).
PartitionSpec = Mapping[str, str]


@dataclass(frozen=True)
class TableName:
    """``db.table``: both parts checked, rendered with backticks."""

    db: str
    name: str

    @classmethod
    def parse(cls, text: str, default_db: str = "default") -> TableName:
        db, sep, name = (text or "").strip().rpartition(".")
        db = db if sep else default_db
        if not _IDENT.fullmatch(db or "") or not _IDENT.fullmatch(name):
            raise InvalidInputError(f"bad Hive table name {text!r} (expected db.table, letters/digits/_)")
        return cls(db.lower(), name.lower())

    @property
    def sql(self) -> str:
        from tributary_read.hive.sql import qualified

        return qualified(self.db, self.name)

    def __str__(self) -> str:
        return f"{self.db}.{self.name}"


@dataclass(frozen=True)
class PartitionStats:
    """Statistics as the engine reports them.

    ``size_bytes``/``num_rows`` are what the engine's planner uses (Spark keeps
    its own copy, ``spark.sql.statistics.*``, ahead of Hive's); ``num_files``/
    ``total_size`` are Hive's own partition parameters.
    """

    size_bytes: int | None = None
    num_rows: int | None = None
    num_files: int | None = None
    total_size: int | None = None


@dataclass(frozen=True)
class HivePartition:
    values: Mapping[str, str] = field(hash=False)
    location: str | None = None
    stats: PartitionStats | None = None
    params: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def spec(self) -> str:
        """``dt=2024010100``: the partition's name, as SHOW PARTITIONS prints it."""
        return "/".join(f"{k}={v}" for k, v in self.values.items())


@dataclass(frozen=True)
class HiveTable:
    name: TableName
    location: str | None
    partition_keys: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    input_format: str | None = None
    serde: str | None = None
    provider: str | None = None
    table_type: str | None = None  # EXTERNAL or MANAGED
    created: str | None = None
    #: SerDe parameters (``field.delim``, ``serialization.null.format``, ...), values as stored.
    serde_params: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    #: Table properties (``skip.header.line.count``, ...).
    properties: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    #: Partition columns with their types, in key order (``partition_keys`` has the names).
    partition_columns: tuple[tuple[str, str], ...] = ()

    @property
    def external(self) -> bool:
        return (self.table_type or "").upper().startswith("EXTERNAL")

    def to_json(self) -> dict:
        return {"table": str(self.name), "location": self.location, "partition_keys": list(self.partition_keys),
                "columns": [list(c) for c in self.columns], "input_format": self.input_format,
                "serde": self.serde, "provider": self.provider, "table_type": self.table_type}

