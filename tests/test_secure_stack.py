"""Smoke tests of the secured Hive stack (tests/secure_stack.py): real KDC, slapd, SASL metastore, TLS.

They prove the stack is real: the right credentials work through each client trib uses or documents
(beeline, pyhive, :class:`ThriftMetastore`), and the wrong ones are refused by the servers. The
refusals assert the raw client-side text (Python side), because issue #29 maps exactly those texts to
readable messages; if a library update changes one, this is where it shows. What trib makes of each
(the fix in words) is asserted here for :class:`ThriftMetastore` and through the CLI in
tests/test_secured_hive.py, which also sees a ticket expire.
"""

from __future__ import annotations

import ssl
import subprocess
import uuid

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def alice_env(secure_hive, tmp_path, monkeypatch):
    """alice's ticket in a private cache, and this process pointed at it (for pyhive and ThriftMetastore)."""
    env = secure_hive.kinit("alice", tmp_path / "alice.cc")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def _use(monkeypatch, env: dict) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def _pyhive_kerberos(stack, host: str = "localhost"):
    from pyhive import hive

    return hive.connect(host=host, port=stack.kerberos_hs2_port, auth="KERBEROS", kerberos_service_name="hive")


def _pyhive_ldap_tls(stack, user: str, password: str, use_tls: bool = True):
    """pyhive over TLS (its connect() has no TLS option): a verifying TSSLSocket under SASL PLAIN."""
    import thrift_sasl
    from pyhive import hive
    from pyhive.hive import get_installed_sasl
    from thrift.transport import TSocket, TSSLSocket

    if use_tls:
        sock = TSSLSocket.TSSLSocket("localhost", stack.ldap_hs2_port, cert_reqs=ssl.CERT_REQUIRED,
                                     ca_certs=stack.ca_pem)
    else:
        sock = TSocket.TSocket("localhost", stack.ldap_hs2_port)
    sock.setTimeout(30_000)
    transport = thrift_sasl.TSaslClientTransport(
        lambda: get_installed_sasl(host="localhost", sasl_auth="PLAIN", username=user, password=password),
        "PLAIN", sock)
    return hive.connect(thrift_transport=transport)


def _query(conn, *sql: str):
    try:
        cur = conn.cursor()
        for stmt in sql:
            cur.execute(stmt)
        return cur.fetchall()
    finally:
        conn.close()


def _beeline(stack, user: str, password_file, sql: str) -> subprocess.CompletedProcess:
    from tributary_read.services.hive import beeline_command

    cmd = beeline_command(["-u", stack.ldap_jdbc_url, "-n", user, "-w", str(password_file),
                           "--silent=true", "--outputformat=csv2", "-e", sql])
    assert stack.bob_password not in " ".join(cmd)  # -w: the password never reaches argv
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


# -- LDAP + TLS ---------------------------------------------------------------------------


def test_beeline_reads_current_user_as_bob_over_ldap_and_tls(secure_hive):
    proc = _beeline(secure_hive, secure_hive.bob, secure_hive.bob_password_file, "SELECT current_user()")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == "bob", proc.stdout


def test_beeline_with_a_wrong_password_is_refused(secure_hive, tmp_path):
    from tributary_read.services.tls import write_secret

    proc = _beeline(secure_hive, secure_hive.bob, write_secret(tmp_path / "wrong.pw", "not-his"), "SELECT 1")
    assert proc.returncode != 0
    assert "Error validating the login" in proc.stderr, proc.stderr[-2000:]


def test_python_over_tls_as_bob(secure_hive):
    conn = _pyhive_ldap_tls(secure_hive, "bob", secure_hive.bob_password)
    assert _query(conn, "SELECT current_user()") == [("bob",)]


@pytest.mark.parametrize("user,password", [("bob", "not-his"), ("mallory", "anything")])
def test_python_wrong_ldap_login_is_refused(secure_hive, user, password):
    from thrift.transport.TTransport import TTransportException

    with pytest.raises(TTransportException) as e:
        _pyhive_ldap_tls(secure_hive, user, password)
    assert str(e.value) == "Bad status: 3 (b'Error validating the login')"


