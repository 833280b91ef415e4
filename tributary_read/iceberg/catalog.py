"""Which Iceberg catalog a mirror writes to, named by one URI.

``sqlite:///PATH`` is pyiceberg's SQL catalog on an embedded SQLite file: no server, the default.
``postgresql://USER@HOST:PORT/DB`` is the same catalog on a PostgreSQL server (psycopg2; a password from
``~/.pgpass`` or ``$PGPASSWORD`` as libpq reads them, so none is written into a table's setting); its
warehouse is ``$TRIB_ICEBERG_WAREHOUSE``, else a folder under trib's state directory. The
default URI is ``$TRIB_ICEBERG_CATALOG``, else a SQLite catalog under trib's state directory
(:func:`tributary_read.paths.state_dir`), so two commands on one machine find the same catalog without
being told. The warehouse (where Iceberg's metadata files go) sits beside the SQLite file: the data files
stay where trib wrote them, only metadata is written.

``thrift://HOST:PORT`` is a Hive metastore (pyiceberg's HiveCatalog, :mod:`tributary_read.iceberg.hive_catalog`),
the URI as ``trib hive sync`` takes it (:class:`tributary_read.hive.uri.MetastoreURI`: ``?timeout=``, no
password). Its tables' metadata go under their database's location in the metastore, not under
``$TRIB_ICEBERG_WAREHOUSE`` or trib's state directory: a metastore is shared, and the engines that read its
tables (Spark, Trino, Hive) take a table's files from where its database says; metadata in one machine's state
directory would be a table no other machine can read. The location is the metastore's answer (``CREATE
DATABASE NS LOCATION '...'`` chooses it; one created by the mirror gets the metastore's warehouse), and it
must be a place pyiceberg writes to (a local path, s3://, gs://, ...). A secured metastore (``auth=KERBEROS``)
is reached as ``trib partitions sync`` reaches it: a ``kinit`` ticket, or trib's keytab login.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from tributary_read.errors import CommitStateUnknownError, InvalidInputError, MetastoreError
from tributary_read.exits import one_line
from tributary_read.hive.uri import MetastoreKind, MetastoreURI
from tributary_read.paths import state_dir

#: The environment variable that names the default catalog.
CATALOG_ENV = "TRIB_ICEBERG_CATALOG"
#: What a catalog is called inside pyiceberg (it never leaves this process).
CATALOG_NAME = "trib"


def default_catalog_uri() -> str:
    """``$TRIB_ICEBERG_CATALOG``, else ``sqlite:///STATE/trib/iceberg/catalog.db``."""
    env = os.environ.get(CATALOG_ENV)
    if env:
        return env
    return "sqlite:///" + os.path.join(state_dir("iceberg"), "catalog.db")


def sqlite_path(uri: str) -> str | None:
    """The file of a ``sqlite:///PATH`` URI, made absolute (SQLAlchemy's rule: ``sqlite:////abs`` is
    absolute, ``sqlite:///rel`` relative to the working directory); None for any other kind of URI."""
    if not uri.startswith("sqlite:///"):
        return None
    return os.path.abspath(uri[len("sqlite:///"):])


def check_name(name: str) -> str:
    """An Iceberg table's name as a mirror takes it: ``NAMESPACE.NAME``, no empty part."""
    if "." not in name.strip(".") or any(not part for part in name.split(".")):
        raise InvalidInputError(f"Iceberg table name {name!r}: name it NAMESPACE.NAME (e.g. logs.events)")
    return name


def check_uri(uri: str) -> str:
    """``uri`` if it names a catalog this trib opens: SQLite (made absolute), PostgreSQL or a Hive metastore
    (neither with a password: every front end, ``--catalog``, ``--iceberg-catalog`` and
    ``$TRIB_ICEBERG_CATALOG``, comes through here)."""
    path = sqlite_path(uri)
    if path is not None:
        return "sqlite:///" + path
    if uri.startswith(POSTGRES):
        if urlsplit(uri).password is not None:  # never echoed: the message names the catalog without it
            raise InvalidInputError(
                "a PostgreSQL catalog URI with a password: give the password in ~/.pgpass or $PGPASSWORD, not in "
                "the URI (a URI shows in process lists and error lines, and a mirror setting stores it in the table)")
        return uri
    if MetastoreURI.names_one(uri):
        return hive_metastore(uri).text
    raise InvalidInputError(f"catalog {uri!r}: this trib mirrors into a SQL catalog on SQLite (sqlite:///PATH) "
                            "or PostgreSQL (postgresql://USER@HOST:PORT/DB), or a Hive metastore (thrift://HOST:PORT)")


