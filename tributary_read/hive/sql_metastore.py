"""A metastore whose every operation is SQL: the shared half of both backends.

A backend supplies only the transport (``_execute``) and how to read its
driver's errors (``_error``); statements come from the templates in ``sql/``,
engine differences from the backend's :class:`~tributary_read.hive.dialect.Dialect`.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Iterator

from tributary_read.errors import MetastoreError, NoSuchHiveTableError
from tributary_read.hive.describe import parse_describe, parse_partition_name, stats_from, table_type
from tributary_read.hive.dialect import Dialect
from tributary_read.hive.metastore import Metastore
from tributary_read.hive.model import HivePartition, HiveTable, PartitionSpec, TableName
from tributary_read.hive.sql import ITEM_JOIN, render, render_spec, sql_string
from tributary_read.io.location import check_location

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.hive.ddl import TableDefinition

#: statements longer than this are split even below the batch size
MAX_STATEMENT_CHARS = 1_000_000
DEFAULT_BATCH_SIZE = 1000


class SqlMetastore(Metastore):
    """Every operation as SQL over ``_run``; a backend supplies the transport."""

    def __init__(self, dialect: Dialect):
        self.dialect = dialect
        self._keys: dict[TableName, tuple[str, ...]] = {}
        self._batch_conf: int | None = None
        self.statements = 0

    @abc.abstractmethod
    def _execute(self, sql: str) -> list[tuple]:
        """Run one statement and return its rows; raise the driver's own errors."""

    def _error(self, e: Exception) -> str:
        """One line saying what the engine reported."""
        return (str(e).strip().splitlines() or [type(e).__name__])[0][:400]

    def _run(self, sql: str, table: TableName | None = None) -> list[tuple]:
        self.statements += 1
        try:
            return self._execute(sql)
        except MetastoreError:
            raise
        except Exception as e:  # noqa: BLE001 - every driver error becomes one MetastoreError
            msg = self._error(e)
            if table is not None and any(m in str(e) for m in self.dialect.not_found):
                raise NoSuchHiveTableError(f"Hive table {table} does not exist ({self.address})") from e
            raise MetastoreError(f"{self.address}: {msg} (while running: {sql[:160]})") from e

    def create_table(self, definition: TableDefinition) -> None:
        self._run(definition.ddl(), definition.name)

    def database_exists(self, name: str) -> bool:
        from tributary_read.hive.sql import show_database

        return any(str(r[0]).lower() == name.lower() for r in self._run(show_database(name)))

    def execute(self, sql: str) -> list[tuple]:
        """Run one statement (DDL, function registration); errors are one MetastoreError line."""
        return self._run(sql)

    # -- reads -----------------------------------------------------------------
    def table_info(self, table: TableName) -> HiveTable:
        d = parse_describe(self._run(render("describe_table", table=table.sql), table))
        info = HiveTable(table, d.info.get("location"), tuple(k.lower() for k in d.partition_keys),
                         tuple(d.columns), d.info.get("input_format"), d.info.get("serde"),
                         d.info.get("provider"), table_type(d.info.get("table_type")), d.info.get("created"),
                         dict(d.serde_params), {**d.params, **d.table_params},
                         tuple((k.lower(), t) for k, t in d.partition_columns))
        self._keys[table] = info.partition_keys
        return info

    def _keys_of(self, table: TableName) -> tuple[str, ...]:
        if table not in self._keys:
            self.table_info(table)
        return self._keys[table]

    def list_partitions(self, table: TableName, with_locations: bool = False) -> list[HivePartition]:
        rows = self._run(render("show_partitions", table=table.sql), table)
        parts = [HivePartition(parse_partition_name(r[0])) for r in rows]
        if with_locations:
            parts = [self.describe_partition(table, p.values) or p for p in parts]
        return parts

    def describe_partition(self, table: TableName, values: PartitionSpec) -> HivePartition | None:
        spec = render_spec(self._keys_of(table), values)
        try:
            rows = self._run(render("describe_partition", table=table.sql, spec=spec), table)
        except NoSuchHiveTableError:
            raise
        except MetastoreError as e:
            if "PARTITIONS_NOT_FOUND" in str(e) or "Partition not found" in str(e) \
                    or "NoSuchPartitionException" in str(e):
                return None
            raise
        d = parse_describe(rows)
        return HivePartition(dict(values), d.info.get("location"), stats_from(d.info, d.params), d.params)

    # -- writes ----------------------------------------------------------------
    def _batches(self, items: list[str], batch_size: int | None) -> Iterator[list[str]]:
        size = max(1, min(batch_size or DEFAULT_BATCH_SIZE, self.dialect.max_batch))
        batch: list[str] = []
        chars = 0
        for it in items:
            if batch and (len(batch) >= size or chars + len(it) > MAX_STATEMENT_CHARS):
                yield batch
                batch, chars = [], 0
            batch.append(it)
            chars += len(it) + 2
        if batch:
            yield batch

    def _configure_batch(self, n: int) -> None:
        """Let the engine pass a whole statement to the metastore in one call."""
        if self.dialect.batch_conf and n > 0 and self._batch_conf != n:
            self._run(render("set_conf", key=self.dialect.batch_conf, value=str(int(n))))
            self._batch_conf = n

    def add_partitions(self, table, parts, batch_size=None) -> int:
        keys = self._keys_of(table)
        items = [render("add_partitions.item", spec=render_spec(keys, v), location=sql_string(check_location(loc)))
                 for v, loc in parts]
        n = 0
        for batch in self._batches(items, batch_size):
            self._configure_batch(len(batch))
            self._run(render("add_partitions", table=table.sql, items=ITEM_JOIN["add_partitions"].join(batch)),
                      table)
            n += 1
        return n

    def drop_partitions(self, table, values, batch_size=None) -> int:
        keys = self._keys_of(table)
        items = [render("drop_partitions.item", spec=render_spec(keys, v)) for v in values]
        n = 0
        for batch in self._batches(items, batch_size):
            self._run(render("drop_partitions", table=table.sql, items=ITEM_JOIN["drop_partitions"].join(batch)),
                      table)
            n += 1
        return n

    def set_locations(self, table, parts) -> int:
        keys = self._keys_of(table)
        for v, loc in parts:
            self._run(render("set_location", table=table.sql, spec=render_spec(keys, v),
                             location=sql_string(check_location(loc))), table)
        return len(parts)

    def refresh_stats(self, table, values) -> int:
        keys = self._keys_of(table)
        for v in values:
            self._run(render(self.dialect.refresh, table=table.sql, spec=render_spec(keys, v)), table)
        return len(values)
