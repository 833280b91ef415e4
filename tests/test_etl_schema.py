"""The output schema is part of the table (issue 25, item 4), through ``trib etl run``.

Hour A writes ``id BIGINT``; a later hour that writes ``id STRING``, drops a column or adds
one that is not nullable is refused with exit 3 before anything is written, naming the
column and both types; a nullable new column is taken. ``schema_change = "allow"`` commits
a breaking change. After each change that commits, the whole output is read back with
Spark (``mergeSchema``) and with pyarrow (``unify_schemas``): every row, once.

One module, one shared Spark session (the ``spark`` fixture): ``trib etl run`` runs in
this process (``invoke_trib``) and reuses it, so no run starts a JVM of its own.
"""

from __future__ import annotations

import json

import pytest
from conftest import invoke_trib
from etl_data import table_job_text
from helpers import one_line_error
from test_etl_cli import LAYOUT, snapshot

from tributary_read.etl.runs import read_book
from tributary_read.table.config import Table, TableConfig

H = 3_600_000
T0 = 1_704_085_200_000  # 2024-01-01T05:00:00Z


def _data_and_log(root) -> dict:
    """Every file but the run book (which counts each refused run: issue 31)."""
    return {k: v for k, v in snapshot(root).items() if not k.endswith(".runs.json")}


def _iso(ms: int) -> str:
    from tributary_read.timespec import iso

    return iso(ms)


class _Job:
    def __init__(self, base):
        self.base, self.raw, self.out = base, base / "raw", base / "events"
        Table.create(str(self.raw), TableConfig(LAYOUT, format="jsonl"))
        Table.create(str(self.out), TableConfig(LAYOUT, format="parquet"))
        self.ids = 0
        self.hour = 0

    def arrive(self, n: int = 4) -> None:
        """``n`` new records in the next hour of the raw table (the consumer's next plan)."""
        src = self.base / f"src{self.hour}.jsonl"
        start = T0 - H + self.hour * H
        src.write_text("".join(json.dumps({"id": self.ids + i, "ts": start + i * 60_000, "msg": f"m{self.ids + i}"})
                               + "\n" for i in range(n)))
        invoke_trib("ingest", str(self.raw), "--source", str(src), "--app-id", f"src{self.hour}", "--time-field",
                    "ts", check=True)
        self.ids += n

    def run(self, sql: str, schema_change: str | None = None):
        (self.base / "q.sql").write_text(sql)
        extra = f'schema_change = "{schema_change}"\n' if schema_change else ""
        (self.base / "job.toml").write_text(table_job_text("schema", extra))
        p = invoke_trib("etl", "run", str(self.base / "job.toml"), "--schedule-time", _iso(T0 + self.hour * H),
                        "-q", "--json")
        if p.returncode == 0:
            self.hour += 1
        return p

    def recorded(self) -> dict[str, str]:
        from tributary_read.spark.write import table_columns

        return {n: t for n, t, _ in table_columns(Table.load(str(self.out)).log)}

    def read_back(self, spark) -> tuple[list, list]:
        """Every committed row, read with Spark and with pyarrow, as sorted (id, note-or-None) pairs."""
        import pyarrow.dataset as ds
        import pyarrow.parquet as pq

        out = Table.load(str(self.out))
        paths = sorted(str(self.out / p) for p in out.log.state().files)
        df = spark.read.option("mergeSchema", "true").parquet(*paths)
        cols = df.columns
        by_spark = sorted((r["id"], r["note"] if "note" in cols else None) for r in df.collect())
        schema = __import__("pyarrow").unify_schemas([pq.read_schema(p) for p in paths])
        t = ds.dataset(paths, schema=schema, format="parquet").to_table()
        notes = t.column("note").to_pylist() if "note" in t.column_names else [None] * t.num_rows
        by_arrow = sorted(zip(t.column("id").to_pylist(), notes))
        return by_spark, by_arrow


