"""Every .sql file in sql/ parses (Spark 4's parser; Hive 2.3's for all but SET), and the warehouse
scripts (sql/warehouse/) do what they say: the hourly ETL reads exactly the ODS files that arrived in its window.

The metastore templates (sql/metastore/) are rendered and parsed one by one in tests/test_sql_templates.py.
"""

from __future__ import annotations

import os
import re
import uuid

import pytest

from tributary_read.hive_udfs import registry as udfs
from tributary_read.hive.sql import METASTORE_DIR, WAREHOUSE_DIR
from tributary_read.spark.script import run_script, split_statements, substitute, window_variables

pytestmark = pytest.mark.integration

WAREHOUSE = sorted(WAREHOUSE_DIR.glob("*.sql"))
VARS = {"ods_table": "default.ods_x", "dw_table": "default.dw_x", "ods_location": "file:///tmp/ods",
        "dw_location": "file:///tmp/dw", "timezone": "UTC",
        **window_variables("2024-01-01T05:05:00Z", 3_600_000)}


def _statements(path):
    return [substitute(s, VARS) for s in split_statements(path.read_text())]


def test_every_sql_file_is_a_template_or_a_warehouse_script():
    from test_sql_templates import ITEMS, TEMPLATES

    root = METASTORE_DIR.parent
    assert sorted(p.name for p in root.iterdir() if p.name != "__pycache__") == [
        "README.md", "__init__.py", "metastore", "warehouse"]  # no SQL outside the two folders
    metastore = {p.name[:-4] for p in METASTORE_DIR.glob("*.sql")}
    assert metastore == set(TEMPLATES) | set(ITEMS)
    assert [p.name for p in WAREHOUSE] == ["dw_events.sql", "dw_users.sql", "hourly_naive.sql", "hourly_trib.sql",
                                            "hourly_users_naive.sql", "ods_raw_log.sql"]


@pytest.mark.parametrize("path", WAREHOUSE, ids=[p.name for p in WAREHOUSE])
def test_warehouse_scripts_parse(spark, path):
    parser = spark._jsparkSession.sessionState().sqlParser()
    hive = spark._jvm.org.apache.hadoop.hive.ql.parse.ParseDriver()
    stmts = _statements(path)
    assert stmts
    for s in stmts:
        assert "${" not in s.text
        assert parser.parsePlan(s.text) is not None
        if not re.match(r"(?i)^set\s", s.text):  # SET is Hive's command processor, not its parser
            assert hive.parse(s.text).dump().strip()


def test_hourly_etl_reads_exactly_its_window(spark, tmp_path):
    """Two ODS hours; files arriving inside / outside the 05:00 run's window; a late file in an old hour."""
    run = uuid.uuid4().hex[:8]
    variables = {"ods_table": f"default.ods_{run}", "dw_table": f"default.dw_{run}",
                 "ods_location": (tmp_path / "ods").as_uri(), "dw_location": (tmp_path / "dw").as_uri(),
                 "timezone": "UTC", **window_variables("2024-01-01T05:05:00Z", 3_600_000)}
    start, end = int(variables["window_start_ms"]), int(variables["window_end_ms"])
    hour3, hour4 = 1704078000000, 1704081600000  # 03:00 and 04:00 UTC

    def land(hour_dir, name, events, arrival):
        p = tmp_path / "ods" / hour_dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(f"{e}\tu{e % 7}\tclick\t{{}}\n" for e in events))
        os.utime(p, ns=(arrival * 1_000_000,) * 2)

    land("2024_01_01/04", "on-time.log", [hour4 + 1, hour4 + 2], start + 60_000)
    land("2024_01_01/03", "late.log", [hour3 + 5], end)  # lands late, in an old hour: still read
    land("2024_01_01/04", "next-run.log", [hour4 + 3], end + 1)  # the next run's
    land("2024_01_01/03", "last-run.log", [hour3 + 9], start - 1)  # the previous run's
    try:
        for script in ("ods_raw_log", "dw_events"):
            run_script(spark, split_statements((WAREHOUSE_DIR / f"{script}.sql").read_text()), variables)
        for h in ("03", "04"):
            spark.sql(f"ALTER TABLE {variables['ods_table']} ADD PARTITION (dt='20240101{h}') "
                      f"LOCATION '{(tmp_path / 'ods' / '2024_01_01' / h).as_uri()}'")
        udfs.register(spark)
        run_script(spark, split_statements((WAREHOUSE_DIR / "hourly_trib.sql").read_text()), variables)
        for key in udfs.PROPERTIES:
            spark.conf.unset(key)
        rows = spark.sql(f"SELECT event_time, dt, arrival_ms, lateness_ms FROM {variables['dw_table']}").collect()
        assert sorted(tuple(r) for r in rows) == sorted([
            (hour4 + 1, "2024010104", start + 60_000, start + 60_000 - hour4 - 1),
            (hour4 + 2, "2024010104", start + 60_000, start + 60_000 - hour4 - 2),
            (hour3 + 5, "2024010103", end, end - hour3 - 5)])
    finally:
        for key in udfs.PROPERTIES:
            spark.conf.unset(key)
        spark.sql(f"DROP TABLE IF EXISTS {variables['ods_table']}")
        spark.sql(f"DROP TABLE IF EXISTS {variables['dw_table']}")


