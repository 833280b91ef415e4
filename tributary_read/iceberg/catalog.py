"""Which Iceberg catalog a mirror writes to, named by one URI.

``sqlite:///PATH`` is pyiceberg's SQL catalog on an embedded SQLite file: no server, the default. The
default URI is ``$TRIB_ICEBERG_CATALOG``, else a SQLite catalog under trib's state directory
(:func:`tributary_read.paths.state_dir`), so two commands on one machine find the same catalog without
being told. The warehouse (where Iceberg's metadata files go) sits beside the SQLite file: the data files
stay where trib wrote them, only metadata is written.
"""

from __future__ import annotations

import os

from tributary_read.errors import InvalidInputError
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


def open_catalog(uri: str | None = None):
    """The pyiceberg catalog ``uri`` names (default: :func:`default_catalog_uri`).

    Only SQLite for now: a PostgreSQL or Hive catalog is refused with one line rather than half-opened.
    """
    from tributary_read.iceberg import deps  # noqa: F401 - names the extra when pyiceberg is missing

    uri = uri or default_catalog_uri()
    path = sqlite_path(uri)
    if path is None:
        raise InvalidInputError(f"catalog {uri!r}: this trib mirrors into a SQLite catalog only "
                                "(sqlite:///PATH); PostgreSQL and Hive catalogs are not supported yet")
    from pyiceberg.catalog.sql import SqlCatalog

    folder = os.path.dirname(path)
    try:
        os.makedirs(os.path.join(folder, "warehouse"), exist_ok=True)
    except OSError as e:
        raise InvalidInputError(f"catalog {uri!r}: cannot create {folder}: {e.strerror or e}") from None
    return SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{path}", warehouse="file://" + os.path.join(folder, "warehouse"))