def test_a_breaking_schema_change_is_refused_before_writing_and_allowed_changes_read_back_whole(tmp_path, spark):
    j = _Job(tmp_path)
    j.arrive()
    p = j.run("SELECT id, ts, msg FROM raw")
    assert p.returncode == 0, p.stderr
    assert j.recorded() == {"id": "bigint", "ts": "bigint", "msg": "string"}  # the first commit records it

    # A nullable new column is taken; the rows written before read back with it null.
    j.arrive()
    p = j.run("SELECT id, ts, msg, CASE WHEN id % 2 = 0 THEN msg END AS note FROM raw")
    assert p.returncode == 0, p.stderr
    assert j.recorded() == {"id": "bigint", "ts": "bigint", "msg": "string", "note": "string"}
    want = sorted((i, f"m{i}" if i >= 4 and i % 2 == 0 else None) for i in range(8))
    by_spark, by_arrow = j.read_back(spark)
    assert by_spark == want and by_arrow == want

    # Breaking changes: refused with exit 3 before anything is written, naming the column and both types.
    j.arrive()
    before, version = _data_and_log(j.out), Table.load(str(j.out)).log.latest_version()
    refused = read_book(Table.load(str(j.out)), "schema")["counts"]["refused"]
    line = one_line_error(j.run("SELECT CAST(id AS STRING) AS id, ts, msg, CAST(NULL AS DECIMAL(10,2)) AS note "
                                "FROM raw"), 3, "'id'", "from bigint to string", "'note'",
                          "from string to decimal(10,2)", 'schema_change = "allow"')
    assert "nothing" in line or "before anything" in line
    one_line_error(j.run("SELECT id, ts, 'x' AS extra, msg, CAST(NULL AS STRING) AS note FROM raw"), 3,
                   "new column 'extra' (string) is not nullable")
    one_line_error(j.run("SELECT id, ts, msg FROM raw"), 3, "column 'note' (string) is dropped")
    assert _data_and_log(j.out) == before and Table.load(str(j.out)).log.latest_version() == version
    assert read_book(Table.load(str(j.out)), "schema")["counts"]["refused"] == refused + 3  # counted, not run

    # schema_change = "allow": a dropped column commits; the whole table still reads back (older files keep it).
    p = j.run("SELECT id, ts, msg FROM raw", schema_change="allow")
    assert p.returncode == 0, p.stderr
    assert j.recorded() == {"id": "bigint", "ts": "bigint", "msg": "string"}
    want = sorted((i, f"m{i}" if 4 <= i < 8 and i % 2 == 0 else None) for i in range(12))
    by_spark, by_arrow = j.read_back(spark)
    assert by_spark == want and by_arrow == want

    # An empty hour carries the recorded schema forward, so the next check still sees it.
    p = j.run("SELECT id, ts, msg FROM raw")
    assert p.returncode == 0 and json.loads(p.stdout)["output"]["files"] == 0, p.stderr
    assert j.recorded() == {"id": "bigint", "ts": "bigint", "msg": "string"}
    j.arrive()
    one_line_error(j.run("SELECT CAST(id AS STRING) AS id, ts, msg FROM raw"), 3, "from bigint to string")
    # ... and allowed, a changed type commits and becomes the recorded type.
    p = j.run("SELECT CAST(id AS STRING) AS id, ts, msg FROM raw", schema_change="allow")
    assert p.returncode == 0, p.stderr
    assert j.recorded()["id"] == "string"


@pytest.mark.unit
def test_schema_change_is_a_checked_output_key(tmp_path):
    from tributary_read.etl.job import Job

    base = {"job": {"name": "j", "sql": str(tmp_path / "q.sql")}, "inputs": [{"table": str(tmp_path), "view": "v"}],
            "output": {"table": str(tmp_path / "out"), "time_column": "ts"}}
    (tmp_path / "q.sql").write_text("SELECT 1")
    assert Job.from_dict(base).output.schema_change == "refuse"
    base["output"]["schema_change"] = "allow"
    assert Job.from_dict(base).output.schema_change == "allow"
    base["output"]["schema_change"] = "merge"
    with pytest.raises(Exception, match="output.schema_change 'merge': choose refuse or allow"):
        Job.from_dict(base)
