"""The local metastore + HiveServer2 pair, its ``trib hive`` commands and the Spark fixture.

One pair serves the whole session (``hive_services``): a second pair would cost ~25 s and
two more JVMs on a 2-core box, so failure paths use busy ports or stale state instead.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest

from conftest import _free_ports, run_trib
from tributary_read.services import hive as services

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_hive_group_is_registered():
    proc = run_trib("hive", "--help")
    assert proc.returncode == 0, proc.stderr
    for cmd in ("up", "status", "down", "beeline"):
        assert cmd in proc.stdout


def test_status_reports_both_alive(hive_services):
    proc = run_trib("hive", "status", "--dir", hive_services.dir, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["alive"] is True
    assert data["hms"] == {"pid": hive_services.hms_pid, "port": hive_services.hms_port, "alive": True}
    assert data["hs2"] == {"pid": hive_services.hs2_pid, "port": hive_services.hs2_port, "alive": True}


def test_the_metastore_jvm_runs_with_trib_hive_java_opts(hive_services):
    """The metastore is a JVM of trib's own launch (not spark-submit's): $TRIB_HIVE_JAVA_OPTS reaches it.
    The suite sets the tests' JVM options there (conftest.py); C2 and G1 cost CI's metastores ~40% more CPU."""
    import shlex

    want = shlex.split(os.environ["TRIB_HIVE_JAVA_OPTS"])
    assert want, "conftest sets TRIB_HIVE_JAVA_OPTS"
    argv = Path(f"/proc/{hive_services.hms_pid}/cmdline").read_bytes().decode().split("\0")
    main = next(i for i, a in enumerate(argv) if a == "-cp")
    assert all(o in argv[:main] for o in want), argv[:main]


def test_the_launcher_classes_are_built_once_per_machine_not_per_pair_dir(hive_services):
    """A pair in a new dir reuses the launcher classes trib's cache holds (javac: 5-7 CPU-s a build)."""
    from tributary_read.hive_udfs import build

    argv = Path(f"/proc/{hive_services.hms_pid}/cmdline").read_bytes().decode().split("\0")
    classpath = argv[argv.index("-cp") + 1].split(os.pathsep)
    cached = build.cache_root() / "launcher"
    assert any(Path(c).parent.parent == cached for c in classpath), classpath
    assert not (Path(hive_services.dir) / "classes").exists()
    t0 = os.stat(next(c for c in classpath if Path(c).parent.parent == cached)).st_mtime_ns
    again = build.launcher_classes(build.java(), build.spark_home() / "jars", 5.0)  # no javac: already built
    assert again.parent.parent == cached and os.stat(again).st_mtime_ns == t0


def test_trib_hive_beeline_works_from_a_shell_without_the_venv(hive_services, tmp_path):
    """The wheel's bin/beeline needs the venv's python3 on PATH; `trib hive beeline` does not."""
    bare = {"PATH": "/usr/bin:/bin", "SPARK_HOME": "", "VIRTUAL_ENV": ""}
    r = run_trib("hive", "beeline", "--dir", hive_services.dir, "--silent=true", "--outputformat=tsv2",
                 "-e", "SELECT trib_partition_value(1592960400000, 'yyyyMMddHH')", env=bare, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "2020062401" in r.stdout.split()
    r = run_trib("hive", "beeline", "--dir", str(tmp_path / "none"), "-e", "SELECT 1", env=bare)
    assert r.returncode == 8 and r.stderr.count("\n") == 1 and "no HiveServer2 runs from" in r.stderr


def test_up_on_a_running_dir_returns_the_running_pair(hive_services):
    # Default ports on purpose: the recorded ones win, nothing new is launched.
    proc = run_trib("hive", "up", "--dir", hive_services.dir, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["already_running"] is True
    assert (data["hms_pid"], data["hs2_pid"]) == (hive_services.hms_pid, hive_services.hs2_pid)
    assert data["metastore_uri"] == f"thrift://127.0.0.1:{hive_services.hms_port}"
    assert data["hs2"] == f"127.0.0.1:{hive_services.hs2_port}"
    assert data["warehouse_dir"] == hive_services.warehouse_uri


def test_tables_are_shared_between_hs2_and_spark(hive_services, hs2_cursor, spark):
    suffix = uuid.uuid4().hex[:8]
    from_hs2, from_spark = f"trib_hs2_{suffix}", f"trib_spark_{suffix}"
    try:
        hs2_cursor.execute(f"CREATE TABLE {from_hs2} (id INT, s STRING) STORED AS PARQUET")
        hs2_cursor.execute(f"INSERT INTO {from_hs2} VALUES (1, 'a'), (2, 'b')")
        assert spark.catalog.tableExists(from_hs2)
        rows = spark.sql(f"SELECT id, s FROM {from_hs2} ORDER BY id").collect()
        assert [tuple(r) for r in rows] == [(1, "a"), (2, "b")]

        spark.sql(f"CREATE TABLE {from_spark} (id BIGINT) USING parquet")
        spark.sql(f"INSERT INTO {from_spark} VALUES (7), (8)")
        hs2_cursor.execute(f"SHOW TABLES LIKE '{from_spark}'")
        assert from_spark in [row[1] for row in hs2_cursor.fetchall()]  # (namespace, name, temp)
        hs2_cursor.execute(f"SELECT id FROM {from_spark} ORDER BY id")
        assert hs2_cursor.fetchall() == [(7,), (8,)]

        # Both put managed tables in the pair's warehouse, not in a cwd spark-warehouse.
        warehouse = urlparse(hive_services.warehouse_uri).path
        for name in (from_hs2, from_spark):
            info = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").where("col_name = 'Location'")
            location = urlparse(info.first()["data_type"])  # file:/x, as Hadoop spells file:///x
            assert (location.scheme, location.path) == ("file", f"{warehouse}/{name}")
    finally:
        for name in (from_hs2, from_spark):
            hs2_cursor.execute(f"DROP TABLE IF EXISTS {name}")


@pytest.mark.parametrize("busy", ["hms", "hs2"])
def test_up_on_busy_ports_fails_fast_with_one_line(hive_services, tmp_path, busy):
    free = _free_ports(1)[0]
    hms_port = hive_services.hms_port if busy == "hms" else free
    hs2_port = hive_services.hs2_port if busy == "hs2" else free
    other = tmp_path / "other"
    t0 = time.monotonic()
    proc = run_trib("hive", "up", "--dir", str(other), "--hms-port", str(hms_port),
                    "--hs2-port", str(hs2_port), "--timeout", "120")
    elapsed = time.monotonic() - t0

    assert proc.returncode == 8, (proc.stdout, proc.stderr)
    assert elapsed < 30, f"took {elapsed:.1f}s: something was launched before the port check"
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("trib: error:")]
    assert len(errors) == 1, proc.stderr
    assert f"port {hive_services.hms_port if busy == 'hms' else hive_services.hs2_port} is in use" in errors[0]
    assert proc.stdout == ""
    assert not (other / "services.json").exists()
    # The running pair is untouched.
    assert all(s["alive"] for s in services.status(hive_services.dir).values())


@pytest.mark.parametrize("opts, error", [
    ('-Xmx1g "-Dunclosed', "$TRIB_HIVE_JAVA_OPTS cannot be split into JVM options: No closing quotation"),
    ("-Xmx1g -Djavax.net.ssl.keyStorePassword=s3cr3t", "$TRIB_HIVE_JAVA_OPTS: -Djavax.net.ssl.keyStorePassword "
                                                         "holds a secret"),
])
def test_up_with_a_bad_trib_hive_java_opts_is_one_line_and_starts_nothing(tmp_path, opts, error):
    other = tmp_path / "other"
    hms_port, hs2_port = _free_ports(2)
    proc = run_trib("hive", "up", "--dir", str(other), "--hms-port", str(hms_port), "--hs2-port", str(hs2_port),
                    env={"TRIB_HIVE_JAVA_OPTS": opts})
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "s3cr3t" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("trib: error:")]
    assert len(errors) == 1 and errors[0].startswith(f"trib: error: {error}"), proc.stderr
    assert proc.stdout == "" and not (other / "services.json").exists()


