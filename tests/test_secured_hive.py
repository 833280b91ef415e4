"""Issue 29 against real secured servers: an MIT KDC, slapd, a SASL/GSSAPI metastore, and the Spark
Thrift Server with LDAP over TLS and with Kerberos (tests/secure_stack.py starts them once).

Every command runs as a user would run it: the ``trib`` executable in its own process, credentials
from a ``kinit`` cache, a keytab, ``password_file=`` or ``$TRIB_HS2_PASSWORD``; rows are read back
with beeline as the user who logged in. Every output of every run is kept, and the last test sweeps
them, the tables trib wrote and a ``-v`` run's log lines for the test password.

The renewal test runs a follow-mode ingest for longer than three lives of shorty's 30-second tickets
(``secure_stack.SHORT_LIFE_S``),
mounting a partition on a new connection (each a keytab login) every ~35 s. It starts with the
module's first test and is checked by its last, so its two minutes overlap the other tests'.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO, TRIB, run_trib
from helpers import LAYOUT, PARTITION, make_source, one_line_error
from secure_stack import SHORT_LIFE_S

pytestmark = pytest.mark.integration

#: Every (args, stdout, stderr) of this module's trib runs: the sweep reads them all.
OUTPUTS: list[tuple[str, str, str]] = []
#: Every table root this module's runs wrote.
ROOTS: list[Path] = []
HOUR_MS = 3_600_000
H0 = 1_764_028_800_000  # 2025-11-25T00:00:00Z


def trib(*args: str, env: dict) -> subprocess.CompletedProcess:
    proc = run_trib(*args, env=env)
    OUTPUTS.append((" ".join(args), proc.stdout, proc.stderr))
    return proc


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, (proc.args, proc.stdout, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def stack(secure_hive):
    return secure_hive


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A Parquet table with 3 hours of committed data (600 records); Parquet, since the wheel's Thrift
    Server has no JSON SerDe to read a jsonl table with."""
    root = tmp_path_factory.mktemp("secured") / "events"
    src = make_source(root.parent / "src.jsonl", 600, hours=3)
    ok(run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet"))
    ok(run_trib("ingest", str(root), "--source", str(src), "--app-id", "feed", "--time-field", "ts"))
    ROOTS.append(root)
    return root


@pytest.fixture(scope="module")
def alice(stack, tmp_path_factory):
    """Alice's ``kinit`` ticket in a cache of her own, and the env that points clients at it."""
    return stack.kinit("alice", tmp_path_factory.mktemp("alice") / "ccache")


def ldap_uri(stack, **options: str) -> str:
    """Bob's LDAP-over-TLS URI; an option given as ``""`` is left out."""
    opts = {"auth": "LDAP", "user": stack.bob, "ssl": "true", "ssl_ca": stack.ca_pem,
            "password_file": stack.bob_password_file}
    opts.update(options)
    return f"hs2://localhost:{stack.ldap_hs2_port}/default?" + "&".join(f"{k}={v}" for k, v in opts.items() if v)


def beeline(stack, url: str, sql: str, env: dict, *extra: str) -> str:
    from tributary_read.services.hive import beeline_command

    cmd = beeline_command(["-u", url, *extra, "--silent=true", "--outputformat=csv2", "-e", sql])
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def as_alice(stack, alice: dict, sql: str) -> list[tuple]:
    """Rows of ``sql`` through the Kerberos Thrift Server, read with alice's ticket (pyhive, GSSAPI)."""
    from pyhive import hive

    saved = {k: os.environ.get(k) for k in alice}
    os.environ.update(alice)
    try:
        conn = hive.connect(host="localhost", port=stack.kerberos_hs2_port, auth="KERBEROS",
                            kerberos_service_name="hive")
        try:
            cur = conn.cursor()
            cur.execute(sql)
            return cur.fetchall()
        finally:
            conn.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def hive_name(prefix: str) -> str:
    return f"default.{prefix}_{uuid.uuid4().hex[:8]}"


# -- the renewal test's ingest starts first, so that its minutes overlap the other tests -----------------
class RenewingIngest:
    """A follow-mode Kafka ingest logged in from shorty's keytab (tickets of ``TICKET_LIFE_S``), committing
    one new hour's partition to the Kerberized metastore for each of ``HOURS``, each on a connection of
    its own, until more than three ticket lives have passed.

    Each hour is produced ``QUIET_S`` after the ingest's last commit (seen in the table's log, where it
    lands just before the committer mounts its partition): longer than the committer keeps an idle
    connection (``hive.commit.IDLE_RECONNECT_S``), so each mount opens a new one and authenticates with
    whatever ticket the cache holds then, as hourly mounts do in production. A schedule of fixed times
    could not promise that: the ingest's start-up delays the first mount, and one mount reusing the
    connection of the one before left a login fewer than the mounts (seen in CI). The ticket of the mount
    before has expired by then (``QUIET_S`` > ``TICKET_LIFE_S``): every mount is a login from the keytab.
    """

    TICKET_LIFE_S = SHORT_LIFE_S
    HOURS = 4  # mounts at ~0, 35, 70, 105 s: past three ticket lives
    QUIET_S = 32.0
    KDC_LOG = "kdc/kdc.log"

    def __init__(self, stack, broker, alice_env, tmp: Path):
        from tributary_read.hive.commit import IDLE_RECONNECT_S

        assert self.TICKET_LIFE_S < self.QUIET_S and IDLE_RECONNECT_S + 1 < self.QUIET_S
        self.stack, self.broker, self.tmp = stack, broker, tmp
        self.root = tmp / "follow"
        self.topic = f"renew-{uuid.uuid4().hex[:8]}"
        self.hive = hive_name("renew")
        self.hours: list[str] = []
        self.stale_env = stack.kinit("shorty", tmp / "shorty-kinit")  # no keytab: this ticket just expires
        broker.create_topic(self.topic, 1)
        ok(trib("table", "create", str(self.root), "--layout", LAYOUT, "--partition", PARTITION, "--format",
                "parquet", env={}))
        ROOTS.append(self.root)
        ok(trib("hive", "create-table", str(self.root), "--hive-table", self.hive, "--columns", "id BIGINT, ts BIGINT",
                "--metastore", stack.metastore_uri, env=alice_env))
        ok(trib("partitions", "configure", str(self.root), "--policy", "metastore", "--hive-table", self.hive,
                "--metastore", stack.metastore_uri, env={}))
        self.env = {**stack.env, "TRIB_PRINCIPAL": stack.shorty, "TRIB_KEYTAB": stack.shorty_keytab,
                    "KRB5CCNAME": f"FILE:{tmp / 'never-used'}", "PYTHONPATH": str(REPO)}
        self.kdc_log = Path(stack.dir) / self.KDC_LOG
        self.kdc_log_start = self.kdc_log.stat().st_size
        self.log_dir = self.root / "_tributary" / "log"
        self.produced_all = threading.Event()
        self.failure: BaseException | None = None
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [*TRIB, "ingest", str(self.root), "--kafka", broker.bootstrap, "--topic", self.topic, "--app-id", "feed",
             "--time-field", "ts", "--follow", "--commit-interval", "5s", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **self.env})
        self._stop = threading.Event()
        self.producer = threading.Thread(target=self._produce, daemon=True)
        self.producer.start()

    def commits(self) -> int:
        """How many commits the ingest has made (its table's log, read without a process)."""
        try:
            return sum(1 for n in os.listdir(self.log_dir) if n.endswith(".json") and n[:-5].isdigit())
        except FileNotFoundError:
            return 0

    def _quiet(self, before: int) -> bool:
        """Wait until the ingest has committed past ``before`` and then made no commit for ``QUIET_S``; False
        if the ingest ended or the test stopped meanwhile."""
        seen, last = self.commits(), time.monotonic()
        while seen <= before or time.monotonic() - last < self.QUIET_S:
            if self._stop.wait(0.25) or self.proc.poll() is not None:
                return False
            now = self.commits()
            if now != seen:
                seen, last = now, time.monotonic()
        return True

    def _produce(self) -> None:
        from tributary_read.table.layout import Layout

        lay = Layout(LAYOUT, PARTITION)
        before = 0
        try:
            for i in range(self.HOURS):
                if i and not self._quiet(before):
                    return
                before = self.commits()
                ts = H0 + i * HOUR_MS
                self.broker.produce(self.topic, [{"id": i * 10 + k, "ts": ts + k * 1000} for k in range(10)])
                self.hours.append(lay.for_time(ts).values["dt"])
            # The last hour committed (and so mounted), too.
            while self.commits() <= before:
                if self._stop.wait(0.25) or self.proc.poll() is not None:
                    return
            self.produced_all.set()
        except BaseException as e:  # said by finish(), in the test's thread
            self.failure = e

    def finish(self) -> tuple[int, str, str]:
        """SIGTERM once every hour is committed and more than three ticket lives have passed: the run
        commits what it read and mounts what is due, then exits 0."""
        done = self.produced_all.wait(self.HOURS * (self.QUIET_S + 30) + 60)
        time.sleep(max(0.0, self.started + 3 * self.TICKET_LIFE_S + 5 - time.monotonic()))
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=120)
        OUTPUTS.append(("ingest --follow (keytab)", out, err))
        assert self.failure is None, self.failure
        assert done, (self.hours, self.commits(), err[-3000:])
        return self.proc.returncode, out, err

    def logins(self) -> int:
        """Initial-ticket requests (AS_REQ) for shorty the KDC served since the ingest started: its
        keytab logins (the ingest's own process is the only client of shorty then)."""
        with open(self.kdc_log, "rb") as f:
            f.seek(self.kdc_log_start)
            lines = f.read().decode("utf-8", "replace").splitlines()
        return sum(1 for ln in lines if "AS_REQ" in ln and "ISSUE" in ln and f"{self.stack.shorty} for krbtgt" in ln)

    def kill(self) -> None:
        self._stop.set()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture(scope="module")
