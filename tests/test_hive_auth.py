"""Issue 29, the rules that need no server: where a password may come from and where it may go,
what a keytab login changes in the process, and the words for libkrb5's failures.

The same rules run against the real KDC, slapd and Thrift Servers in tests/test_secured_hive.py;
here each is checked at its edges, in-process and through the CLI, in milliseconds.
"""

from __future__ import annotations

import os

import pytest

from conftest import invoke_trib
from helpers import LAYOUT, PARTITION, one_line_error
from tributary_read import kerberos
from tributary_read.errors import InvalidInputError
from tributary_read.hive import auth
from tributary_read.hive.hs2 import Hs2Metastore
from tributary_read.hive.uri import MetastoreURI

pytestmark = pytest.mark.unit
PW = "Tr1b-unit-s3cret"


@pytest.mark.parametrize("uri", [f"hs2://bob:{PW}@db.example:10000?auth=LDAP",
                                 f"hs2://db.example:10000?auth=LDAP&user=bob&password={PW}",
                                 f"thrift://db.example:9083?passwd={PW}"])
def test_a_uri_with_a_password_is_refused_and_the_message_does_not_repeat_it(uri):
    with pytest.raises(InvalidInputError, match="TRIB_HS2_PASSWORD or in a file named by password_file=") as e:
        MetastoreURI.parse(uri)
    assert PW not in str(e.value)


def test_tls_and_password_options_are_checked_when_the_uri_is_parsed():
    u = MetastoreURI.parse("hs2://db.example:10000?auth=LDAP&user=bob&password_file=/x&ssl=true&ssl_ca=/ca.pem")
    assert u.flag("ssl") and not u.flag("allow_plaintext_password") and u.params["ssl_ca"] == "/ca.pem"
    with pytest.raises(InvalidInputError, match="ssl='maybe' must be true or false"):
        MetastoreURI.parse("hs2://db.example:10000?ssl=maybe")
    with pytest.raises(InvalidInputError, match="unknown option"):
        MetastoreURI.parse("thrift://db.example:9083?ssl=true")  # the metastore's API has no TLS option here


def test_the_password_comes_from_the_file_first_then_the_environment(tmp_path, monkeypatch):
    f = tmp_path / "pw"
    f.write_text(f"{PW}\nsecond line ignored\n")
    monkeypatch.setenv("TRIB_HS2_PASSWORD", "from-env")
    assert auth.password({"password_file": str(f)}) == PW
    assert auth.password({}) == "from-env"
    monkeypatch.delenv("TRIB_HS2_PASSWORD")
    assert auth.password({}) is None
    with pytest.raises(InvalidInputError, match="cannot read password_file"):
        auth.password({"password_file": str(tmp_path / "absent")})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(InvalidInputError, match="is empty"):
        auth.password({"password_file": str(tmp_path / "empty")})


@pytest.mark.parametrize("host,sent", [("localhost", True), ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
                                       ("db.example", False), ("10.1.2.3", False), ("localhost.example", False)])
def test_a_password_goes_in_clear_text_only_to_this_machine(host, sent):
    if sent:
        auth.check_password_channel(host, tls=False, allow_plaintext=False)
    else:
        with pytest.raises(InvalidInputError, match="refusing to send the LDAP password .* add ssl=true"):
            auth.check_password_channel(host, tls=False, allow_plaintext=False)
    auth.check_password_channel(host, tls=True, allow_plaintext=False)
    auth.check_password_channel(host, tls=False, allow_plaintext=True)


def test_an_ldap_uri_to_another_host_without_tls_is_refused_before_any_connection(monkeypatch):
    monkeypatch.setenv("TRIB_HS2_PASSWORD", PW)
    # 203.0.113.0/24 is TEST-NET-3: nothing answers there, so reaching the network would hang or fail otherwise.
    with pytest.raises(InvalidInputError, match="refusing to send the LDAP password to 203.0.113.7"):
        Hs2Metastore.from_uri("hs2://203.0.113.7:10000?auth=LDAP&user=bob")


def test_the_cli_refuses_a_stored_password_and_a_clear_text_one_in_one_line(tmp_path, monkeypatch):
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "jsonl",
                check=True)
    r = invoke_trib("partitions", "configure", str(root), "--policy", "metastore", "--hive-table", "db.t",
                    "--metastore", f"hs2://bob:{PW}@db.example:10000?auth=LDAP")
    one_line_error(r, 3, "not in the URI")
    assert PW not in r.stdout + r.stderr
    assert PW not in (root / "_tributary" / "table.json").read_text()
    monkeypatch.setenv("TRIB_HS2_PASSWORD", PW)
    r = invoke_trib("partitions", "sync", str(root), "--hive-table", "db.t",
                    "--metastore", "hs2://203.0.113.7:10000?auth=LDAP&user=bob")
    one_line_error(r, 3, "refusing to send the LDAP password to 203.0.113.7 in clear text")
    assert PW not in r.stdout + r.stderr


