"""How trib authenticates to HiveServer2 and the metastore: passwords, TLS, and failures in words.

One owner for the three questions both Thrift backends ask (:mod:`tributary_read.hive.hs2` and
:mod:`tributary_read.hive.thrift_metastore` reach them through ``metastore.thrift_transport``):

* **Where a password comes from.** Never the URI, the command line or a file trib writes: argv is
  visible to every user of the machine, and URIs are echoed in messages and stored in table.json and
  job reports. It comes from ``$TRIB_HS2_PASSWORD`` or from the file that ``password_file=`` names,
  the way beeline's ``-w FILE`` works.
* **Whether it may cross the network.** HiveServer2's LDAP login is SASL PLAIN: the password travels
  as written. It is sent only over TLS (``ssl=true``), to a loopback host, or where
  ``allow_plaintext_password=true`` says the network is trusted.
* **What a refused handshake means.** Thrift reports an auth mismatch as a lost connection and
  libkrb5 as tuples of codes; a scheduler's operator needs the fix in words, and must not be told to
  rerun what a rerun cannot fix. Every auth failure is :class:`MetastoreAuthError` (exit 8).
"""

from __future__ import annotations

import ipaddress
import os
from typing import Mapping

from tributary_read.errors import InvalidInputError, MetastoreAuthError, causes
import tributary_read.kerberos as kerberos
from tributary_read.hive.uri import PASSWORD_ENV


def password(params: Mapping[str, str]) -> str | None:
    """The LDAP password: the file ``password_file=`` names (its first line), else ``$TRIB_HS2_PASSWORD``."""
    path = params.get("password_file")
    if path:
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as f:
                text = f.readline().rstrip("\r\n")
        except OSError as e:
            raise InvalidInputError(f"cannot read password_file {path}: {e.strerror or e}") from None
        if not text:
            raise InvalidInputError(f"password_file {path} is empty")
        return text
    return os.environ.get(PASSWORD_ENV) or None


def is_loopback(host: str) -> bool:
    """``host`` is this machine: ``localhost`` or a loopback address (a name that resolves there is not
    trusted to, since DNS may answer otherwise tomorrow)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_password_channel(host: str, *, tls: bool, allow_plaintext: bool) -> None:
    """Refuse to send a password in clear text to another machine, unless told the network is trusted."""
    if tls or allow_plaintext or is_loopback(host):
        return
    raise InvalidInputError(
        f"refusing to send the LDAP password to {host} in clear text (SASL PLAIN without TLS): add ssl=true "
        "to the URI (and ssl_ca=FILE if the server's certificate is not signed by a CA in the system trust "
        "store), or allow_plaintext_password=true if the network between is trusted")


def tls_socket(host: str, port: int, ca_file: str | None):
    """A Thrift socket that speaks TLS and checks the server's certificate and host name.

    ``ca_file``: PEM file of the CA(s) to trust; the system trust store when ``None``.
    """
    import ssl

    from thrift.transport import TSSLSocket

    if ca_file is not None and not os.path.isfile(os.path.expanduser(ca_file)):
        raise InvalidInputError(f"ssl_ca file {ca_file} does not exist")
    try:
        context = ssl.create_default_context(cafile=os.path.expanduser(ca_file) if ca_file else None)
    except ssl.SSLError as e:
        raise InvalidInputError(f"ssl_ca {ca_file} holds no usable PEM certificate: {e.reason or e}") from None
    return TSSLSocket.TSSLSocket(host, port, ssl_context=context, server_hostname=host)


def explain(e: BaseException, *, where: str, auth: str, user: str | None = None, tls: bool = False) -> str | None:
    """One line naming the fix when ``e`` is an authentication or TLS failure; ``None`` when it is not."""
    text = " | ".join(f"{type(c).__name__}: {c}" for c in causes(e))
    krb = kerberos.explain(text)
    if krb:
        return f"{where}: {krb}"
    if "Error validating the login" in text or "Error validating LDAP user" in text:
        return (f"{where} refused the LDAP login of user {user!r}: a wrong password (${PASSWORD_ENV} or "
                "password_file=), a user the directory does not know (?user=), or a server that does not "
                "authenticate with LDAP (its hive.server2.authentication)")
    if "Unsupported mechanism type PLAIN" in text:
        return (f"{where} does not take a user and password (auth={auth}, SASL PLAIN): it authenticates with "
                "Kerberos, so use auth=KERBEROS")
    if "Unsupported mechanism type GSSAPI" in text:
        return (f"{where} does not take Kerberos (auth=KERBEROS): use auth=LDAP or NONE, as its "
                "hive.server2.authentication says")
    if "CERTIFICATE_VERIFY_FAILED" in text or "SSLCertVerificationError" in text:
        detail = "its certificate is not for this host name" if "match" in text.lower() else \
            "its certificate is not signed by a CA this client trusts"
        return (f"TLS to {where} failed: {detail}: give ssl_ca=FILE (PEM) with the CA that signed it, and "
                "a HOST that the certificate names")
    if tls and ("WRONG_VERSION_NUMBER" in text or "record layer failure" in text or "UNEXPECTED_EOF" in text
                or "EOF occurred in violation of protocol" in text):
        return f"{where} does not speak TLS: drop ssl=true, or check its hive.server2.use.SSL"
    return None


def mismatch(where: str, auth: str, tls: bool, auth_setting: str, tls_setting: str | None = None) -> MetastoreAuthError:
    """The server hung up on the handshake or first call: what the client speaks is not what it expects.

    Thrift sees only a closed connection; a rerun would meet the same server, so this is an auth
    failure that names both settings to compare, never "outcome unknown: rerun".
    """
    tls_part = f", and ssl={'true' if tls else 'false'} against its {tls_setting}" if tls_setting else ""
    return MetastoreAuthError(f"{where} closed the connection during the handshake: the client's auth does not "
                              f"match the server's: check auth={auth} against its {auth_setting}{tls_part}")


def refused(e: BaseException, **context) -> MetastoreAuthError | None:
    """:func:`explain` as the error to raise (``None``: ``e`` is not an auth failure)."""
    line = explain(e, **context)
    if not line:
        return None
    keytab = f"${kerberos.PRINCIPAL_ENV} and ${kerberos.KEYTAB_ENV}"  # the CLI says --principal and --keytab
    return MetastoreAuthError(line, **({"keytab": keytab} if keytab in line else {}))
