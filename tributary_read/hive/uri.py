"""A metastore URI, parsed once: every front end (CLI, job file, ETL, demo, ``trib sql``) asks this value.

"Is this the Spark catalog?", "which backend opens it?", "what does a Spark session need to use it
as its catalog?" were string tests in five places that disagreed at the edges (``SPARK``,
``spark?conf...``). They are answered here only; tests/test_architecture.py keeps it so.

A URI never carries a password: argv is visible to every user of the machine (``ps``), and the URI
is echoed in messages and recorded in table.json and job reports. The password comes from
``$TRIB_HS2_PASSWORD`` or from the file ``password_file=`` names (:mod:`tributary_read.hive.auth`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping
from urllib.parse import parse_qsl, urlsplit

from tributary_read.errors import InvalidInputError
from tributary_read.secret import is_secret

PASSWORD_ENV = "TRIB_HS2_PASSWORD"
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")

#: What ``?timeout=`` is when not given: the bound of the connect and of every call. A metastore that
#: accepts and never answers would otherwise hold a sync (and an ETL run's lock) for as long as the
#: OS keeps the socket; a minute is far above any healthy call and far below a scheduler's next hour.
DEFAULT_TIMEOUT_S = 60.0


class MetastoreKind(enum.Enum):
    """What is at the other end; the value is the canonical scheme."""

    HS2 = "hs2"
    THRIFT = "thrift"
    SPARK = "spark"


@dataclass(frozen=True)
class _KindFacts:
    backend: str  #: ``module:class`` whose ``from_uri`` opens it (imported on first use)
    default_port: int | None
    options: frozenset[str]  #: query options allowed besides ``timeout``
    example: str


#: One row per kind: add a backend by adding a row (and a scheme to SCHEMES).
KINDS: dict[MetastoreKind, _KindFacts] = {
    MetastoreKind.HS2: _KindFacts("tributary_read.hive.hs2:Hs2Metastore", 10000,
                                  frozenset({"auth", "user", "kerberos_service_name", "engine", "password_file", "ssl",
                                             "ssl_ca", "allow_plaintext_password"}),
                                  "hs2://127.0.0.1:10000"),
    MetastoreKind.THRIFT: _KindFacts("tributary_read.hive.thrift_metastore:ThriftMetastore", 9083,
                                     frozenset({"auth", "kerberos_service_name"}), "thrift://127.0.0.1:9083"),
    MetastoreKind.SPARK: _KindFacts("tributary_read.spark.catalog:SparkCatalogMetastore", None,
                                    frozenset(), "spark"),
}
#: Scheme as written (case-insensitive) -> kind.
SCHEMES: dict[str, MetastoreKind] = {"hs2": MetastoreKind.HS2, "hive2": MetastoreKind.HS2,
                                     "thrift": MetastoreKind.THRIFT, "spark": MetastoreKind.SPARK}
_UNKNOWN = "use hs2://HOST:PORT, thrift://HOST:PORT or spark"


@dataclass(frozen=True)
class MetastoreURI:
    """``hs2://HOST:PORT[/DB]?auth=...``, ``thrift://HOST:PORT?auth=...`` or ``spark[?conf.KEY=VALUE...]``.

    ``text`` is the URI as given (it holds no secret: :meth:`parse` refuses one); ``params`` the
    URL-decoded query options, already checked against the kind's allowed set.
    """

    kind: MetastoreKind
    text: str
    host: str | None = None
    port: int | None = None
    database: str | None = None
    user: str | None = None
    params: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    @classmethod
    def parse(cls, uri: str | MetastoreURI) -> MetastoreURI:
        """The typed URI; anything unusable (unknown scheme, password, bad port or option) is bad input."""
        if isinstance(uri, MetastoreURI):
            return uri
        text = (uri or "").strip() if isinstance(uri, str) else ""
        scheme = _scheme(text)
        kind = SCHEMES.get(scheme)
        if kind is None:
            raise InvalidInputError(f"unknown metastore {uri!r}: {_UNKNOWN}")
        facts = KINDS[kind]
        if kind is MetastoreKind.SPARK:
            rest = text[len(scheme):]
            if rest and not rest.startswith("?"):
                raise InvalidInputError(f"unknown metastore {uri!r}: {_UNKNOWN}")
            params = dict(parse_qsl(rest[1:], keep_blank_values=True))
            for k in params:
                if not k.startswith("conf.") or len(k) == 5:
                    raise InvalidInputError(f"unknown option {k!r} in {text!r} (spark takes conf.KEY=VALUE)")
                if is_secret(k):
                    raise InvalidInputError(f"put {k[5:]} in spark-defaults.conf or hive-site.xml, not in the "
                                            "metastore URI (a URI shows in process lists, messages and reports)")
            return cls(kind, text, params=MappingProxyType(params))
        u = urlsplit(text)
        params = dict(parse_qsl(u.query, keep_blank_values=True))
        if u.password is not None or any(is_secret(name) for name in params):
            raise InvalidInputError(f"put the metastore password in ${PASSWORD_ENV} or in a file named by "
                                    "password_file=, not in the URI (a URI shows in process lists, messages, "
                                    "table.json and reports)")
        if not u.hostname:
            raise InvalidInputError(f"metastore URI needs a host: {text!r} (e.g. {facts.example})")
        try:
            port = u.port or facts.default_port
        except ValueError:
            raise InvalidInputError(f"bad port in {text!r}") from None
        unknown = set(params) - facts.options - {"timeout"}
        if unknown:
            raise InvalidInputError(f"unknown option(s) {', '.join(sorted(unknown))} in {text!r}")
        for name in ("ssl", "allow_plaintext_password"):
            if name in params:
                _flag(params, name)
        if "timeout" in params:
            from tributary_read.timespec import parse_timeout_ms

            try:
                parse_timeout_ms(params["timeout"], "timeout")
            except InvalidInputError as e:
                raise InvalidInputError(f"bad timeout in {text!r}: {e}") from None
        return cls(kind, text, u.hostname, port, u.path.strip("/") or None, u.username,
                   MappingProxyType(params))

    @staticmethod
    def names_one(text: str) -> bool:
        """``text`` is written as a metastore URI (its scheme is one of :data:`SCHEMES`), whether or not it parses:
        for a front end that takes other URIs too (an Iceberg catalog's), before :meth:`parse` says what is wrong."""
        return _scheme((text or "").strip()) in SCHEMES

    def flag(self, name: str) -> bool:
        """A true/false option (``ssl=true``); absent is false."""
        return _flag(self.params, name)

    @property
    def is_spark_catalog(self) -> bool:
        """The metastore is a SparkSession's own catalog: opening it needs (and may start) a session."""
        return self.kind is MetastoreKind.SPARK

    @property
    def backend(self) -> str:
        return KINDS[self.kind].backend

    def timeout(self, default: float = DEFAULT_TIMEOUT_S) -> float:
        """Seconds that bound the connect and each call (``?timeout=``: ``2s``, ``5m``, or bare seconds)."""
        if "timeout" not in self.params:
            return default
        from tributary_read.timespec import parse_timeout_ms

        return parse_timeout_ms(self.params["timeout"], "timeout") / 1000

    def spark_conf(self) -> Mapping[str, str]:
        """``conf.KEY=VALUE`` options of a ``spark`` URI, as Spark confs."""
        return {k[5:]: v for k, v in self.params.items() if k.startswith("conf.")}

    def catalog_conf(self) -> dict[str, str]:
        """The Spark conf that makes a session's Hive catalog this metastore.

        HiveServer2 runs SQL but is no catalog a session can use: asking for one is bad input.
        """
        if self.kind is MetastoreKind.THRIFT:
            return {"spark.hadoop.hive.metastore.uris": f"thrift://{self.host}:{self.port}"}
        if self.kind is MetastoreKind.SPARK:
            return dict(self.spark_conf())
        raise InvalidInputError(f"a Spark session needs a metastore it can use as its catalog: thrift://HOST:PORT "
                                f"or spark, not {self.text} (HiveServer2 runs SQL, it is not a catalog)")

    @property
    def lineage_namespace(self) -> str:
        """OpenLineage's namespace for a table of this metastore: ``hive://HOST:PORT`` (spec/naming.md), or
        ``hive`` for one with no address (Spark's own catalog)."""
        return f"hive://{self.host}:{self.port}" if self.host else "hive"

    def __str__(self) -> str:
        return self.text


def _scheme(text: str) -> str:
    return text.split(":", 1)[0].split("?", 1)[0].lower()


def _flag(params: Mapping[str, str], name: str) -> bool:
    value = params.get(name, "false").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidInputError(f"{name}={params[name]!r} must be true or false")