def _group_pids(leaders: set[int]) -> set[int]:
    """Every process whose process group is led by one of ``leaders`` (the JVMs and helpers)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                pgid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])
            except (OSError, IndexError, ValueError):
                continue
            if pgid in leaders:
                pids.add(int(entry.name))
    return pids


def _listening_sockets(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state owned by ``pids``, from /proc."""
    inodes = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir() if fd_dir.exists() else []:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            addr_hex, port_hex = local.split(":")
            # Each 32-bit word is in host (little-endian) order.
            raw = b"".join(bytes.fromhex(addr_hex[i:i + 8])[::-1] for i in range(0, len(addr_hex), 8))
            addr = ipaddress.ip_address(raw)
            if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
                addr = addr.ipv4_mapped  # Java's dual-stack sockets: ::ffff:127.0.0.1
            found.append((str(addr), int(port_hex, 16)))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_every_listening_socket_is_on_loopback(hive_services):
    pids = _group_pids({hive_services.hms_pid, hive_services.hs2_pid})
    assert {hive_services.hms_pid, hive_services.hs2_pid} <= pids
    listening = _listening_sockets(pids)
    ports = {port for _, port in listening}
    # Not vacuous: both service ports are among them (plus Spark's driver and block manager).
    assert {hive_services.hms_port, hive_services.hs2_port} <= ports, listening
    exposed = [(a, p) for a, p in listening if not ipaddress.ip_address(a).is_loopback]
    assert not exposed, f"listening beyond loopback: {exposed} (all: {listening})"


def test_status_and_down_on_stale_state(tmp_path):
    stale = tmp_path / "stale"
    stale.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    # A live process that is not ours (as if a pid were recycled): it must never be signalled.
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                start_new_session=True)
    try:
        hms_port, hs2_port = _free_ports(2)
        (stale / "services.json").write_text(json.dumps({
            "dir": str(stale), "hms_port": hms_port, "hs2_port": hs2_port,
            "hms_pid": stranger.pid, "hs2_pid": dead.pid}))

        proc = run_trib("hive", "status", "--dir", str(stale), "--json")
        assert proc.returncode == 8, proc.stderr
        data = json.loads(proc.stdout)
        assert data["alive"] is False
        assert (data["hms"]["alive"], data["hs2"]["alive"]) == (False, False)
        assert (data["hms"]["pid"], data["hs2"]["pid"]) == (stranger.pid, dead.pid)

        for _ in range(2):  # idempotent
            proc = run_trib("hive", "down", "--dir", str(stale), "--json")
            assert proc.returncode == 0, proc.stderr
            assert json.loads(proc.stdout)["was_alive"] == {"hms": False, "hs2": False}
            assert not (stale / "services.json").exists()
        assert stranger.poll() is None, "down signalled a process that is not ours"

        proc = run_trib("hive", "status", "--dir", str(stale))
        assert proc.returncode == 8
        assert "NOT RUNNING" in proc.stdout
    finally:
        stranger.kill()
        stranger.wait()
