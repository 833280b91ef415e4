"""The Hive metastore as trib sees it: one interface, and backends opened by URI scheme.

Two backends implement :class:`Metastore`: HiveServer2 through pyhive
(:mod:`tributary_read.hive.hs2`, any HS2: Hive or Spark Thrift Server) and a
SparkSession's catalog (:mod:`tributary_read.hive.spark_catalog`). Both speak
SQL rendered from the templates in ``sql/`` (:mod:`tributary_read.hive.sql`,
through :class:`~tributary_read.hive.sql_metastore.SqlMetastore`); what differs
between engines lives in :data:`~tributary_read.hive.dialect.DIALECTS`.

:data:`BACKENDS` names each backend by dotted path and :func:`open_metastore`
imports it on first use: backends import this module, never the reverse, and
opening an ``hs2://`` metastore never loads the Spark backend.
"""

from __future__ import annotations

import abc
import importlib
from typing import Sequence
from urllib.parse import parse_qsl, urlparse

from tributary_read.errors import InvalidInputError, MetastoreError
from tributary_read.hive.dialect import Dialect
from tributary_read.hive.model import HivePartition, HiveTable, PartitionSpec, TableName


# -- the interface -------------------------------------------------------------------
class Metastore(abc.ABC):
    """Partition metadata of Hive tables, batched where the engine allows.

    Attributes:
        dialect: the engine's row in DIALECTS.
        lists_locations: ``list_partitions(with_locations=True)`` costs one call
            (else one DESCRIBE per partition, and callers should remember locations).
        sets_hive_stats: ``refresh_stats`` leaves Hive's numFiles/totalSize exact.
    """

    dialect: Dialect
    lists_locations: bool = False

    @property
    def sets_hive_stats(self) -> bool:
        return self.dialect.refresh_sets_hive_params

    @property
    @abc.abstractmethod
    def address(self) -> str:
        """Where this metastore is, for messages and the sync state (``hs2://h:p``, ``spark``)."""

    @abc.abstractmethod
    def table_info(self, table: TableName) -> HiveTable: ...

    @abc.abstractmethod
    def list_partitions(self, table: TableName, with_locations: bool = False) -> list[HivePartition]: ...

    @abc.abstractmethod
    def describe_partition(self, table: TableName, values: PartitionSpec) -> HivePartition | None: ...

    @abc.abstractmethod
    def add_partitions(self, table: TableName, parts: Sequence[tuple[PartitionSpec, str]],
                       batch_size: int | None = None) -> int:
        """Add (IF NOT EXISTS) partitions at explicit locations; returns statements run."""

    @abc.abstractmethod
    def drop_partitions(self, table: TableName, values: Sequence[PartitionSpec],
                        batch_size: int | None = None) -> int: ...

    @abc.abstractmethod
    def set_locations(self, table: TableName, parts: Sequence[tuple[PartitionSpec, str]]) -> int: ...

    @abc.abstractmethod
    def refresh_stats(self, table: TableName, values: Sequence[PartitionSpec]) -> int: ...

    def create_table(self, table: TableName, ddl: str) -> None:
        """Create ``table`` with ``ddl`` (rendered by :mod:`tributary_read.hive.ddl`)."""
        raise MetastoreError(f"{self.address} cannot create tables: create {table} through "
                             "HiveServer2 or Spark (give the metastore as hs2://HOST:PORT or spark)",
                             metastore="the metastore as")

    def close(self) -> None:
        """Release connections; the object is unusable afterwards."""

    def __enter__(self) -> Metastore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def host_uri(uri: str, default_port: int, options: set[str], example: str,
             default_timeout: float) -> tuple[str, int, dict[str, str], float]:
    """Host, port, query options (only ``options`` and ``timeout`` allowed) and timeout of ``scheme://h:p?...``."""
    u = urlparse(uri)
    if not u.hostname:
        raise InvalidInputError(f"metastore URI needs a host: {uri!r} (e.g. {example})")
    try:
        port = u.port or default_port
    except ValueError:
        raise InvalidInputError(f"bad port in {uri!r}") from None
    q = query_options(uri)
    unknown = set(q) - options - {"timeout"}
    if unknown:
        raise InvalidInputError(f"unknown option(s) {', '.join(sorted(unknown))} in {uri!r}")
    try:
        timeout = float(q.get("timeout", default_timeout))
    except ValueError:
        raise InvalidInputError(f"bad timeout in {uri!r}") from None
    return u.hostname, port, q, timeout


def reach(host: str, port: int, timeout: float, where: str) -> None:
    """Probe with a plain socket first: its errno says *why* (refused, timeout, unknown host),
    which thrift's "Could not connect to any of" hides."""
    import socket

    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except socket.gaierror as e:
        raise MetastoreError(f"cannot reach {where}: unknown host ({e.strerror})") from None
    except TimeoutError:
        raise MetastoreError(f"cannot reach {where}: timed out after {timeout:g}s") from None
    except OSError as e:
        raise MetastoreError(f"cannot reach {where}: {(e.strerror or str(e)).lower()}") from None


# -- opening ---------------------------------------------------------------------------
#: URI scheme -> ``module:class`` of its backend, whose ``from_uri(uri, **options)`` opens it.
#: ``hs2://host:port[/db]?auth=...``, ``thrift://host:9083?auth=...`` or ``spark[?conf.KEY=VALUE...]``.
BACKENDS: dict[str, str] = {
    "hs2": "tributary_read.hive.hs2:Hs2Metastore",
    "hive2": "tributary_read.hive.hs2:Hs2Metastore",
    "spark": "tributary_read.hive.spark_catalog:SparkCatalogMetastore",
    "thrift": "tributary_read.hive.thrift_metastore:ThriftMetastore",
}


def backend_for(uri: str) -> str:
    """The ``module:class`` that opens ``uri``; an unknown scheme is bad input."""
    scheme = (uri or "").split(":", 1)[0].split("?", 1)[0].lower()
    backend = BACKENDS.get(scheme)
    if backend is None:
        raise InvalidInputError(f"unknown metastore {uri!r}: use hs2://HOST:PORT, thrift://HOST:PORT or spark")
    return backend


def open_metastore(uri: str, **options) -> Metastore:
    """Open a metastore by URI; see docs/hive.md for the options each backend takes."""
    module, _, name = backend_for(uri).partition(":")
    return getattr(importlib.import_module(module), name).from_uri(uri, **options)


def query_options(uri: str) -> dict[str, str]:
    """The ``?k=v&...`` options of a metastore URI (values URL-decoded)."""
    return dict(parse_qsl(urlparse(uri).query, keep_blank_values=True))
