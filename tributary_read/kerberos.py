"""Kerberos for trib's connections: a keytab login that renews itself, and Kerberos errors in words.

Why a keytab login: ``trib ingest`` in follow mode and long ETL runs commit partitions to a
Kerberized metastore for days, far past a ticket's life. A ``kinit`` ticket expires and every later
connection fails ("GSS initiate failed" the day after start, as Kafka Connect's HDFS connector
users know); nothing in the process can renew it.

How: MIT Kerberos (1.11 and later) initiates from a *client keytab*. With ``KRB5_CLIENT_KTNAME``
naming the keytab, acquiring credentials for a principal whose key is in it gets a TGT into the
credential cache when there is none, and a fresh one once the ticket passed its refresh time (half
its life), before it expires. trib sets that and ``KRB5CCNAME`` (a private cache in a 0700
directory, removed at exit; the user's own ``kinit`` cache is never touched) for the process, and
names the principal in every SASL GSSAPI handshake: each connection carries a valid ticket. No
thread, no ``kinit`` binary: the renewal is the Kerberos library's own.

The principal and keytab come from, first to last: the flags ``trib --principal P --keytab FILE``,
``$TRIB_PRINCIPAL`` / ``$TRIB_KEYTAB``, trib.toml's ``[hive]`` ``principal`` / ``keytab`` (the way
spark-submit takes ``--principal/--keytab``). Without them the ticket cache of ``kinit`` is used.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import Callable, Mapping

from tributary_read.errors import InvalidInputError

PRINCIPAL_ENV = "TRIB_PRINCIPAL"
KEYTAB_ENV = "TRIB_KEYTAB"
#: Where a missing principal/keytab is looked up last: trib.toml's ``[hive]`` (set by the CLI).
_config: Callable[[], Mapping] | None = None
_explicit: tuple[str | None, str | None] = (None, None)
_lock = threading.Lock()


@dataclass(frozen=True)
class KeytabLogin:
    """A principal logged in from a keytab, into the private cache ``ccache``."""

    principal: str
    keytab: str
    ccache: str
    saved_env: Mapping[str, str | None] = field(default_factory=dict, hash=False)

    @property
    def folder(self) -> str:
        """The private 0700 directory of :attr:`ccache` (``FILE:<folder>/ccache``)."""
        return os.path.dirname(self.ccache[len("FILE:"):])


_login: KeytabLogin | None = None


def configure(principal: str | None = None, keytab: str | None = None, *,
              config: Callable[[], Mapping] | None = None) -> None:
    """Record where this process's principal and keytab come from; nothing is read yet.

    ``config``: returns trib.toml's ``[hive]`` table, asked only when a Kerberos connection opens
    (so ``trib --help`` and every run without Kerberos never read it).
    """
    global _explicit, _config
    _explicit = (principal or None, keytab or None)
    _config = config
    logout()


def logout() -> None:
    """Forget the keytab login: the environment is as before it, its private cache removed.

    A new :func:`configure` (one process running several commands, as tests do) starts afresh, so
    one command's login never carries over to the next.
    """
    global _login
    with _lock:
        if _login is None:
            return
        for name, value in _login.saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        import shutil

        shutil.rmtree(_login.folder, ignore_errors=True)
        _login = None


def settings() -> tuple[str | None, str | None]:
    """``(principal, keytab)`` by precedence: flags, then ``$TRIB_PRINCIPAL``/``$TRIB_KEYTAB``, then trib.toml."""
    principal, keytab = _explicit
    principal = principal or os.environ.get(PRINCIPAL_ENV) or None
    keytab = keytab or os.environ.get(KEYTAB_ENV) or None
    if (principal is None or keytab is None) and _config is not None:
        hive = _config() or {}
        principal = principal or hive.get("principal") or None
        keytab = keytab or hive.get("keytab") or None
    return principal, keytab


def login() -> KeytabLogin | None:
    """The process's keytab login (made on first call); ``None`` when no keytab is configured.

    A keytab without a principal (or the reverse) is bad input, as is a keytab that cannot be read.
    """
    global _login
    with _lock:
        principal, keytab = settings()
        if principal is None and keytab is None:
            return None
        if not principal or not keytab:
            raise InvalidInputError(f"give both a Kerberos principal and its keytab (${PRINCIPAL_ENV} and "
                                    f"${KEYTAB_ENV}, or [hive] principal and keytab in trib.toml)",
                                    keytab=f"${PRINCIPAL_ENV} and ${KEYTAB_ENV}")
        keytab = os.path.abspath(os.path.expanduser(keytab))
        if not os.path.isfile(keytab) or not os.access(keytab, os.R_OK):
            raise InvalidInputError(f"keytab {keytab} does not exist or cannot be read")
        if _login is not None and (_login.principal, _login.keytab) == (principal, keytab):
            return _login
        # Imported here: this module loads at every trib start, and most runs never log in.
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="trib-krb5-")  # 0700: the tickets are the user's alone
        atexit.register(shutil.rmtree, folder, True)
        saved = {name: os.environ.get(name) for name in ("KRB5CCNAME", "KRB5_CLIENT_KTNAME")}
        if _login is not None:  # another principal: keep what was there before the first login
            saved = dict(_login.saved_env)
            shutil.rmtree(_login.folder, ignore_errors=True)
        _login = KeytabLogin(principal, keytab, f"FILE:{os.path.join(folder, 'ccache')}", saved)
        # Read by libkrb5 at each acquire, so later connections (and child processes such as a
        # Spark driver) use the private cache and renew from the keytab.
        os.environ["KRB5CCNAME"] = _login.ccache
        os.environ["KRB5_CLIENT_KTNAME"] = keytab
        return _login


def principal_for_handshake() -> str | None:
    """The principal a GSSAPI handshake names (the keytab's), or ``None`` for the ``kinit`` cache."""
    current = login()
    return current.principal if current else None


def _cache() -> str:
    return os.environ.get("KRB5CCNAME") or "the default cache"


# What libkrb5 says -> what to do, in words. Each pattern's groups fill its message. Kept as text (``re``
# compiles and caches them at the first failure to explain, not at every trib start).
_GSS_ERRORS: list[tuple[str, Callable[..., str]]] = [
    (r"No Kerberos credentials available \(default cache: ([^)]+)\)",
     lambda m, **k: f"no Kerberos ticket (cache {m.group(1)}): run kinit, or give a principal and keytab "
                    f"(${PRINCIPAL_ENV} and ${KEYTAB_ENV}) so that trib logs in and renews"),
    (r"Ticket expired",
     lambda m, **k: f"the Kerberos ticket expired (cache {k['cache']}): run kinit again, or give a principal "
                    f"and keytab (${PRINCIPAL_ENV} and ${KEYTAB_ENV}) so that trib renews it before it expires"),
    (r"Server (\S+) not found in Kerberos database",
     lambda m, **k: f"service principal {m.group(1)} unknown to the KDC: HOST must be the principal's host "
                    "(the name in its keytab, e.g. localhost, not an IP address), and "
                    "kerberos_service_name its service"),
    (r"Can't find client principal (\S+) in cache collection",
     lambda m, **k: f"no ticket and no key for {m.group(1)}: check that the keytab holds this principal "
                    "(klist -k KEYTAB)"),
    (r"Client '?(\S+?)'? not found in Kerberos database",
     lambda m, **k: f"principal {m.group(1)} unknown to the KDC: check the principal's name and realm"),
    (r"Key table file '([^']+)' not found",
     lambda m, **k: f"keytab {m.group(1)} not found"),
    (r"Preauthentication failed|Password incorrect|Decrypt integrity check failed",
     lambda m, **k: "the KDC refused the key: the keytab is out of date (a newer key version exists), "
                    "or the password is wrong"),
    (r"Cannot (?:find|contact any) KDC for (?:requested )?realm \"?([^\"\s]+)\"?",
     lambda m, **k: f"cannot reach a KDC for realm {m.group(1)}: check krb5.conf "
                    f"({os.environ.get('KRB5_CONFIG', '/etc/krb5.conf')})"),
    (r"Clock skew too great",
     lambda m, **k: "clock skew too great between this machine and the KDC or server: synchronise the clocks"),
]


def explain(text: str) -> str | None:
    """One line naming the fix for a Kerberos failure found in ``text``; ``None`` if it is not one."""
    for pattern, line in _GSS_ERRORS:
        m = re.search(pattern, text)
        if m:
            return line(m, cache=_cache())
    return None
