"""The secured Hive stack for the tests: one KDC, slapd, SASL metastore and two secured Thrift Servers.

``conftest.secure_hive`` (session scope) calls :func:`start` once and :func:`stop` at the end. The
servers are :mod:`tributary_read.services.secure_hive`'s (the library modules ``trib hive up --auth``
is to reuse); this file adds the test principals and users and gathers everything a test needs into
one frozen :class:`SecureStack`. Why one per session: the three JVMs cost ~40 s together (they start
in parallel) and tests only read from them or use their own tables.

Principals: ``alice`` (normal tickets) and ``shorty`` (``-maxlife`` :data:`SHORT_LIFE_S` seconds: its
tickets expire while a test waits), each with a keytab; ``hive/localhost`` is the servers' service principal.
LDAP: ``bob`` under ``ou=people,dc=trib,dc=test``, his password in a 0600 file for beeline's ``-w``
(beeline splits a password on spaces, so it has none) and in :attr:`SecureStack.bob_password` for
tests that sweep output for it.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

#: What a test never has to guess: the one realm and the host clients must dial.
REALM = "TRIB.TEST"
HOST = "localhost"


class StackUnavailable(RuntimeError):
    """This machine lacks a piece of the stack (the fixture skips, naming it)."""


#: The life of shorty's tickets: short, so that a follow-mode ingest outlives three of them in under two
#: minutes; tests/test_secured_hive.py's renewal test mounts a partition once a ticket has expired.
SHORT_LIFE_S = 30


@dataclass(frozen=True)
class SecureStack:
    dir: str
    realm: str
    krb5_conf: str
    kdc_port: int
    service_principal: str
    service_keytab: str
    alice: str
    alice_keytab: str
    shorty: str
    shorty_keytab: str
    env: dict  # KRB5_CONFIG (+ JAVA_TOOL_OPTIONS for Java clients): add KRB5CCNAME per test (ccache_env)
    ldap_url: str
    ldap_base_dn: str
    bob: str
    bob_password_file: str
    bob_password: str
    hms_port: int
    metastore_uri: str  # thrift://localhost:PORT?auth=KERBEROS
    ldap_hs2_port: int
    ldap_jdbc_url: str
    ca_pem: str
    truststore: str
    kerberos_hs2_port: int
    kerberos_jdbc_url: str
    shorty_ccache: str  # shorty's ticket, got as the stack came up: it expires at shorty_expires
    shorty_expires: float  # epoch seconds (an upper bound: kinit's request time + SHORT_LIFE_S)
    started_in: float  # seconds, for the report
    pids: dict

    @property
    def logs(self) -> str:
        return str(Path(self.dir) / "logs")

    def ccache_env(self, ccache: str | os.PathLike) -> dict:
        """:attr:`env` plus ``KRB5CCNAME`` for a private credentials cache file."""
        return {**self.env, "KRB5CCNAME": f"FILE:{ccache}"}

    def kinit(self, who: str, ccache: str | os.PathLike) -> dict:
        """``kinit -kt`` ``alice`` or ``shorty`` into ``ccache``; returns :meth:`ccache_env`."""
        from tributary_read.services import kdc

        keytab = {"alice": self.alice_keytab, "shorty": self.shorty_keytab}[who]
        k = kdc.Kdc(str(Path(self.dir) / "kdc"), self.realm, self.kdc_port, 0)
        k.kinit(who, keytab, ccache)
        return self.ccache_env(ccache)


def missing() -> str | None:
    """The first missing piece, as the one-line reason a skip gives."""
    from tributary_read.services import secure_hive

    lacking = secure_hive.missing()
    if lacking:
        return f"{lacking} not found (apt-get install krb5-kdc krb5-user slapd ldap-utils)"
    if importlib.util.find_spec("kerberos") is None:
        return "python module kerberos missing (pip install -e '.[kerberos]'; needs libkrb5-dev)"
    return None


def start(root: str | os.PathLike, timeout: float = 300.0) -> SecureStack:
    reason = missing()
    if reason:
        raise StackUnavailable(reason)
    from tributary_read.services import secure_hive, tls

    t0 = time.monotonic()
    s = secure_hive.start(root, timeout=timeout)
    try:
        kdc = s.kdc()
        clients = Path(s.dir) / "clients"
        clients.mkdir(mode=0o700, exist_ok=True)
        alice = kdc.add_principal("alice", clients / "alice.keytab")
        shorty = kdc.add_principal("shorty", clients / "shorty.keytab", maxlife=f"{SHORT_LIFE_S} seconds")
        password = "Bob-" + secrets.token_urlsafe(12)  # no spaces: beeline splits !connect on them
        s.ldap().add_user("bob", password)
        pw_file = tls.write_secret(clients / "bob.pw", password)
        shorty_cc = clients / "shorty-early.cc"
        t_kinit = time.time()
        kdc.kinit("shorty", clients / "shorty.keytab", shorty_cc)
        assert s.kerberos_hs2_port and s.ldap_hs2_port and s.ldap_url and s.ldap_base_dn
        assert s.ca_pem and s.truststore
        return SecureStack(
            dir=s.dir, realm=s.realm, krb5_conf=s.krb5_conf, kdc_port=s.kdc_port,
            service_principal=s.service_principal, service_keytab=s.service_keytab,
            alice=alice, alice_keytab=str(clients / "alice.keytab"),
            shorty=shorty, shorty_keytab=str(clients / "shorty.keytab"),
            env={k: v for k, v in s.client_env().items() if k != "KRB5_KDC_PROFILE"},
            ldap_url=s.ldap_url, ldap_base_dn=s.ldap_base_dn, bob="bob", bob_password_file=str(pw_file),
            bob_password=password, hms_port=s.hms_port, metastore_uri=s.metastore_uri,
            ldap_hs2_port=s.ldap_hs2_port, ldap_jdbc_url=s.ldap_jdbc_url(), ca_pem=s.ca_pem,
            truststore=s.truststore, kerberos_hs2_port=s.kerberos_hs2_port,
            kerberos_jdbc_url=s.kerberos_jdbc_url(), shorty_ccache=str(shorty_cc),
            shorty_expires=t_kinit + SHORT_LIFE_S + 1.0, started_in=round(time.monotonic() - t0, 1),
            pids=dict(s.pids))
    except BaseException:
        secure_hive.stop(s)
        raise


def stop(stack: SecureStack | str | os.PathLike) -> None:
    from tributary_read.services import secure_hive

    secure_hive.stop(stack.dir if isinstance(stack, SecureStack) else stack)
