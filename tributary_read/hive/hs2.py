"""The metastore through HiveServer2 (Hive or Spark Thrift Server), via pyhive.

URI: ``hs2://HOST:PORT[/DB]?auth=NONE|NOSASL|LDAP|KERBEROS&user=NAME
&kerberos_service_name=hive&engine=spark|hive&timeout=SECONDS&ssl=true&ssl_ca=FILE
&password_file=FILE&allow_plaintext_password=true``. The password (LDAP) comes from
``$TRIB_HS2_PASSWORD`` or ``password_file=``, never from the URI, so it stays out of
shell history and process lists; it crosses the network only over TLS, to loopback, or
where ``allow_plaintext_password=true`` says so (:mod:`tributary_read.hive.auth`).

* ``NONE``     SASL PLAIN with any password: ``hive.server2.authentication=NONE``
               (Hive's and Spark Thrift Server's default).
* ``NOSASL``   raw Thrift: ``hive.server2.authentication=NOSASL``.
* ``LDAP``     SASL PLAIN with user and password.
* ``KERBEROS`` SASL GSSAPI with a keytab login (``--principal/--keytab``) or a ticket
               from ``kinit``; HOST must be the server principal's host,
               ``kerberos_service_name`` its service.
"""

from __future__ import annotations

import getpass

from tributary_read.errors import InvalidInputError, MetastoreError, missing_extra
import tributary_read.hive.auth as authn
from tributary_read.hive.dialect import DIALECTS
from tributary_read.hive.metastore import thrift_transport, timed_out
from tributary_read.hive.sql import render
from tributary_read.hive.sql_metastore import SqlMetastore
from tributary_read.hive.uri import DEFAULT_TIMEOUT_S, KINDS, MetastoreKind, MetastoreURI

AUTH_MODES = ("NONE", "NOSASL", "LDAP", "KERBEROS")
DEFAULT_PORT = KINDS[MetastoreKind.HS2].default_port
#: The connect, the handshake and every statement: one bound, ``?timeout=`` (hive/uri.py
#: DEFAULT_TIMEOUT_S). A statement that really takes longer (ANALYZE over a large partition)
#: needs a larger ``?timeout=``; a server that stopped answering no longer holds a run for an hour.
CONNECT_TIMEOUT_S = DEFAULT_TIMEOUT_S


