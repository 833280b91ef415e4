"""The Hive metastore as trib sees it: one interface, and backends opened by URI scheme.

Two backends implement :class:`Metastore`: HiveServer2 through pyhive
(:mod:`tributary_read.hive.hs2`, any HS2: Hive or Spark Thrift Server) and a
SparkSession's catalog (:mod:`tributary_read.spark.catalog`). Both speak
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
import logging
from typing import TYPE_CHECKING, Sequence

from tributary_read.errors import MetastoreError, causes
from tributary_read.hive.dialect import Dialect
from tributary_read.hive.model import HivePartition, HiveTable, PartitionSpec, TableName
from tributary_read.hive.uri import KINDS, SCHEMES, MetastoreURI

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.hive.ddl import TableDefinition


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

    def database_exists(self, name: str) -> bool:
        """Whether database ``name`` exists (a table's CREATE needs it first)."""
        raise NotImplementedError

    #: ``create_table`` runs the definition's DDL as SQL; False: it calls the metastore's own API, and
    #: the DDL is only the equivalent (what ``trib hive create-table --dry-run`` says it would do).
    creates_with_sql: bool = True

    @abc.abstractmethod
    def create_table(self, definition: TableDefinition) -> None:
        """Create the table ``definition`` (:mod:`tributary_read.hive.ddl`, its one owner) describes."""

    def close(self) -> None:
        """Release connections; the object is unusable afterwards."""

    def __enter__(self) -> Metastore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


def timed_out(e: BaseException) -> bool:
    """``e`` (or what it wraps) is a socket read that hit ``?timeout=``: the server did not answer in time.

    Thrift raises its own exception around the socket's; SASL and pyhive may wrap it again.
    """
    for c in causes(e, 5):
        if isinstance(c, TimeoutError) or getattr(c, "type", None) == 3 and type(c).__name__ == "TTransportException":
            return True
        if "timed out" in str(c).lower() or "read timeout" in str(c).lower():
            return True
    return False


def lost_connection(e: BaseException) -> bool:
    """``e`` is the connection failing (a socket error, an EOF, Thrift's transport), not the server's answer."""
    return isinstance(e, (OSError, EOFError)) or type(e).__module__.startswith("thrift")


_QUIET = logging.NullHandler()


def thrift_transport(host: str, port: int, *, auth: str, timeout: float, where: str, extra: str,
                     service: str | None = None, user: str | None = None, password: str | None = None,
                     tls: bool = False, ca_file: str | None = None):
    """The socket and Thrift transport (not yet open) that HiveServer2 and the metastore's API share.

    ``auth``: ``NOSASL`` (raw Thrift), ``KERBEROS`` (SASL GSSAPI for ``service`` on ``host``, with the
    keytab login of :mod:`~tributary_read.kerberos` when one is configured, else the ``kinit``
    cache) or anything else as SASL PLAIN with ``user``/``password``. ``tls``: the socket speaks TLS
    and checks the server's certificate against ``ca_file`` (the system trust store when ``None``).
    ``extra``: the pip extra that brings the client. Returns ``(socket, transport)``. ``timeout`` stays
    the socket's read timeout after the connect, so every call is bounded by it (a server that accepts
    and never answers ends the call with a timeout, never holds it for the OS's idea of a dead peer).
    """
    import importlib.util

    from tributary_read.errors import MissingDependencyError, missing_extra
    import tributary_read.kerberos as kerberos
    import tributary_read.hive.auth as authn

    try:
        from thrift.transport import TSocket, TTransport
    except ImportError:
        raise missing_extra("thrift", extra) from None
    # Thrift logs a failed connect or TLS handshake at ERROR before it raises; without a handler Python
    # prints it on stderr, a second line beside the one trib prints for the same failure.
    logging.getLogger("thrift").addHandler(_QUIET)
    # Bad credentials settings are the user's to fix: told before anything touches the network.
    principal = kerberos.principal_for_handshake() if auth == "KERBEROS" else None
    reach(host, port, timeout, where)
    sock = authn.tls_socket(host, port, ca_file) if tls else TSocket.TSocket(host, port)
    sock.setTimeout(timeout * 1000)
    if auth == "NOSASL":
        return sock, TTransport.TBufferedTransport(sock)
    try:
        import thrift_sasl
        from pyhive.sasl_compat import PureSASLClient
    except ImportError:
        raise missing_extra("thrift_sasl", extra) from None
    if auth == "KERBEROS":
        if not importlib.util.find_spec("kerberos"):
            raise MissingDependencyError(
                "auth=KERBEROS needs the GSSAPI library: pip install 'tributary-read[kerberos]' (it builds "
                "against libkrb5: Debian's libkrb5-dev, Red Hat's krb5-devel)")

        def sasl_client():
            return PureSASLClient(host=host, service=service, principal=principal)
        return sock, thrift_sasl.TSaslClientTransport(sasl_client, "GSSAPI", sock)
    pw = password if password is not None else "x"  # PLAIN without a password (auth NONE): any non-empty one

    def plain_client():
        return PureSASLClient(host=host, username=user, password=pw)
    return sock, thrift_sasl.TSaslClientTransport(plain_client, "PLAIN", sock)


# -- opening ---------------------------------------------------------------------------
#: URI scheme -> ``module:class`` of its backend, whose ``from_uri(uri, **options)`` opens it
#: (derived from :data:`tributary_read.hive.uri.KINDS`, the one table).
BACKENDS: dict[str, str] = {scheme: KINDS[kind].backend for scheme, kind in SCHEMES.items()}


def backend_for(uri: str | MetastoreURI) -> str:
    """The ``module:class`` that opens ``uri``; an unusable URI is bad input."""
    return MetastoreURI.parse(uri).backend


def open_metastore(uri: str | MetastoreURI, *, spark=None, **options) -> Metastore:
    """Open a metastore by URI; see docs/hive.md for the options each backend takes.

    ``spark``: the session a ``spark`` URI's catalog is (ignored by the other kinds); without one
    the catalog backend uses the active session or builds one with trib's session builder.
    """
    u = MetastoreURI.parse(uri)
    module, _, name = u.backend.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if u.is_spark_catalog:
        return cls.from_uri(u, spark=spark, **options)
    return cls.from_uri(u, **options)