def renewing(stack, kafka_broker, alice, tmp_path_factory):
    ingest = RenewingIngest(stack, kafka_broker, alice, tmp_path_factory.mktemp("renew"))
    yield ingest
    ingest.kill()


def test_the_renewal_ingest_is_running(renewing):
    """Starts the long test early (the fixture); it is checked by the module's last test."""
    time.sleep(2)
    assert renewing.proc.poll() is None, renewing.proc.communicate()


# -- LDAP over TLS -------------------------------------------------------------------------------------
def test_ldap_over_tls_creates_syncs_and_commits_and_beeline_reads_the_rows_as_bob(stack, table):
    name = hive_name("ldap")
    uri = ldap_uri(stack)
    ok(trib("hive", "create-table", str(table), "--hive-table", name, "--metastore", uri, env={}))
    sync = json.loads(ok(trib("partitions", "sync", str(table), "--hive-table", name, "--metastore", uri, "--json",
                              env={})).stdout)
    assert sync["summary"]["add"] == 3 and sync["applied"], sync
    # The stored policy keeps the URI: password_file= is where the password is, not the password.
    ok(trib("partitions", "configure", str(table), "--policy", "metastore", "--hive-table", name, "--metastore", uri,
            env={}))
    ok(trib("partitions", "commit", str(table), "--all", "--json", env={}))
    url = f"{stack.ldap_jdbc_url}"
    rows = beeline(stack, url, f"SELECT current_user(), count(*) FROM {name}", {}, "-n", stack.bob, "-w",
                   stack.bob_password_file).strip().splitlines()
    assert rows[-1] == f"{stack.bob},600", rows
    # The environment variable works the same way as the file.
    ok(trib("partitions", "sync", str(table), "--hive-table", name, "--metastore", ldap_uri(stack, password_file=""),
            env={"TRIB_HS2_PASSWORD": stack.bob_password}))


