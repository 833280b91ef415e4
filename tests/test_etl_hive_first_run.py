"""A new user's first ETL run with ``[hive]`` (issue 26, item 1): the README's steps, run as written.

The README's quick start is executed line by line (its paths under a scratch directory, its metastore the
suite's HiveServer2): the first run creates the Hive table, commits once and mounts the partition. A job
without ``create = true`` refuses before committing (exit 3, with the DDL); ``trib hive create-table --job``
then creates the table from the job's SQL, with no committed file; a missing database is exit 3 with its
``CREATE DATABASE`` line.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from pathlib import Path

import pytest

from conftest import invoke_trib

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
HOUR = 3_600_000
T0 = 1704081600000  # 2024-01-01T04:00:00Z: the hour the README's run (05:00) reads


def readme_block() -> str:
    """The README's fenced block that runs the ETL quick start."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M) if "trib etl run hourly.toml" in b)
    return block


def run_block(block: str, cwd: Path, subst: dict[str, str]) -> dict[str, object]:
    """Run each line of ``block`` as written: ``trib ...`` in this process, ``cat > F <<'EOF'`` as a file.

    Returns the result of each trib command, by its text. ``pip install`` is the only other line allowed.
    """
    for a, b in subst.items():
        block = block.replace(a, b)
    block = re.sub(r"\\\n\s*", " ", block)
    lines = iter(block.splitlines())
    results: dict[str, object] = {}
    for line in lines:
        m = re.match(r"^cat > (\S+) <<'EOF'$", line)
        if m:
            body = []
            for inner in lines:
                if inner == "EOF":
                    break
                body.append(inner)
            (cwd / m.group(1)).write_text("\n".join(body) + "\n")
            continue
        code = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
        if not code or "pip install" in code:  # the install: this test runs in an installed checkout
            continue
        assert code.startswith("trib "), f"a README line this test cannot run: {line!r}"
        results[code] = invoke_trib(*shlex.split(code)[1:], cwd=cwd)
    return results


def write_events(path: Path, n: int = 30) -> None:
    path.write_text("".join(json.dumps({"ts": T0 + i * 60_000, "user_id": f"u{i % 7}", "action": "click"}) + "\n"
                            for i in range(n)))


@pytest.fixture
def hive_names(hs2_cursor):
    names: list[str] = []
    yield names
    for n in names:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {n}")


def test_the_readme_steps_create_the_table_commit_once_and_mount_the_partition(tmp_path, hive_services,
                                                                               hs2_cursor, hive_names):
    hive = f"default.hourly_{uuid.uuid4().hex[:8]}"
    hive_names.append(hive)
    write_events(tmp_path / "events.jsonl")
    block = readme_block()
    results = run_block(block, tmp_path, {"/data/": f"{tmp_path}/data/", "default.hourly": hive,
                                          "hs2://127.0.0.1:10000": f"hs2://127.0.0.1:{hive_services.hs2_port}"})
    failed = {k: (r.returncode, r.stderr[-800:]) for k, r in results.items() if r.returncode != 0}
    assert not failed, failed
    dry = next(r for k, r in results.items() if "--dry-run" in k)
    assert "would create Hive table" in dry.stderr and "CREATE EXTERNAL TABLE" in dry.stderr, dry.stderr
    doc = json.loads(next(r for k, r in results.items() if k.startswith("trib etl run") and "--json" in k).stdout)
    assert not doc["already_committed"] and doc["output"]["records"] == 30, doc
    assert doc["hive"]["added"] == ["dt=2024010104"], doc["hive"]
    assert doc["hive_table"]["missing"] == f"table {hive}"
    hs2_cursor.execute(f"SELECT dt, count(*), count(DISTINCT user_id) FROM {hive} GROUP BY dt")
    assert hs2_cursor.fetchall() == [("2024010104", 30, 7)]
    hs2_cursor.execute(f"DESCRIBE {hive}")
    cols = [r[0].strip() for r in hs2_cursor.fetchall()]
    assert cols[:4] == ["ts", "user_id", "action", "dt"], cols
    log = sorted((tmp_path / "data" / "hourly" / "_tributary" / "log").glob("*.json"))
    assert [p.name for p in log if "etl:hourly" in p.read_text()] == [f"{doc['version']:020d}.json"]  # once


