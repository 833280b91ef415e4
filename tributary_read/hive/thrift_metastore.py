"""The Hive Metastore's own Thrift API (``thrift://HOST:9083``): partitions without any SQL engine.

For shops that run a metastore but no HiveServer2 (Spark-only, Trino, Presto). The client is the
Thrift code that ``pymetastore`` generates from the Hive Metastore IDL: it is maintained, depends
on ``thrift>=0.16`` like pyhive (``hive-metastore-client`` pins thrift 0.13 and would break pyhive),
and gives the complete ``ThriftHiveMetastore.Client``. Its IDL is Hive 3's; the calls used here
exist with the same shapes since Hive 2 and fields a 2.x server does not know are skipped by Thrift.

Batched where the API allows: one ``add_partitions_req`` (IF NOT EXISTS) and one
``drop_partitions_req`` (IF EXISTS, data kept) per batch, all partitions with their locations in
one ``get_partitions``. The metastore itself creates a missing partition directory and recounts
numFiles/totalSize, exactly as it does behind HiveServer2.

Options (URI query): ``auth=NOSASL`` (default; the metastore's ``hive.metastore.sasl.enabled=false``)
or ``auth=KERBEROS`` (SASL GSSAPI, service ``kerberos_service_name``, default ``hive``; needs a
ticket from ``kinit`` and a GSSAPI SASL library), ``timeout`` (seconds), and the path as the
default database.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Sequence

from tributary_read.errors import InvalidInputError, MetastoreError, NoSuchHiveTableError, missing_extra
import tributary_read.hive.auth as authn
from tributary_read.hive.describe import stats_from, table_type
from tributary_read.hive.dialect import DIALECTS
from tributary_read.hive.metastore import Metastore, lost_connection, thrift_transport, timed_out
from tributary_read.hive.model import STALE_STATS_PARAMS, HivePartition, HiveTable, PartitionSpec, TableName
from tributary_read.hive.sql import check_values
from tributary_read.hive.uri import DEFAULT_TIMEOUT_S, KINDS, MetastoreKind, MetastoreURI

DEFAULT_PORT = KINDS[MetastoreKind.THRIFT].default_port
AUTH_MODES = ("NOSASL", "KERBEROS")
#: The connect and every call: one bound, ``?timeout=`` (see hive/uri.py DEFAULT_TIMEOUT_S).
CONNECT_TIMEOUT_S = DEFAULT_TIMEOUT_S

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.hive.ddl import TableDefinition


def auth_mode(auth: str | None) -> str:
    """The SASL mode trib speaks for ``auth`` (a URI's ``?auth=``; default NOSASL), refused unless it is one of
    :data:`AUTH_MODES`: the one reading of it, for ``trib partitions sync`` and the Iceberg Hive catalog alike."""
    mode = (auth or "NOSASL").upper()
    if mode not in AUTH_MODES:
        raise InvalidInputError(f"unknown metastore auth {mode!r}; choose {', '.join(AUTH_MODES)}")
    return mode


class ThriftMetastore(Metastore):
    """One Thrift connection to a Hive Metastore; calls run in order on it."""

    lists_locations = True

    def __init__(self, host: str, port: int = DEFAULT_PORT, *, auth: str = "NOSASL",
                 kerberos_service_name: str | None = None, timeout: float = CONNECT_TIMEOUT_S):
        auth = auth_mode(auth)
        self.host, self.port = host, int(port)
        self.dialect = DIALECTS["metastore"]
        self.statements = 0  # Thrift calls made, as SQL backends count statements
        self._tables: dict[TableName, object] = {}
        self.timeout = float(timeout)
        self._transport, self._client = self._connect(auth, kerberos_service_name or "hive", timeout)

    @classmethod
    def from_uri(cls, uri: str | MetastoreURI, **overrides) -> ThriftMetastore:
        u = MetastoreURI.parse(uri)
        kw = dict(auth=u.params.get("auth", "NOSASL"), kerberos_service_name=u.params.get("kerberos_service_name"),
                  timeout=u.timeout(CONNECT_TIMEOUT_S))
        kw.update(overrides)
        return cls(u.host, u.port, **kw)

    @property
    def address(self) -> str:
        return f"thrift://{self.host}:{self.port}"

    # -- connection ----------------------------------------------------------------
    def _connect(self, auth: str, service: str, timeout: float):
        try:
            from pymetastore.hive_metastore import ThriftHiveMetastore
            from thrift.protocol import TBinaryProtocol
        except ImportError:
            raise missing_extra("pymetastore", "hive") from None
        where = f"the metastore at {self.host}:{self.port}"
        sock, transport = thrift_transport(self.host, self.port, auth=auth, timeout=timeout, where=where,
                                           extra="hive", service=service)
        # The C codec (thrift's fastbinary; the pure-Python one where it is not built): the same bytes, but a
        # batch of 1000 partitions encodes in ~5 ms instead of ~55 and a year's get_partitions decodes ~10x faster.
        client = ThriftHiveMetastore.Client(TBinaryProtocol.TBinaryProtocolAccelerated(transport))
        try:
            transport.open()
            # A SASL metastore hangs up on raw Thrift at the first call, not at the connect: ask a
            # read-only question now, so a mismatch is told as one before any change is sent.
            client.get_database("default")
        except Exception as e:  # noqa: BLE001 - thrift, SASL and the call's own answers alike
            if type(e).__name__ in ("NoSuchObjectException", "MetaException"):
                return transport, client  # the server answered: the connection works
            transport.close()
            refused = authn.refused(e, where=where, auth=auth)
            if refused is not None:
                raise refused from None
            if timed_out(e):
                raise MetastoreError(f"{where} accepted the connection but did not answer within {timeout:g}s "
                                     "(?timeout=)") from None
            if type(e).__name__ == "TApplicationException":  # a Thrift server, not the metastore's service
                raise self._not_a_metastore(f"it does not know the metastore's get_database ({e})") from None
            if lost_connection(e):
                if self._speaks_plain_sasl(timeout):
                    raise self._not_a_metastore("it answers a SASL PLAIN handshake, as HiveServer2 does, "
                                                "and a metastore never does") from None
                raise authn.mismatch(where, auth, False, "hive.metastore.sasl.enabled (auth=KERBEROS when true, "
                                     "NOSASL when false)") from None
            raise MetastoreError(f"cannot open {where} (auth={auth}): {e}") from None
        # The socket keeps ``timeout`` as its read timeout: each call is bounded, not only the connect.
        return transport, client

    def _not_a_metastore(self, why: str) -> MetastoreError:
        """The likely wrong port: HiveServer2's (10000) where the metastore's (9083) was meant."""
        return MetastoreError(f"{self.host}:{self.port} is not a Hive metastore: {why}; a thrift:// URI names the "
                              f"metastore's Thrift port (9083 by default; `trib hive status` shows the local pair's), "
                              f"and HiveServer2 is hs2://{self.host}:{self.port}")

    def _speaks_plain_sasl(self, timeout: float) -> bool:
        """Whether the server completes a SASL PLAIN handshake: HiveServer2's default (authentication
        NONE) does, a metastore never (raw Thrift, or SASL with GSSAPI/DIGEST only)."""
        try:
            _sock, transport = thrift_transport(self.host, self.port, auth="NONE", timeout=min(timeout, 5.0),
                                                where=self.address, extra="hive", user="trib")
            transport.open()
        except Exception:  # noqa: BLE001 - any refusal: not a SASL PLAIN server
            return False
        transport.close()
        return True

    def _call(self, what: str, table: TableName | None, fn):
        """One Thrift call: its errors become one MetastoreError line (NoSuchHiveTableError for a table)."""
        from pymetastore.hive_metastore import ttypes

        self.statements += 1
        try:
            return fn(self._client)
        except ttypes.NoSuchObjectException:
            if table is not None and what.startswith("table"):
                raise NoSuchHiveTableError(f"Hive table {table} does not exist ({self.address})") from None
            raise
        except (ttypes.MetaException, ttypes.InvalidObjectException, ttypes.AlreadyExistsException,
                ttypes.InvalidOperationException) as e:
            msg = (getattr(e, "message", None) or type(e).__name__).strip().splitlines()[0][:300]
            raise MetastoreError(f"{self.address}: {what} {table or ''}: {msg}".replace("  ", " ")) from None
        except Exception as e:  # noqa: BLE001 - thrift transport errors and OSError alike
            if timed_out(e):
                raise MetastoreError(f"{self.address} did not answer within {self.timeout:g}s (?timeout=) "
                                     f"during {what} {table or ''}; the call's outcome is unknown: rerun "
                                     "(adds and drops are idempotent)".replace(" ;", ";")) from None
            if not lost_connection(e):
                raise
            raise MetastoreError(f"lost {self.address} during {what} {table or ''}: {e}; the call's outcome "
                                 "is unknown: rerun (adds and drops are idempotent)") from None

    def _table(self, table: TableName, fresh: bool = False):
        if fresh or table not in self._tables:
            self._tables[table] = self._call("table", table, lambda c: c.get_table(table.db, table.name))
        return self._tables[table]

    def _keys(self, table: TableName) -> list[str]:
        return [k.name for k in (self._table(table).partitionKeys or [])]

    # -- reads -----------------------------------------------------------------
    def database_exists(self, name: str) -> bool:
        from pymetastore.hive_metastore import ttypes

        try:
            self._call("database", None, lambda c: c.get_database(name))
        except ttypes.NoSuchObjectException:
            return False
        return True

    def table_info(self, table: TableName) -> HiveTable:
        t = self._table(table, fresh=True)
        sd, params = t.sd, dict(t.parameters or {})
        serde = sd.serdeInfo
        return HiveTable(
            name=table, location=sd.location,
            partition_keys=tuple(k.name for k in t.partitionKeys or []),
            columns=tuple((c.name, c.type) for c in sd.cols or []),
            input_format=sd.inputFormat, serde=serde.serializationLib if serde else None,
            provider=params.get("spark.sql.sources.provider", "hive"), table_type=table_type(t.tableType),
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t.createTime)) if t.createTime else None,
            serde_params=dict(serde.parameters or {}) if serde else {}, properties=params,
            partition_columns=tuple((k.name, k.type) for k in t.partitionKeys or []))

    def _partition(self, keys: list[str], p) -> HivePartition:
        params = dict(p.parameters or {})
        return HivePartition(dict(zip(keys, p.values)), p.sd.location if p.sd else None,
                             stats_from({}, params), params)

    def list_partitions(self, table: TableName, with_locations: bool = False) -> list[HivePartition]:
        keys = self._keys(table)
        parts = self._call("table partitions", table, lambda c: c.get_partitions(table.db, table.name, -1))
        return [self._partition(keys, p) for p in parts]

    def describe_partition(self, table: TableName, values: PartitionSpec) -> HivePartition | None:
        from pymetastore.hive_metastore import ttypes

        keys = self._keys(table)
        vals = list(check_values(keys, values).values())
        try:
            p = self._call("partition", table, lambda c: c.get_partition(table.db, table.name, vals))
        except ttypes.NoSuchObjectException:
            return None
        return self._partition(keys, p)

    # -- writes ----------------------------------------------------------------
    creates_with_sql = False

    def create_table(self, definition: TableDefinition) -> None:
        """``create_table`` of the metastore API: the table the definition's DDL makes, field by field.

        No SQL engine expands the DDL here, so every field Hive's ``CREATE EXTERNAL TABLE`` would set is
        set from :class:`~tributary_read.hive.ddl.TableDefinition` (its one owner); the owner is the OS
        user, as Hive's own client names it. A table created meanwhile is an error (the DDL's is too).
        """
        import getpass

        from pymetastore.hive_metastore import ttypes

        d, s = definition.to_json(), definition.storage
        sd = ttypes.StorageDescriptor(
            cols=[ttypes.FieldSchema(name=c, type=t) for c, t in d["columns"]], location=d["location"],
            inputFormat=s.input_format, outputFormat=s.output_format, compressed=False, numBuckets=-1,
            serdeInfo=ttypes.SerDeInfo(serializationLib=s.serde, parameters=dict(s.serde_params)),
            bucketCols=[], sortCols=[], parameters={},
            skewedInfo=ttypes.SkewedInfo(skewedColNames=[], skewedColValues=[], skewedColValueLocationMaps={}),
            storedAsSubDirectories=False)
        table = ttypes.Table(
            tableName=definition.name.name, dbName=definition.name.db, owner=getpass.getuser(),
            createTime=int(time.time()), lastAccessTime=0, retention=0, sd=sd,
            partitionKeys=[ttypes.FieldSchema(name=k, type=t) for k, t in d["partition_keys"]],
            parameters=dict(d["parameters"]), tableType=d["table_type"])
        try:
            self._call("create table", definition.name, lambda c: c.create_table(table))
        except ttypes.NoSuchObjectException:  # its database went away since create_table looked
            raise InvalidInputError(f"database {definition.name.db} does not exist ({self.address})") from None
        self._tables.pop(definition.name, None)

    def _batches(self, items: list, batch_size: int | None) -> list[list]:
        n = batch_size or self.dialect.max_batch
        if n < 1:
            raise InvalidInputError(f"batch size must be >= 1, not {n}")
        return [items[i:i + n] for i in range(0, len(items), n)]

    def add_partitions(self, table, parts, batch_size=None) -> int:
        from pymetastore.hive_metastore import ttypes

        keys = self._keys(table)
        checked = [(list(check_values(keys, v).values()), loc) for v, loc in parts]  # all, before any call
        if not checked:
            return 0
        t = self._table(table)
        now = int(time.time())

        def partition(vals, loc):
            sd = copy.copy(t.sd)  # each partition its own location, the table's format and SerDe
            sd.location = loc
            return ttypes.Partition(values=vals, dbName=table.db, tableName=table.name, createTime=now,
                                    lastAccessTime=0, sd=sd, parameters={})
        calls = 0
        for batch in self._batches(checked, batch_size):
            req = ttypes.AddPartitionsRequest(dbName=table.db, tblName=table.name,
                                              parts=[partition(v, loc) for v, loc in batch],
                                              ifNotExists=True, needResult=False)
            self._call("add partitions to", table, lambda c: c.add_partitions_req(req))
            calls += 1
        return calls

    def drop_partitions(self, table, values, batch_size=None) -> int:
        from pymetastore.hive_metastore import ttypes

        keys = self._keys(table)
        names = ["/".join(f"{k}={v}" for k, v in check_values(keys, vals).items()) for vals in values]
        calls = 0
        for batch in self._batches(names, batch_size):
            req = ttypes.DropPartitionsRequest(dbName=table.db, tblName=table.name,
                                               parts=ttypes.RequestPartsSpec(names=batch), deleteData=False,
                                               ifExists=True, needResult=False)
            self._call("drop partitions of", table, lambda c: c.drop_partitions_req(req))
            calls += 1
        return calls

    def _by_names(self, table: TableName, values: Sequence[PartitionSpec]) -> list:
        keys = self._keys(table)
        names = ["/".join(f"{k}={v}" for k, v in check_values(keys, vals).items()) for vals in values]
        return self._call("partitions of", table, lambda c: c.get_partitions_by_names(table.db, table.name, names))

    def set_locations(self, table, parts) -> int:
        if not parts:
            return 0
        found = {tuple(p.values): p for p in self._by_names(table, [v for v, _ in parts])}
        keys = self._keys(table)
        changed = []
        for vals, loc in parts:
            p = found.get(tuple(check_values(keys, vals).values()))
            if p is not None:
                p.sd.location = loc
                changed.append(p)
        if changed:
            self._call("relocate partitions of", table, lambda c: c.alter_partitions(table.db, table.name, changed))
        return 1 + bool(changed)

    def refresh_stats(self, table, values) -> int:
        if not values:
            return 0
        parts = self._by_names(table, values)
        for p in parts:
            params = dict(p.parameters or {})
            for k in STALE_STATS_PARAMS:
                params.pop(k, None)
            params["numFiles"] = "-1"  # the metastore recounts numFiles/totalSize from the files
            p.parameters = params
        self._call("refresh statistics of", table, lambda c: c.alter_partitions(table.db, table.name, parts))
        return 1  # the request that changed them (the read before it changes nothing)

    def close(self) -> None:
        try:
            self._transport.close()
        except Exception:  # noqa: BLE001 - closing a dead connection is not an error
            pass
