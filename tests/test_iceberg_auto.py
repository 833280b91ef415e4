"""A table that mirrors itself: ``trib table set --iceberg`` and then ingest, ``trib compact``, ``trib expire``,
``trib clean`` and an hourly ``trib etl run`` each leave the Iceberg table equal to trib's rows (pyiceberg's
scan and DuckDB's, partition column included), with no ``trib iceberg sync`` run by hand.

The catalog down (a real PostgreSQL server, stopped): the command exits 8 naming the catch-up command, its
commit stands and nothing is deleted; that command, run as printed once the server is back, registers each
commit exactly once. Without pyiceberg: exit 10 naming the extra, the commit standing too.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, invoke_trib, run_trib
from helpers import LAYOUT, PARTITION
from test_iceberg import OLD, RECENT, _check, _ingest, _iceberg, _live_paths, _pyiceberg_rows, _table, _trib_rows

pytest.importorskip("pyiceberg")

pytestmark = pytest.mark.integration


def _set(root: Path, *args: str, code: int = 0) -> dict:
    proc = invoke_trib("table", "set", str(root), *args, "--json")
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout) if code == 0 else {"stderr": proc.stderr}


def _versions(catalog: str, name: str = "db.events") -> list[str]:
    return [s.summary["trib.version"] for s in _iceberg(catalog, name).snapshots()]


def _latest(root: Path) -> int:
    from tributary_read.table.config import Table

    return Table.load(str(root)).log.latest_version()


def test_every_commit_mirrors_itself_ingest_late_files_compaction_expiry_and_clean(tmp_path):
    root = _table(tmp_path)
    cat = f"sqlite:///{tmp_path / 'catalog' / 'iceberg.db'}"
    out = _set(root, "--iceberg", "db.events", "--iceberg-catalog", cat)
    assert out["iceberg"] == {"table": "db.events", "catalog": cat}
    # table.json is untouched (an older trib, which refuses keys it does not know, still reads the table)
    assert "iceberg" not in json.loads((root / "_tributary" / "table.json").read_text())
    shown = json.loads(invoke_trib("table", "show", str(root), "--json", check=True).stdout)
    assert shown["iceberg"] == {"table": "db.events", "catalog": cat}

    _ingest(root, tmp_path, (*OLD, *RECENT), 5, 0)
    _check(root, cat)
    _ingest(root, tmp_path, OLD, 3, 100)  # late files into old partitions
    _ingest(root, tmp_path, RECENT, 3, 200, extra="score")  # and a late field
    _check(root, cat)
    assert _versions(cat) == ["1", "2", "3"]
    # A spool directory's ingest (the continuous sources' path, Kafka's too) mirrors each of its commits.
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "app.log").write_text("".join(json.dumps({"id": 400 + i, "ts": ms, "name": "s"}) + "\n"
                                           for i, ms in enumerate(_hours((*OLD, *RECENT)))))
    run = json.loads(invoke_trib("ingest", str(root), "--source-dir", str(spool), "--app-id", "spool",
                                 "--time-field", "ts", "--json", check=True).stdout)
    assert run["iceberg"]["version"] == 4 and run["iceberg"]["error"] is None
    _check(root, cat)
    assert _versions(cat) == ["1", "2", "3", "4"]

    done = invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", "--json", check=True)
    assert json.loads(done.stdout)["iceberg"] == {"iceberg_table": "db.events", "catalog": cat, "version": 5,
                                                  "snapshots": 1, "error": None}
    _check(root, cat)
    assert _iceberg(cat).current_snapshot().summary.operation.value == "replace"

    # The expiry is registered before its files are deleted (--grace 0s deletes them in this run).
    gone = json.loads(invoke_trib("expire", str(root), "--older-than", "3d", "--grace", "0s", "--json",
                                  check=True).stdout)
    assert gone["iceberg"]["version"] == gone["version"] == 6 and gone["deleted"]
    _check(root, cat)
    assert len({dt for _, dt in _pyiceberg_rows(_iceberg(cat))}) == len(RECENT)
    cleaned = json.loads(invoke_trib("clean", str(root), "--older-than", "0s", "--json", check=True).stdout)
    assert cleaned["iceberg"]["version"] == 6 and cleaned["iceberg"]["snapshots"] == 0
    assert _versions(cat) == ["6"]  # the expiry expired the snapshots that name its (now deleted) files
    assert invoke_trib("verify", str(root)).returncode == 0  # the setting's file is trib's metadata

    # --no-iceberg stops the mirror (the Iceberg table stays as it was); '' does the same.
    assert _set(root, "--no-iceberg")["iceberg"] is None
    _ingest(root, tmp_path, RECENT, 1, 300)
    assert _versions(cat)[-1] == "6" and _latest(root) == 7
    _set(root, "--iceberg", "db.events", "--iceberg-catalog", cat)
    assert _set(root, "--iceberg", "")["iceberg"] is None
    assert not (root / "_tributary" / "iceberg" / "mirror.json").exists()

    # A mirror every commit would fail on is refused when it is set, and nothing is recorded.
    jsonl = _table(tmp_path, "jsonl")
    refused = _set(jsonl, "--iceberg", "db.text", code=3)["stderr"]
    assert "only Parquet tables mirror into Iceberg" in refused and refused.count("\n") == 1
    assert "NAMESPACE.NAME" in _set(root, "--iceberg", "events", code=3)["stderr"]
    assert "thrift://HOST:PORT" in _set(root, "--iceberg", "db.x", "--iceberg-catalog", "rest://h:8181", code=3)["stderr"]
    assert "unknown metastore auth 'LDAP'" in _set(root, "--iceberg", "db.x", "--iceberg-catalog",
                                                   "thrift://h:9083?auth=LDAP", code=3)["stderr"]
    assert "~/.pgpass" in _set(root, "--iceberg", "db.x", "--iceberg-catalog", "postgresql://u:secret@h:5432/d",
                               code=3)["stderr"]
    assert not (jsonl / "_tributary" / "iceberg").exists()
    assert not (root / "_tributary" / "iceberg" / "mirror.json").exists()


def _catch_up(stderr: str) -> list[str]:
    """The catch-up command an exit-8 line names, as argv."""
    (line,) = stderr.strip().splitlines()
    cmd = shlex.split(line.split("catch up with: ", 1)[1].split(" (or stop", 1)[0])
    assert cmd[:3] == ["trib", "iceberg", "sync"]
    return cmd[1:]


def test_a_postgres_catalog_down_fails_the_mirror_not_the_commit(tmp_path, postgres_server, postgres_catalog):
    root = _table(tmp_path)
    cat = postgres_catalog
    _set(root, "--iceberg", "db.events", "--iceberg-catalog", cat)
    _ingest(root, tmp_path, (*OLD, *RECENT), 3, 0)
    _check(root, cat)

    postgres_server.stop()
    try:
        src = tmp_path / "late.jsonl"  # late records into the old partitions
        src.write_text("".join(json.dumps({"id": 500 + i, "ts": ms, "name": "late"}) + "\n"
                               for i, ms in enumerate(_hours(OLD))))
        failed = invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "late", "--time-field", "ts")
        assert failed.returncode == 8, failed.stderr
        assert f"version 2 of {root.as_uri()} is committed" in failed.stderr
        assert f"catch up with: trib iceberg sync {root.as_uri()} --table db.events --catalog {cat}" in failed.stderr
        assert _latest(root) == 2  # the commit stands
        assert sum(1 for i, _ in _trib_rows(root) if i >= 500) == len(OLD)

        # An expiry with the catalog down: committed, but no file deleted (the Iceberg table still names them).
        expired = invoke_trib("expire", str(root), "--older-than", "3d", "--grace", "0s")
        assert expired.returncode == 8 and "version 3" in expired.stderr, expired.stderr
        assert _latest(root) == 3
        removed = _removed(root)
        assert removed and all((root / p).exists() for p in removed)
        argv = _catch_up(expired.stderr)
    finally:
        postgres_server.start()

    out = json.loads(invoke_trib(*argv, "--json", check=True).stdout)
    assert [s["version"] for s in out["snapshots"]] == [2, 3]
    _check(root, cat)
    assert _versions(cat) == ["3"]  # the expiry at 3 expired the snapshots that name its files
    again = json.loads(invoke_trib(*argv, "--json", check=True).stdout)
    assert again["snapshots"] == [] and _versions(cat) == ["3"]
    # The removed files go once the mirror has registered their removal.
    invoke_trib("clean", str(root), "--older-than", "0s", check=True)
    assert not any((root / p).exists() for p in removed)
    _check(root, cat)


def test_a_follow_run_warns_once_when_its_catalog_is_unreachable_and_ends_with_exit_8(tmp_path):
    """A --follow ingest may never end: it warns when its mirror starts failing (once for the outage, not per
    commit), keeps committing, and a stop ends it with the mirror's exit 8 and the catch-up command."""
    import signal
    import socket
    import time

    from conftest import TRIB

    root = _table(tmp_path)
    with socket.socket() as s:  # a port nothing listens on once the socket is closed
        s.bind(("127.0.0.1", 0))
        dead = f"postgresql://trib@127.0.0.1:{s.getsockname()[1]}/postgres"
    _set(root, "--iceberg", "db.events", "--iceberg-catalog", dead)
    d = tmp_path / "logs"
    d.mkdir()
    log = d / "app.log"

    def write(first: int) -> None:
        with log.open("a") as f:
            f.writelines(json.dumps({"id": first + i, "ts": ms, "name": "f"}) + "\n"
                         for i, ms in enumerate(_hours(RECENT)))

    def wait_for(version: int) -> None:
        deadline = time.monotonic() + 60
        while _latest(root) < version and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _latest(root) >= version, p.poll()

    write(0)
    p = subprocess.Popen([*TRIB, "ingest", str(root), "--source-dir", str(d), "--app-id", "f", "--time-field", "ts",
                          "--follow", "--commit-interval", "200ms", "--close-inactive", "30s"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        wait_for(1)
        write(100)
        wait_for(2)
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 8, err
    warnings = [line for line in err.splitlines() if line.startswith("trib: warning:") and "Iceberg" in line]
    assert len(warnings) == 1 and "version 1 of" in warnings[0] and "each later commit retries" in warnings[0]
    (error,) = [line for line in err.splitlines() if line.startswith("trib: error:")]
    assert f"catch up with: trib iceberg sync {root.as_uri()} --table db.events --catalog {dead}" in error
    assert sorted(i for i, _ in _trib_rows(root)) == [0, 1, 100, 101]  # every commit stands


def _hours(hours) -> list[int]:
    from test_iceberg import HOUR, _now_hour

    return [_now_hour() + h * HOUR + 7_000 for h in hours]


def _removed(root: Path) -> list[str]:
    from tributary_read.table.config import Table

    return sorted(Table.load(str(root)).log.state().removed)


def test_without_the_iceberg_extra_a_commit_stands_and_exits_10(tmp_path):
    root = _table(tmp_path)
    cat = f"sqlite:///{tmp_path / 'iceberg.db'}"
    _set(root, "--iceberg", "db.events", "--iceberg-catalog", cat)
    src = tmp_path / "s.jsonl"
    src.write_text(json.dumps({"id": 1, "ts": _hours(RECENT)[0], "name": "a"}) + "\n")
    # A machine without pyiceberg: its import fails, as it does when the package is absent.
    code = ("import sys; sys.modules['pyiceberg'] = None; import tributary_read; "
            "assert 'pyiceberg' not in [m for m in sys.modules if sys.modules[m] is not None]; "
            "from tributary_read.cli.main import main; main()")
    proc = subprocess.run([sys.executable, "-c", code, "ingest", str(root), "--source", str(src), "--app-id", "a",
                           "--time-field", "ts"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 10, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "pip install 'tributary-read[iceberg]'" in line
    assert f"version 1 of {root.as_uri()} is committed" in line and "trib iceberg sync" in line
    assert _latest(root) == 1


@pytest.mark.parametrize("mode", ["append", "restate"])
def test_an_hourly_etl_run_mirrors_its_output(tmp_path, warm_spark, mode, request):
    """An hourly job's output mirrors itself; a restate job's late-data restatement and a backfill of it are
    one overwrite snapshot each."""
    from etl_data import LAYOUT as RAW_LAYOUT, create_output_table, write_job

    raw, out = tmp_path / "raw", tmp_path / "out"
    invoke_trib("table", "create", str(raw), "--layout", RAW_LAYOUT, "--partition", PARTITION, check=True)
    hour = _hours(RECENT)[0] // 3_600_000 * 3_600_000
    src = tmp_path / "raw.jsonl"
    src.write_text("".join(json.dumps({"id": i, "ts": hour + i * 1000, "msg": f"m{i}"}) + "\n" for i in range(6)))
    invoke_trib("ingest", str(raw), "--source", str(src), "--app-id", "raw", "--time-field", "ts", check=True)
    create_output_table(out)
    # The append job mirrors into the PostgreSQL catalog, the restate job into the session's Hive metastore
    # (SQLite: every other test).
    cat = (request.getfixturevalue("postgres_catalog") if mode == "append"
           else request.getfixturevalue("hive_services").metastore_uri)
    _set(out, "--iceberg", "db.hourly", "--iceberg-catalog", cat)
    job = write_job(tmp_path / "jobs", name="hourly", raw=raw, out=out, output_mode=mode)
    when = _iso(hour + 3_600_000 + 300_000)
    proc = run_trib("etl", "run", str(job), "--schedule-time", when, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["iceberg"] == {"iceberg_table": "db.hourly", "catalog": cat, "version": doc["version"],
                              "snapshots": 1, "error": None}
    ice = _iceberg(cat, "db.hourly")
    got = ice.scan(selected_fields=("id", "dt")).to_arrow()
    assert sorted(zip(got.column("id").to_pylist(), got.column("dt").to_pylist())) == sorted(_trib_rows(out))
    assert len(got) == 6 and set(_live_paths(ice).values()) == {1}
    if mode != "restate":
        return

    # Late records into the same hour: the next run restates its output partition, one overwrite snapshot.
    src.write_text("".join(json.dumps({"id": i, "ts": hour + i * 1000, "msg": f"m{i}"}) + "\n" for i in range(6, 9)))
    invoke_trib("ingest", str(raw), "--source", str(src), "--app-id", "raw2", "--time-field", "ts", check=True)
    proc = run_trib("etl", "run", str(job), "--schedule-time", _iso(hour + 2 * 3_600_000 + 300_000), "--json",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert [r["records_after"] for r in doc["output"]["restated"]] == [9] and doc["iceberg"]["error"] is None
    ice = _iceberg(cat, "db.hourly")
    assert ice.current_snapshot().summary.operation.value == "overwrite"
    got = ice.scan(selected_fields=("id", "dt")).to_arrow()
    assert sorted(zip(got.column("id").to_pylist(), got.column("dt").to_pylist())) == sorted(_trib_rows(out))
    assert len(got) == 9 and set(_live_paths(ice).values()) == {1}

    # A backfill of that hour (after a fix to the SQL): mirrored too, as one more overwrite.
    (tmp_path / "jobs" / "hourly.sql").write_text("SELECT id * 10 AS id, ts, msg FROM raw\n")
    proc = run_trib("etl", "run", str(job), "--restate", f"{_iso(hour)}/{_iso(hour + 3_600_000)}", "--json",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["iceberg"]["error"] is None and doc["iceberg"]["version"] == doc["version"], doc
    ice = _iceberg(cat, "db.hourly")
    got = ice.scan(selected_fields=("id", "dt")).to_arrow()
    assert sorted(got.column("id").to_pylist()) == [10 * i for i in range(9)]
    assert sorted(zip(got.column("id").to_pylist(), got.column("dt").to_pylist())) == sorted(_trib_rows(out))
    assert _versions(cat, "db.hourly") == [str(doc["version"])]  # the older ones name the swapped-out files


def _iso(ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


assert LAYOUT  # the trib tables here use the suite's layout (helpers), the ETL's raw table etl_data's


def test_a_kafka_ingest_mirrors_each_commit_and_one_killed_mid_mirror_is_caught_up_by_the_next(tmp_path, kafka_broker):
    """``trib ingest --kafka`` into a mirrored Parquet table: each of its commits is one snapshot (late records
    into old hours included). An ingest killed -9 after its trib commit, before the catalog commit, leaves
    the mirror behind; the next ingest's mirror registers the missed commit and its own, each once."""
    import uuid

    topic = f"ice-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 2)
    hours = _hours((*OLD, *RECENT))

    def produce(start: int, n: int) -> None:
        for p in range(2):
            kafka_broker.produce(topic, [{"id": i, "ts": hours[i % len(hours)] + i, "name": f"k{i}"}
                                         for i in range(start, start + n) if i % 2 == p], partition=p)

    root = _table(tmp_path)
    cat = f"sqlite:///{tmp_path / 'iceberg.db'}"
    _set(root, "--iceberg", "db.events", "--iceberg-catalog", cat)
    args = ("ingest", str(root), "--kafka", kafka_broker.bootstrap, "--topic", topic, "--app-id", "feed",
            "--time-field", "ts", "--commit-every", "40")
    produce(0, 100)
    doc = json.loads(invoke_trib(*args, "--json", check=True).stdout)
    assert doc["records"] == 100 and doc["commits"] == 3 and doc["iceberg"]["error"] is None, doc
    assert _versions(cat) == ["1", "2", "3"]
    _check(root, cat)

    produce(100, 30)
    killed = run_trib(*args, env={"TRIB_CRASH_AT": "iceberg-prepared"})
    assert killed.returncode == -9, killed.stderr
    assert _latest(root) == 4 and _versions(cat) == ["1", "2", "3"]  # committed, not mirrored

    produce(130, 30)
    doc = json.loads(invoke_trib(*args, "--json", check=True).stdout)
    assert doc["records"] == 30 and doc["iceberg"]["error"] is None, doc
    assert _versions(cat) == ["1", "2", "3", "4", "5"]
    assert sorted(i for i, _ in _trib_rows(root)) == list(range(160))
    _check(root, cat)
