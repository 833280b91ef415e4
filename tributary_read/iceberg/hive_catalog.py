"""An Iceberg catalog on a Hive metastore (``thrift://HOST:PORT``): pyiceberg's HiveCatalog over trib's Thrift transport.

pyiceberg's HiveCatalog keeps an Iceberg table as a metastore table whose ``metadata_location`` parameter
names its current metadata file. A commit takes the metastore's lock on the table (``lock``, the API behind
Hive's transactions), checks the commit's requirements against the metadata the table names, writes the new
metadata file and points the table at it (``alter_table``), then unlocks: that lock is what makes a commit
atomic against another mirror's, as the SQL catalog's conditional UPDATE does. The metastore therefore needs
its lock tables (``TXNS``, ``HIVE_LOCKS``, ...): schematool makes them; ``trib hive up``'s metastore makes them
itself (its launcher, hive_udfs/java/trib/hive/LoopbackMetaStore.java).

The connection is trib's own (:func:`tributary_read.hive.metastore.thrift_transport`, as ``trib partitions sync``'s
``thrift://`` backend opens it): a metastore that is down is one line naming it, and every call is bounded by
``?timeout=`` (60 s by default), where pyiceberg's own socket would wait on a metastore that accepts and never
answers for as long as the OS keeps the connection, and a secured metastore (``?auth=KERBEROS``) is reached
with a ``kinit`` ticket or trib's keytab login (:mod:`tributary_read.kerberos`), where pyiceberg's own SASL
transport knows only a ticket cache.

A lock still held when pyiceberg's wait for it ends (4 checks over about 14 s; a commit holds it for well
under a second) was most likely left by a commit that died between its lock and its unlock: the metastore
frees it after ``hive.txn.timeout`` (5 min) if its housekeeping runs (``trib hive up``'s does). The sync then
ends with one line (exit 5, run it again later) instead of counting it as a lost race and retrying, which
would hold a command (an ingest's mirror) for as long as the lock stays.
"""

from __future__ import annotations

from tributary_read.iceberg import deps  # noqa: F401 - first: names the extra when pyiceberg is missing

import logging

from pyiceberg.exceptions import CommitFailedException, WaitingForLockException

from tributary_read.errors import CommitConflictError, missing_extra
from tributary_read.hive.metastore import thrift_transport
from tributary_read.hive.thrift_metastore import auth_mode
from tributary_read.hive.uri import MetastoreURI

try:
    from pyiceberg.catalog.hive import HiveCatalog, _HiveClient
except ImportError:  # pyiceberg's metastore client is Thrift code: thrift comes with trib's hive extra
    raise missing_extra("thrift", "hive") from None

# "Wait on lock for NS.NAME" at WARNING, once a check: on stderr (Python's last-resort handler) they would
# bury the one line a failed sync prints. They still reach the handlers of an application that has some.
logging.getLogger("pyiceberg.catalog.hive").addHandler(logging.NullHandler())


class _Client(_HiveClient):
    """pyiceberg's client (opened for each catalog call, a new transport each time) on trib's transport."""

    def __init__(self, hms: MetastoreURI):
        self._hms = hms
        super().__init__(f"thrift://{hms.host}:{hms.port}")

    def _init_thrift_transport(self):
        hms = self._hms
        assert hms.host is not None and hms.port is not None
        return thrift_transport(hms.host, hms.port, auth=auth_mode(hms.params.get("auth")),
                                timeout=hms.timeout(), where=f"the metastore at {hms.host}:{hms.port}",
                                extra="hive", service=hms.params.get("kerberos_service_name") or "hive")[1]


class TribHiveCatalog(HiveCatalog):
    """HiveCatalog whose every metastore call goes through :class:`_Client`."""

    def __init__(self, name: str, hms: MetastoreURI):
        self._hms = hms
        super().__init__(name, uri=f"thrift://{hms.host}:{hms.port}")

    def _create_hive_client(self, properties: dict[str, str]) -> _HiveClient:  # type: ignore[override]
        return _Client(self._hms)

    def commit_table(self, table, requirements, updates):
        try:
            return super().commit_table(table, requirements, updates)
        except CommitFailedException as e:
            if not isinstance(e.__cause__, WaitingForLockException):
                raise  # a lost race (the table moved on): the mirror reads it back and goes on
            name = ".".join(table.name())
            raise CommitConflictError(
                f"Iceberg table {name}: the metastore's lock on it is still held, most likely by a commit that "
                f"died before its unlock, which the metastore frees after hive.txn.timeout if its housekeeping "
                f"runs; run trib iceberg sync again later") from None


def open_hive(name: str, hms: MetastoreURI) -> HiveCatalog:
    """The catalog on ``hms`` (already checked by :func:`tributary_read.iceberg.catalog.check_uri`).

    No warehouse is given: every metastore database has a location (the metastore assigns
    ``hive.metastore.warehouse.dir/NS.db`` to one created without), and HiveCatalog puts a table's metadata
    under its database's location before it would look at a warehouse. See the catalog module for why.

    The connection is tried first as ``trib partitions sync --metastore thrift://`` tries it
    (:class:`~tributary_read.hive.thrift_metastore.ThriftMetastore`): a wrong port (HiveServer2's), a refused
    handshake or a silent server is one line in words, not a Thrift error from the first catalog call.
    """
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    ThriftMetastore.from_uri(hms).close()
    return TribHiveCatalog(name, hms)