def test_ldap_failures_name_the_user_and_the_fix(stack, table, tmp_path):
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("not-his-password\n")
    name = "default.never_created"
    cases = [
        (ldap_uri(stack, password_file=str(wrong)), "refused the LDAP login of user 'bob': a wrong password"),
        (ldap_uri(stack, user="mallory"), "refused the LDAP login of user 'mallory'"),
        (ldap_uri(stack, auth="NONE", password_file=""), "refused the LDAP login of user 'bob'"),
        (ldap_uri(stack, ssl="false", ssl_ca=""), "closed the connection during the handshake"),
        (ldap_uri(stack, ssl_ca=""), "its certificate is not signed by a CA this client trusts"),
        (f"hs2://localhost:{stack.kerberos_hs2_port}/default?auth=LDAP&user=bob&ssl=true&ssl_ca={stack.ca_pem}"
         f"&password_file={stack.bob_password_file}", "does not speak TLS"),
    ]
    for uri, words in cases:
        r = trib("partitions", "sync", str(table), "--hive-table", name, "--metastore", uri, env={})
        one_line_error(r, 8, words)


# -- Kerberos ----------------------------------------------------------------------------------------
def test_kerberos_hs2_and_metastore_with_a_kinit_ticket_and_beeline_reads_as_alice(stack, table, alice):
    name = hive_name("krb")
    hs2 = f"hs2://localhost:{stack.kerberos_hs2_port}/default?auth=KERBEROS"
    ok(trib("hive", "create-table", str(table), "--hive-table", name, "--metastore", hs2, env=alice))
    ok(trib("partitions", "sync", str(table), "--hive-table", name, "--metastore", stack.metastore_uri, "--json",
            env=alice))
    ok(trib("partitions", "configure", str(table), "--policy", "metastore", "--hive-table", name, "--metastore",
            stack.metastore_uri, env={}))
    ok(trib("partitions", "commit", str(table), "--all", env=alice))
    assert as_alice(stack, alice, f"SELECT current_user(), count(*) FROM {name}") == [("alice", 600)]