# -- Kerberos: what a keytab login changes, and libkrb5's failures in words -------------------------
@pytest.fixture
def clean_kerberos(monkeypatch):
    for name in ("KRB5CCNAME", "KRB5_CLIENT_KTNAME", "TRIB_PRINCIPAL", "TRIB_KEYTAB"):
        monkeypatch.delenv(name, raising=False)
    kerberos.configure()
    yield
    kerberos.configure()


def test_a_keytab_login_uses_a_private_cache_and_logout_restores_the_environment(tmp_path, monkeypatch,
                                                                               clean_kerberos):
    keytab = tmp_path / "trib.keytab"
    keytab.write_bytes(b"\x05\x02")  # read by libkrb5 at the first handshake, not here
    monkeypatch.setenv("KRB5CCNAME", "FILE:/tmp/users-own-cache")
    kerberos.configure("trib@TRIB.TEST", str(keytab))
    login = kerberos.login()
    assert login is not None and login.principal == "trib@TRIB.TEST"
    cache_dir = os.path.dirname(login.ccache[len("FILE:"):])
    assert os.environ["KRB5CCNAME"] == login.ccache != "FILE:/tmp/users-own-cache"
    assert os.environ["KRB5_CLIENT_KTNAME"] == str(keytab)
    assert oct(os.stat(cache_dir).st_mode & 0o777) == "0o700"
    assert kerberos.principal_for_handshake() == "trib@TRIB.TEST"
    kerberos.configure()  # the next command of this process
    assert os.environ["KRB5CCNAME"] == "FILE:/tmp/users-own-cache" and "KRB5_CLIENT_KTNAME" not in os.environ
    assert not os.path.exists(cache_dir) and kerberos.login() is None


def test_principal_and_keytab_come_from_flags_then_environment_then_trib_toml(tmp_path, monkeypatch, clean_kerberos):
    kerberos.configure(config=lambda: {"principal": "toml@R", "keytab": "/toml.keytab"})
    assert kerberos.settings() == ("toml@R", "/toml.keytab")
    monkeypatch.setenv("TRIB_PRINCIPAL", "env@R")
    assert kerberos.settings() == ("env@R", "/toml.keytab")
    kerberos.configure("flag@R", None, config=lambda: {"keytab": "/toml.keytab"})
    assert kerberos.settings() == ("flag@R", "/toml.keytab")


def test_half_a_keytab_login_or_an_unreadable_keytab_is_bad_input(tmp_path, clean_kerberos):
    kerberos.configure("trib@TRIB.TEST", None)
    with pytest.raises(InvalidInputError, match="give both a Kerberos principal and its keytab"):
        kerberos.login()
    kerberos.configure("trib@TRIB.TEST", str(tmp_path / "absent.keytab"))
    with pytest.raises(InvalidInputError, match="absent.keytab does not exist or cannot be read"):
        kerberos.login()
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "jsonl",
                check=True)
    r = invoke_trib("--principal", "trib@TRIB.TEST", "partitions", "sync", str(root), "--hive-table", "db.t",
                    "--metastore", "thrift://localhost:1?auth=KERBEROS")
    one_line_error(r, 3, "give both a Kerberos principal and its keytab (--principal and --keytab, or [hive]")


#: libkrb5's own words (as pykerberos raises them: seen against the suite's KDC) -> the fix trib names.
KRB5_SAYS = [
    ("(('No credentials were supplied, or the credentials were unavailable or inaccessible', 458752), "
     "('No Kerberos credentials available (default cache: FILE:/tmp/none)', -1765328243))",
     "no Kerberos ticket (cache FILE:/tmp/none): run kinit, or give a principal and keytab"),
    ("(('Unspecified GSS failure.  Minor code may provide more information', 851968), "
     "('Server hive/127.0.0.1@TRIB.TEST not found in Kerberos database', -1765328377))",
     "service principal hive/127.0.0.1@TRIB.TEST unknown to the KDC: HOST must be the principal's host"),
    ("(('Unspecified GSS failure.  Minor code may provide more information', 851968), ('Ticket expired', "
     "-1765328352))", "the Kerberos ticket expired"),
    ("(('No credentials were supplied, or the credentials were unavailable or inaccessible', 458752), "
     "(\"Can't find client principal alice@TRIB.TEST in cache collection\", -1765328243))",
     "no ticket and no key for alice@TRIB.TEST: check that the keytab holds this principal"),
]


@pytest.mark.parametrize("said,fix", KRB5_SAYS)
def test_kerberos_failures_are_told_as_their_fix(said, fix):
    line = kerberos.explain(said)
    assert line is not None and line.startswith(fix), line
    assert "851968" not in line and "-17653" not in line
    assert kerberos.explain("TSocket read 0 bytes") is None