def hive_metastore(uri: str) -> MetastoreURI:
    """The metastore a ``thrift://HOST:PORT`` catalog names; bad input (one line) for any other metastore URI,
    a password (:meth:`MetastoreURI.parse` refuses it unechoed), a database in the path or an unknown ``auth``."""
    hms = MetastoreURI.parse(uri)
    if hms.kind is not MetastoreKind.THRIFT:
        raise InvalidInputError(f"catalog {uri!r}: an Iceberg catalog on Hive is the metastore's Thrift API "
                                "(thrift://HOST:PORT); HiveServer2 and Spark run SQL, they are no Iceberg catalog")
    if hms.database:
        raise InvalidInputError(f"catalog {uri!r}: give thrift://HOST:PORT without a database; the Iceberg table's "
                                "NS.NAME names its database (NS)")
    from tributary_read.hive.thrift_metastore import auth_mode

    try:
        auth_mode(hms.params.get("auth"))  # told when the mirror is set, not at each commit's connect
    except InvalidInputError as e:
        raise InvalidInputError(f"catalog {uri!r}: {e}") from None
    return hms


#: How a PostgreSQL catalog's URI starts; SQLAlchemy is handed it with psycopg2 named.
POSTGRES = "postgresql://"
#: Where a PostgreSQL catalog's tables write Iceberg metadata (a folder or a URI); default: the state dir.
WAREHOUSE_ENV = "TRIB_ICEBERG_WAREHOUSE"


def open_catalog(uri: str | None = None):
    """The pyiceberg catalog ``uri`` names (default: :func:`default_catalog_uri`).

    A URI :func:`check_uri` refuses is refused with one line rather than half-opened.
    """
    from tributary_read.iceberg import deps  # noqa: F401 - names the extra when pyiceberg is missing

    uri = check_uri(uri or default_catalog_uri())
    if MetastoreURI.names_one(uri):
        from tributary_read.iceberg.hive_catalog import open_hive

        return open_hive(CATALOG_NAME, hive_metastore(uri))
    path = sqlite_path(uri)
    if path is not None:
        folder = os.path.join(os.path.dirname(path), "warehouse")
        db = f"sqlite:///{path}"
    else:
        folder = os.environ.get(WAREHOUSE_ENV) or state_dir("iceberg", "warehouse")
        db = "postgresql+psycopg2://" + uri[len(POSTGRES):]
    if "://" not in folder:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise InvalidInputError(f"catalog {uri!r}: cannot create {folder}: {e.strerror or e}") from None
        folder = "file://" + os.path.abspath(folder)
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(CATALOG_NAME, uri=db, warehouse=folder)


def _outages() -> tuple[type[BaseException], ...]:
    """The exceptions that mean the catalog did not answer (a server down, a dropped connection, a locked
    SQLite file), as opposed to an answer: each catalog's client raises its own."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    try:  # a Hive metastore's: a dropped connection, or a call past ?timeout=
        from thrift.transport.TTransport import TTransportException
    except ImportError:  # no thrift, so no Hive catalog either
        return (OperationalError, InterfaceError, ConnectionError, TimeoutError)
    return (OperationalError, InterfaceError, ConnectionError, TimeoutError, TTransportException)


@contextmanager
def answering(uri: str, committing: str | None = None) -> Iterator[None]:
    """Turn a catalog that did not answer into trib's errors, in one line without the password-free URI's
    secrets (it has none: :func:`check_uri`).

    ``committing`` names what a catalog commit inside the block registers: a failure there is
    :class:`CommitStateUnknownError` (exit 12), since the commit may have landed before the connection
    dropped; the next sync reads the table back and registers what is missing, once. Anywhere else the
    outage is :class:`MetastoreError` (exit 8): nothing was committed, run again once the catalog is back."""
    try:
        yield
    except _outages() as e:
        cause = f"{type(e).__name__}: {one_line(str(e).split(chr(10))[0])}"
        if committing:
            raise CommitStateUnknownError(
                f"Iceberg catalog {uri} stopped answering during the commit of {committing} ({cause}): it may "
                "have landed; run trib iceberg sync again once the catalog is back: it reads the table back and "
                "registers what is missing, once") from None
        raise MetastoreError(f"Iceberg catalog {uri} did not answer ({cause}); nothing was registered by this "
                             "step: run trib iceberg sync again once the catalog is back") from None