def _spark_sql(line: str, cwd) -> str:
    """Run ``line`` (``spark-sql $(trib udfs spark-args) …`` as the docs show it) in bash.

    spark-sql is the pyspark wheel's own; ``trib`` is this venv's. The line gets only what a
    laptop run needs after ``spark-sql``: a one-core local master, no UI, the loopback address and
    Derby's files in ``cwd``. Its embedded metastore (``cwd/metastore_db``) is shared by the runs.
    """
    import subprocess
    import sys
    from pathlib import Path

    from tributary_read.hive_udfs.build import spark_home

    home = spark_home()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "HIVE_CONF_DIR")}
    env.update(SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
               PATH=os.pathsep.join([str(home / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")]))
    assert line.startswith("spark-sql $(trib udfs spark-args) ")
    local = (f"spark-sql --master 'local[1]' --conf spark.ui.enabled=false --conf spark.driver.host=127.0.0.1 "
             f"--driver-java-options '-Dderby.system.home={cwd} -Djava.io.tmpdir={cwd}' ")
    proc = subprocess.run(["bash", "-c", local + line[len("spark-sql "):]], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _dw_rows(path):
    import pyarrow.dataset as ds

    table = ds.dataset(str(path), format="parquet", partitioning="hive").to_table(
        columns=["event_time", "dt", "arrival_ms", "lateness_ms"])
    return sorted((int(e), str(d), int(a), int(lt)) for e, d, a, lt in zip(*(c.to_pylist() for c in table.columns)))


def test_warehouse_scripts_in_plain_spark_sql(tmp_path):
    """Each sql/warehouse script, in the wheel's spark-sql with only ``trib udfs spark-args`` and the
    ``--hivevar`` lines docs/sql.md shows: no CREATE FUNCTION, no ``-i`` registration file.

    Two spark-sql processes, not one per script (each is a cold driver and a metastore start, ~20 s
    under CI's load): the first runs the two DDL scripts and the partition mounts as ``-i`` files
    (spark-sql runs each in order, with the same ``--hivevar`` substitution, and stops at the first
    failing statement), then the naive hourly script with ``-f``; the second runs the trib hourly
    script alone with its docs line, in a new session, so its functions and its window come from
    ``trib udfs spark-args`` and its ``--hivevar`` lines alone. The naive script's rows are read
    between the two, so each script's rows are checked on their own."""
    from collections import Counter

    v = window_variables("2024-01-01T05:05:00Z", 3_600_000)
    start, end = int(v["window_start_ms"]), int(v["window_end_ms"])
    hour3, hour4 = 1704078000000, 1704081600000  # 03:00 and 04:00 UTC
    ods, dw = tmp_path / "ods", tmp_path / "dw"

    def land(hour_dir, name, events, arrival):
        p = ods / hour_dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(f"{e}\tu{e % 7}\tclick\t{{}}\n" for e in events))
        os.utime(p, ns=(arrival * 1_000_000,) * 2)

    land("2024_01_01/04", "on-time.log", [hour4 + 1, hour4 + 2], start + 60_000)
    land("2024_01_01/03", "late.log", [hour3 + 5], end)  # lands late, in an old hour
    land("2024_01_01/04", "next-run.log", [hour4 + 3], end + 1)  # the next run's
    mount = tmp_path / "mount.sql"
    mount.write_text("".join(f"ALTER TABLE ods_raw_log ADD PARTITION (dt='20240101{h}') "
                             f"LOCATION '{(ods / '2024_01_01' / h).as_uri()}';\n" for h in ("03", "04")))
    w = WAREHOUSE_DIR
    # the docs' first three lines in one process: their --hivevar lines together, the DDL scripts as -i files
    ddl = (f"--hivevar ods_location={ods.as_uri()} --hivevar dw_location={dw.as_uri()} "
           f"-i {w / 'ods_raw_log.sql'} -i {w / 'dw_events.sql'} -i {mount}")
    hourly = "--hivevar ods_table=ods_raw_log --hivevar dw_table=dw_events --hivevar timezone=UTC"
    _spark_sql(f"spark-sql $(trib udfs spark-args) {ddl} {hourly} --hivevar window_dt={v['window_dt']} "
               f"-f {w / 'hourly_naive.sql'}", tmp_path)
    naive = _dw_rows(dw)
    assert naive == sorted([(hour4 + 1, "2024010104", start + 60_000, start + 60_000 - hour4 - 1),
                            (hour4 + 2, "2024010104", start + 60_000, start + 60_000 - hour4 - 2),
                            (hour4 + 3, "2024010104", end + 1, end + 1 - hour4 - 3)])
    _spark_sql(f"spark-sql $(trib udfs spark-args) {hourly} --hivevar window_start_ms={start} "
               f"--hivevar window_end_ms={end} -f {w / 'hourly_trib.sql'}", tmp_path)
    added = Counter(_dw_rows(dw)) - Counter(naive)
    assert sorted(added.elements()) == sorted([
        (hour4 + 1, "2024010104", start + 60_000, start + 60_000 - hour4 - 1),
        (hour4 + 2, "2024010104", start + 60_000, start + 60_000 - hour4 - 2),
        (hour3 + 5, "2024010103", end, end - hour3 - 5)])