def test_a_plain_client_is_dropped_by_the_tls_server(secure_hive):
    from thrift.transport.TTransport import TTransportException

    with pytest.raises(TTransportException) as e:
        _pyhive_ldap_tls(secure_hive, "bob", secure_hive.bob_password, use_tls=False)
    assert str(e.value) == "TSocket read 0 bytes"


# -- Kerberos -----------------------------------------------------------------------------


def test_pyhive_kerberos_as_alice(secure_hive, alice_env):
    assert _query(_pyhive_kerberos(secure_hive), "SELECT current_user()") == [("alice",)]


def test_thrift_metastore_with_alices_ticket(secure_hive, alice_env):
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    m = ThriftMetastore("localhost", secure_hive.hms_port, auth="KERBEROS")
    try:
        assert m.database_exists("default")
        assert not m.database_exists(f"nope_{uuid.uuid4().hex[:8]}")
    finally:
        m.close()


def test_kerberos_thrift_server_scans_data(secure_hive, alice_env):
    """A query that reads files: it needs yarn.resourcemanager.principal set (the recipe's trap)."""
    table = f"t_{uuid.uuid4().hex[:10]}"
    rows = _query(_pyhive_kerberos(secure_hive),
                  f"CREATE TABLE {table} (x INT) STORED AS PARQUET",
                  f"INSERT INTO {table} VALUES (1), (2), (3)",
                  f"SELECT count(*), sum(x) FROM {table}")
    assert rows == [(3, 6)]
    _query(_pyhive_kerberos(secure_hive), f"DROP TABLE {table}")


def test_without_a_ticket_both_servers_refuse(secure_hive, tmp_path, monkeypatch):
    import kerberos

    from tributary_read.errors import MetastoreAuthError
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    cache = tmp_path / "none.cc"
    _use(monkeypatch, secure_hive.ccache_env(cache))
    want = ("(('No credentials were supplied, or the credentials were unavailable or inaccessible', 458752), "
            f"('No Kerberos credentials available (default cache: FILE:{cache})', -1765328243))")
    with pytest.raises(kerberos.GSSError) as e:
        _pyhive_kerberos(secure_hive)
    assert str(e.value) == want
    with pytest.raises(MetastoreAuthError) as m:
        ThriftMetastore("localhost", secure_hive.hms_port, auth="KERBEROS")
    assert str(m.value) == (f"the metastore at localhost:{secure_hive.hms_port}: no Kerberos ticket (cache FILE:{cache}): "
                            "run kinit, or give a principal and keytab ($TRIB_PRINCIPAL and $TRIB_KEYTAB) so that "
                            "trib logs in and renews")


def test_dialling_127_0_0_1_asks_for_a_principal_that_does_not_exist(secure_hive, alice_env):
    import kerberos

    from tributary_read.errors import MetastoreAuthError
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    want = ("(('Unspecified GSS failure.  Minor code may provide more information', 851968), "
            "('Server hive/127.0.0.1@TRIB.TEST not found in Kerberos database', -1765328377))")
    with pytest.raises(kerberos.GSSError) as e:
        _pyhive_kerberos(secure_hive, host="127.0.0.1")
    assert str(e.value) == want
    with pytest.raises(MetastoreAuthError) as m:
        ThriftMetastore("127.0.0.1", secure_hive.hms_port, auth="KERBEROS")
    assert "service principal hive/127.0.0.1@TRIB.TEST unknown to the KDC: HOST must be the principal's host" \
        in str(m.value)


def test_a_nosasl_client_is_told_the_sasl_metastore_wants_sasl_before_any_call(secure_hive, alice_env):
    """Raw Thrift's open succeeds and the server hangs up at the first call: trib asks a read-only
    question while connecting, so the mismatch is told as one, never as an unknown outcome."""
    from tributary_read.errors import MetastoreAuthError
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    with pytest.raises(MetastoreAuthError) as e:
        ThriftMetastore("localhost", secure_hive.hms_port, auth="NOSASL")
    assert str(e.value) == (f"the metastore at localhost:{secure_hive.hms_port} closed the connection during the "
                            "handshake: the client's auth does not match the server's: check auth=NOSASL against "
                            "its hive.metastore.sasl.enabled (auth=KERBEROS when true, NOSASL when false)")