def test_kerberos_failures_say_the_fix_in_words(stack, table, alice, tmp_path):
    no_ticket = stack.ccache_env(tmp_path / "empty-cache")
    hs2 = f"hs2://localhost:{stack.kerberos_hs2_port}/default?auth=KERBEROS"
    port = stack.hms_port
    cases = [
        (stack.metastore_uri, no_ticket, f"no Kerberos ticket (cache FILE:{tmp_path / 'empty-cache'}): run kinit, "
                                         "or give a principal and keytab (--principal and --keytab)"),
        (f"thrift://127.0.0.1:{port}?auth=KERBEROS", alice, "service principal hive/127.0.0.1@TRIB.TEST unknown to "
                                                            "the KDC: HOST must be the principal's host"),
        (f"thrift://localhost:{port}", alice, "closed the connection during the handshake: the client's auth does "
                                              "not match the server's: check auth=NOSASL against its "
                                              "hive.metastore.sasl.enabled"),
        (f"hs2://localhost:{stack.kerberos_hs2_port}/default?auth=NONE", alice, "does not take a user and password"),
        (f"{hs2}&kerberos_service_name=hvie", alice, "service principal hvie/localhost@TRIB.TEST unknown"),
    ]
    for uri, env, words in cases:
        r = trib("partitions", "sync", str(table), "--hive-table", "default.nope", "--metastore", uri, env=env)
        line = one_line_error(r, 8, words)
        assert "851968" not in line and "Minor code" not in line
    # The same failure with --json: one line on stderr, and the error object on stdout.
    r = trib("partitions", "sync", str(table), "--hive-table", "default.nope", "--metastore", stack.metastore_uri,
             "--json", env=no_ticket)
    one_line_error(r, 8, "no Kerberos ticket")
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["error"]["exit_code"] == 8 and doc["error"]["class"] == "MetastoreAuthError", doc