def test_without_create_the_run_refuses_before_committing_and_create_table_job_makes_the_table(
        tmp_path, hive_services, hs2_cursor, hive_names):
    hive = f"default.hourly_{uuid.uuid4().hex[:8]}"
    hive_names.append(hive)
    write_events(tmp_path / "events.jsonl")
    block = readme_block().split("trib etl run hourly.toml")[0].replace("create = true", "")
    db = f"nodb_{uuid.uuid4().hex[:8]}"
    results = run_block(block, tmp_path, {"/data/": f"{tmp_path}/data/", "default.hourly": f"{db}.hourly",
                                          "hs2://127.0.0.1:10000": f"hs2://127.0.0.1:{hive_services.hs2_port}"})
    assert all(r.returncode == 0 for r in results.values()), results
    job = tmp_path / "hourly.toml"
    log = tmp_path / "data" / "hourly" / "_tributary" / "log"

    nodb = invoke_trib("etl", "run", str(job), "--schedule-time", "2024-01-01T05:00:00Z")
    assert nodb.returncode == 3, nodb.stderr
    assert f"Hive database {db} does not exist" in nodb.stderr and f"CREATE DATABASE `{db}`;" in nodb.stderr
    before = sorted(log.glob("*.json"))  # the table's creation only
    assert not any("etl:hourly" in p.read_text() for p in before)
    dry = invoke_trib("etl", "run", str(job), "--schedule-time", "2024-01-01T05:00:00Z", "--dry-run")
    assert dry.returncode == 3 and f"CREATE DATABASE `{db}`;" in dry.stderr

    job.write_text(job.read_text().replace(f"{db}.hourly", hive))
    for args in (("--dry-run",), ()):
        r = invoke_trib("etl", "run", str(job), "--schedule-time", "2024-01-01T05:00:00Z", *args)
        assert r.returncode == 3, r.stderr
        assert f"Hive table {hive} does not exist" in r.stderr and "nothing was committed" in r.stderr
        assert "CREATE EXTERNAL TABLE" in r.stderr and "PARTITIONED BY (`dt` STRING)" in r.stderr, r.stderr
        assert "create = true" in r.stderr and "--" not in r.stderr.split("nothing was committed")[1]
    assert sorted(log.glob("*.json")) == before

    made = invoke_trib("hive", "create-table", "--job", str(job), "--schedule-time", "2024-01-01T05:00:00Z",
                       "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["created"] is True
    again = invoke_trib("hive", "create-table", "--job", str(job), "--json", "--schedule-time",
                        "2024-01-01T05:00:00Z")
    assert again.returncode == 0 and json.loads(again.stdout)["exists"] is True, again.stderr
    run = invoke_trib("etl", "run", str(job), "--schedule-time", "2024-01-01T05:00:00Z", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["hive"]["added"] == ["dt=2024010104"]
    hs2_cursor.execute(f"SELECT count(*) FROM {hive}")
    assert hs2_cursor.fetchall() == [(30,)]


def _hive_tables(cur, name: str) -> list:
    db, _, table = name.partition(".")
    cur.execute(f"SHOW TABLES IN {db} LIKE '{table}'")
    return cur.fetchall()


def test_a_failed_run_creates_no_table_a_mismatch_is_refused_and_a_dropped_table_is_made_again(
        tmp_path, hive_services, hs2_cursor, hive_names):
    """Finding: a first run that failed on a string time column had made `ts STRING`; the fixed rerun then
    committed TIMESTAMP Parquet into it with exit 0, and every Hive query over it failed."""
    hive = f"default.hourly_{uuid.uuid4().hex[:8]}"
    hive_names.append(hive)
    write_events(tmp_path / "events.jsonl")
    block = readme_block().split("trib etl run hourly.toml")[0].replace(
        "SELECT ts, user_id, action FROM events",
        "SELECT date_format(timestamp_millis(ts), 'yyyy-MM-dd HH:mm:ss') AS ts, user_id, action FROM events")
    results = run_block(block, tmp_path, {"/data/": f"{tmp_path}/data/", "default.hourly": hive,
                                          "hs2://127.0.0.1:10000": f"hs2://127.0.0.1:{hive_services.hs2_port}"})
    assert all(r.returncode == 0 for r in results.values()), results
    job, sql = tmp_path / "hourly.toml", tmp_path / "hourly.sql"
    log = tmp_path / "data" / "hourly" / "_tributary" / "log"
    when = ("--schedule-time", "2024-01-01T05:00:00Z")

    failed = invoke_trib("etl", "run", str(job), *when)
    assert failed.returncode == 3 and "time column 'ts' is string" in failed.stderr, failed.stderr
    assert _hive_tables(hs2_cursor, hive) == []  # a run that fails creates no table

    # A table of the wrong type (as a failed run of an earlier version left it): refused before the commit.
    hs2_cursor.execute(f"CREATE EXTERNAL TABLE {hive} (ts STRING, user_id STRING, action STRING) "
                       f"PARTITIONED BY (dt STRING) STORED AS PARQUET LOCATION 'file://{tmp_path}/data/hourly'")
    sql.write_text("SELECT CAST(timestamp_millis(ts) AS TIMESTAMP) AS ts, user_id, action FROM events\n")
    before = sorted(log.glob("*.json"))
    refused = invoke_trib("etl", "run", str(job), *when)
    line = refused.stderr.strip().splitlines()[-1]  # the one error line, after the progress lines
    assert refused.returncode == 5 and line.startswith("trib: error: "), refused.stderr
    assert f"column ts is STRING in Hive table {hive}, TIMESTAMP in the output" in line
    assert "nothing was committed" in line and f"DROP TABLE `default`.`{hive[8:]}`;" in line
    assert sorted(log.glob("*.json")) == before
    dry = invoke_trib("etl", "run", str(job), *when, "--dry-run")
    assert dry.returncode == 5 and "column ts is STRING" in dry.stderr, dry.stderr

    hs2_cursor.execute(f"DROP TABLE {hive}")  # the fix the line names, then the rerun
    ok = invoke_trib("etl", "run", str(job), *when, "--json")
    assert ok.returncode == 0, ok.stderr
    hs2_cursor.execute(f"SELECT count(*), min(ts) FROM {hive}")
    assert [(n, str(t)) for n, t in hs2_cursor.fetchall()] == [(30, "2024-01-01 04:00:00")]

    # Dropped later: a rerun of the committed hour (create = true) makes it again and mounts the hour.
    hs2_cursor.execute(f"DROP TABLE {hive}")
    again = invoke_trib("etl", "run", str(job), *when, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["already_committed"] is True
    hs2_cursor.execute(f"SELECT count(*) FROM {hive}")
    assert hs2_cursor.fetchall() == [(30,)]
    # ... and `create-table --job` takes the committed columns: no input at "now" is needed.
    hs2_cursor.execute(f"DROP TABLE {hive}")
    made = invoke_trib("hive", "create-table", "--job", str(job), "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["created"] is True and "`ts` TIMESTAMP" in json.loads(made.stdout)["ddl"]