class Hs2Metastore(SqlMetastore):
    """One HiveServer2 session; statements run in order on it.

    Spark Thrift Server serialises metastore calls inside one JVM anyway, so
    extra sessions would not make DESCRIBE loops faster (measured: no gain).
    """

    def __init__(self, host: str, port: int = DEFAULT_PORT, *, database: str = "default", auth: str = "NONE",
                 user: str | None = None, password: str | None = None, kerberos_service_name: str | None = None,
                 engine: str | None = None, timeout: float = CONNECT_TIMEOUT_S, tls: bool = False,
                 ca_file: str | None = None, allow_plaintext_password: bool = False):
        auth = (auth or "NONE").upper()
        if auth not in AUTH_MODES:
            raise InvalidInputError(f"unknown HiveServer2 auth {auth!r}; choose {', '.join(AUTH_MODES)}")
        if auth == "KERBEROS" and not kerberos_service_name:
            kerberos_service_name = "hive"
        if auth == "LDAP":
            if password is None:
                raise InvalidInputError(f"auth=LDAP needs a password: in ${authn.PASSWORD_ENV}, or in a file "
                                        "named by password_file= in the URI")
            authn.check_password_channel(host, tls=tls, allow_plaintext=allow_plaintext_password)
        if engine is not None and engine not in DIALECTS:
            raise InvalidInputError(f"unknown engine {engine!r}; choose {', '.join(DIALECTS)}")
        self.host, self.port, self.timeout = host, int(port), float(timeout)
        self._conn = self._connect(database, auth, user or getpass.getuser(), password,
                                   kerberos_service_name, timeout, tls, ca_file)
        self._cursor = self._conn.cursor()
        self._cursor.arraysize = 10_000  # SHOW PARTITIONS of a year: one fetch, not nine
        super().__init__(DIALECTS[engine or "hive"])
        if engine is None:
            self.dialect = DIALECTS[self._probe_engine()]

    @classmethod
    def from_uri(cls, uri: str | MetastoreURI, **overrides) -> Hs2Metastore:
        u = MetastoreURI.parse(uri)
        auth = u.params.get("auth", "NONE")
        kw = dict(database=u.database or "default", auth=auth, user=u.params.get("user") or u.user,
                  # only LDAP sends one: another mode must not read a password file it does not use
                  password=authn.password(u.params) if auth.upper() == "LDAP" else None,
                  kerberos_service_name=u.params.get("kerberos_service_name"), engine=u.params.get("engine"),
                  timeout=u.timeout(CONNECT_TIMEOUT_S), tls=u.flag("ssl"),
                  ca_file=u.params.get("ssl_ca") or None,
                  allow_plaintext_password=u.flag("allow_plaintext_password"))
        kw.update(overrides)
        return cls(u.host, u.port, **kw)

    @property
    def address(self) -> str:
        return f"hs2://{self.host}:{self.port}"

    # -- connection ----------------------------------------------------------------
    def _where(self) -> str:
        return f"HiveServer2 at {self.host}:{self.port}"

    def _connect(self, database, auth, user, password, kerberos_service_name, timeout, tls, ca_file):
        try:
            from pyhive import hive
        except ImportError:
            raise missing_extra("pyhive", "hive") from None
        sock, transport = thrift_transport(self.host, self.port, auth=auth, timeout=timeout, where=self._where(),
                                           extra="hive", service=kerberos_service_name, user=user,
                                           password=password, tls=tls, ca_file=ca_file)
        try:
            conn = hive.Connection(thrift_transport=transport, username=user, database=database)
        except Exception as e:  # noqa: BLE001 - thrift, SASL and HS2 errors all end here
            refused = authn.refused(e, where=self._where(), auth=auth, user=user, tls=tls)
            if refused is not None:
                raise refused from None
            if timed_out(e):
                raise MetastoreError(f"{self._where()} accepted the connection but did not answer the handshake "
                                     f"within {float(timeout):g}s (?timeout=)") from None
            msg = self._error(e)
            if "read 0 bytes" in msg or "TSocket" in msg or "closed" in msg.lower():
                raise authn.mismatch(self._where(), auth, tls, "hive.server2.authentication",
                                     "hive.server2.use.SSL") from None
            raise MetastoreError(f"cannot open a session on {self._where()}: {msg}") from None
        # The socket keeps ``timeout`` as its read timeout: every statement is bounded, not only the connect.
        return conn

    def _probe_engine(self) -> str:
        rows = self._run(render("probe_engine"))
        # Spark answers (key, value); Hive one column "... is undefined" (or key=value).
        return "spark" if rows and len(rows[0]) == 2 and rows[0][1] not in (None, "<undefined>") else "hive"

    def _execute(self, sql: str) -> list[tuple]:
        try:
            self._cursor.execute(sql)
            if self._cursor.description is None:
                return []
            return [tuple(r) for r in self._cursor.fetchall()]
        except Exception as e:  # noqa: BLE001 - a socket or thrift transport error; pyhive's own go on
            if timed_out(e):
                raise MetastoreError(f"{self._where()} did not answer within {self.timeout:g}s (?timeout=); "
                                     "the statement's outcome is unknown: rerun (adds and drops are "
                                     "idempotent)") from None
            if isinstance(e, OSError) or type(e).__module__.startswith("thrift"):
                raise MetastoreError(f"lost {self._where()}: {e}") from None
            raise

    def _error(self, e: Exception) -> str:
        # pyhive's OperationalError carries the whole Thrift response; keep its message.
        resp = e.args[0] if getattr(e, "args", None) else None
        status = getattr(resp, "status", None)
        text = getattr(status, "errorMessage", None) or str(e)
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        # Spark prefixes "Error running query: [CLASS] ...Exception: "; keep the engine's sentence.
        line = lines[0] if lines else type(e).__name__
        for marker in ("Error running query: ", "Exception: "):
            if marker in line:
                line = line.split(marker, 1)[1]
        if len(lines) > 1 and (not line or line.endswith(":")):
            line = f"{line} {lines[1]}".strip()  # the message proper is on the next line
        return line[:400]

    def close(self) -> None:
        try:
            self._conn.close()
        except Exception:  # noqa: BLE001 - closing a dead session is not an error
            pass