def test_a_table_created_over_the_kerberized_metastore_api_matches_the_hiveserver2_one(stack, table, alice):
    via_hs2, via_thrift = hive_name("ddl_hs2"), hive_name("ddl_thrift")
    hs2 = f"hs2://localhost:{stack.kerberos_hs2_port}/default?auth=KERBEROS"
    ok(trib("hive", "create-table", str(table), "--hive-table", via_hs2, "--metastore", hs2, env=alice))
    ok(trib("hive", "create-table", str(table), "--hive-table", via_thrift, "--metastore", stack.metastore_uri,
            env=alice))

    def described(name: str) -> list[tuple]:
        # As tests/test_thrift_create_table.py compares them: who and when differ, nothing else may.
        skip = ("Table", "Created Time", "Created By", "Last Access", "Owner", "transient_lastDdlTime")
        return [tuple(str(c or "").strip().replace(name.split(".")[1], "T") for c in row)
                for row in as_alice(stack, alice, f"DESCRIBE FORMATTED {name}")
                if not str(row[0] or "").strip().startswith(skip)]
    assert described(via_hs2) == described(via_thrift)


# -- trib hive up --auth --------------------------------------------------------------------------------
def test_hive_up_auth_kerberos_serves_trib_with_its_own_keytab_until_down(tmp_path):
    """``trib hive up --auth kerberos`` (item 7): a local secured pair to try a job on before production,
    used exactly as its output says: a keytab login (``--principal/--keytab``, then trib.toml's
    ``[hive]``), DDL through its Kerberos HiveServer2, partitions through its metastore, then down.
    Placed before the renewal test's end, so that its start-up overlaps that test's minutes."""
    import secure_stack
    from tributary_read.services.hive import free_ports

    reason = secure_stack.missing()
    if reason:
        pytest.skip(reason)
    state = tmp_path / "hive"
    hms_port, hs2_port = free_ports(2)
    up = run_trib("hive", "up", "--auth", "kerberos", "--dir", str(state), "--hms-port", str(hms_port), "--hs2-port",
                  str(hs2_port), "--json")
    try:
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        assert info["hs2_port"] == hs2_port and info["hms_port"] == hms_port
        env = {"KRB5_CONFIG": info["krb5_conf"], "KRB5CCNAME": f"FILE:{tmp_path / 'unused-cache'}"}
        login = ["--principal", info["user"], "--keytab", info["keytab"]]
        root = tmp_path / "t"
        run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet",
                 check=True)
        run_trib("ingest", str(root), "--source", str(make_source(tmp_path / "s.jsonl", 200, hours=2)),
                 "--app-id", "feed", "--time-field", "ts", check=True)
        run_trib(*login, "hive", "create-table", str(root), "--hive-table", "default.tried", "--metastore",
                 info["hs2_uri"], env=env, check=True)
        # The same login from trib.toml's [hive] table.
        config = tmp_path / "trib.toml"
        config.write_text(f'[hive]\nprincipal = "{info["user"]}"\nkeytab = "{info["keytab"]}"\n')
        sync = run_trib("--config", str(config), "partitions", "sync", str(root), "--hive-table", "default.tried",
                        "--metastore", info["metastore_uri"], "--json", env=env, check=True)
        assert json.loads(sync.stdout)["summary"]["add"] == 2
        # Without the keytab and with no ticket, the same command says what is missing.
        r = run_trib("partitions", "sync", str(root), "--hive-table", "default.tried", "--metastore",
                     info["metastore_uri"], env=env)
        assert r.returncode == 8 and "no Kerberos ticket" in r.stderr, r.stderr
        assert run_trib("hive", "status", "--dir", str(state)).returncode == 0
    finally:
        down = run_trib("hive", "down", "--dir", str(state))
    assert down.returncode == 0, down.stderr
    assert run_trib("hive", "status", "--dir", str(state)).returncode == 8


def test_an_iceberg_mirror_into_the_kerberized_metastore_reads_as_trib_does(stack, alice, tmp_path, monkeypatch):
    """``--catalog thrift://…?auth=KERBEROS`` with alice's ticket: pyiceberg's HiveCatalog over trib's SASL
    transport, its commits under the metastore's lock; without a ticket, one line naming kinit."""
    pytest.importorskip("pyiceberg")
    from test_iceberg import OLD, RECENT, _check, _ingest, _table

    root, name = _table(tmp_path), "trib_iceberg.krb_events"
    _ingest(root, tmp_path, (*OLD, *RECENT), 2, 0)
    ok(trib("iceberg", "sync", str(root), "--table", name, "--catalog", stack.metastore_uri, env=alice))
    _ingest(root, tmp_path, OLD, 1, 100)  # late files into old partitions
    ok(trib("iceberg", "sync", str(root), "--table", name, "--catalog", stack.metastore_uri, env=alice))
    for k, v in alice.items():  # this process reads the catalog with alice's ticket
        monkeypatch.setenv(k, v)
    _check(root, stack.metastore_uri, name)
    r = trib("iceberg", "sync", str(root), "--table", name, "--catalog", stack.metastore_uri,
             env=stack.ccache_env(tmp_path / "empty-cache"))
    one_line_error(r, 8, "no Kerberos ticket", "kinit")


# -- the renewal test's end, and the sweep ------------------------------------------------------------------
def test_a_keytab_follow_ingest_commits_every_partition_past_several_ticket_lives(stack, renewing, alice):
    code, out, err = renewing.finish()
    elapsed = time.monotonic() - renewing.started
    assert code == 0, err[-3000:]
    assert elapsed >= 3 * RenewingIngest.TICKET_LIFE_S + 5, elapsed  # more than three lives of shorty's tickets
    # Every mount opened a connection of its own after the ticket of the one before had expired: each is a
    # fresh login from the keytab (the first, into an empty cache, too), never a stale ticket.
    assert renewing.logins() >= len(renewing.hours) == RenewingIngest.HOURS, (renewing.logins(), renewing.hours)
    assert "error" not in err.lower(), err[-3000:]
    doc = json.loads(out)
    assert doc["records"] == 10 * len(renewing.hours), doc
    from tributary_read.hive.model import TableName
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    os.environ.update(alice)  # this process reads the metastore with alice's ticket
    try:
        with ThriftMetastore("localhost", stack.hms_port, auth="KERBEROS") as ms:
            mounted = {p.values["dt"] for p in ms.list_partitions(TableName.parse(renewing.hive))}
    finally:
        for k in alice:
            os.environ.pop(k, None)
    assert mounted == set(renewing.hours) and len(mounted) == RenewingIngest.HOURS, (sorted(mounted), renewing.hours)
    # Without a keytab, the same principal's kinit ticket from the start is long expired: one line says so.
    r = trib("partitions", "sync", str(renewing.root), "--hive-table", renewing.hive, "--metastore",
             stack.metastore_uri, env=renewing.stale_env)
    one_line_error(r, 8, "the Kerberos ticket expired (cache FILE:", "run kinit again, or give a principal and keytab")


def test_no_test_password_in_any_file_log_line_or_output(stack, table):
    # One more run with -v (library debug logging on) and a failing one, both with the password in play.
    trib("-v", "partitions", "sync", str(table), "--hive-table", "default.sweep_missing", "--metastore",
         ldap_uri(stack), "--json", env={})
    trib("-v", "partitions", "sync", str(table), "--hive-table", "default.sweep_missing", "--metastore",
         ldap_uri(stack, password_file=""), env={"TRIB_HS2_PASSWORD": stack.bob_password})
    pw = stack.bob_password
    assert len(OUTPUTS) >= 15
    for args, out, err in OUTPUTS:
        assert pw not in out and pw not in err, args
    files = [p for root in ROOTS for p in root.rglob("*") if p.is_file()]
    assert len(files) > 10
    for p in files:
        assert pw.encode() not in p.read_bytes(), p
