"""Issue 33, item 6: `trib sql` prints every row of the last statement unless --limit is given.

It printed at most 1,000 rows by default with exit 0, so a script capturing stdout lost the
rest; spark-sql, ``hive -e`` and beeline print every row. The rows stream a partition at a
time (``toLocalIterator``), so printing them all never holds the whole result in the driver.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import invoke_trib, run_trib
from helpers import one_line_error

pytestmark = pytest.mark.integration

N = 2_500  # past the old default of 1,000, over several partitions
QUERY = f"SELECT id, concat('row-', id) AS name FROM range(0, {N}, 1, 7) ORDER BY id"


def _script(tmp_path, text: str):
    p = tmp_path / "q.sql"
    p.write_text(text)
    return str(p)


def _lines(p) -> list[str]:
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_every_row_is_printed_when_stdout_is_captured(spark, tmp_path):
    script = _script(tmp_path, f"SET spark.sql.shuffle.partitions=5;\n{QUERY};\n")
    p = invoke_trib("-q", "sql", "-f", script)
    lines = _lines(p)
    assert lines[0] == "id\tname"
    assert lines[1:] == [f"{i}\trow-{i}" for i in range(N)]  # all of them, in the query's order
    assert p.stderr == ""  # no truncation note: nothing was left out
    doc = json.loads(invoke_trib("-q", "sql", "-f", script, "--json", check=True).stdout)
    assert doc["columns"] == ["id", "name"] and "truncated" not in doc
    assert doc["rows"] == [[i, f"row-{i}"] for i in range(N)]


def test_limit_stays_explicit_and_says_what_it_left_out(spark, tmp_path):
    script = _script(tmp_path, f"{QUERY};\n")
    p = invoke_trib("-q", "sql", "-f", script, "--limit", "1000")
    assert _lines(p)[1:] == [f"{i}\trow-{i}" for i in range(1000)]
    assert p.stderr.strip() == "trib: printed the first 1000 rows (--limit 1000); more exist"
    doc = json.loads(invoke_trib("-q", "sql", "-f", script, "--limit", "1000", "--json", check=True).stdout)
    assert len(doc["rows"]) == 1000 and doc["truncated"] is True
    exact = json.loads(invoke_trib("-q", "sql", "-f", script, "--limit", str(N), "--json", check=True).stdout)
    assert len(exact["rows"]) == N and "truncated" not in exact  # nothing more existed
    none = json.loads(invoke_trib("-q", "sql", "-f", script, "--limit", "0", "--json", check=True).stdout)
    assert none["rows"] == [] and none["truncated"] is True


def test_an_empty_result_and_a_command_last(spark, tmp_path):
    empty = json.loads(invoke_trib("-q", "sql", "-f", _script(tmp_path, "SELECT 1 AS x WHERE false;\n"), "--json",
                                   check=True).stdout)
    assert empty == {"columns": ["x"], "rows": []}
    p = invoke_trib("-q", "sql", "-f", _script(tmp_path, "SELECT 1 AS x WHERE false;\n"))
    assert _lines(p) == ["x"]
    p = invoke_trib("-q", "sql", "-f", _script(tmp_path, "SET trib.test.k=v;\n"))
    assert _lines(p) == ["key\tvalue", "trib.test.k\tv"]


def test_a_failure_at_once_prints_nothing_and_a_later_one_exits_non_zero(spark, tmp_path):
    """The first partition is fetched before the header; a later failure ends the rows with exit 3."""
    early = invoke_trib("-q", "sql", "-f", _script(tmp_path, "SELECT assert_true(id > 5) FROM range(0, 10, 1, 1);\n"))
    one_line_error(early, 3, "statement 1 (line 1) failed")
    assert early.stdout == ""
    late = invoke_trib("-q", "sql", "-f", _script(
        tmp_path, f"SELECT id, assert_true(id < 2000) AS ok FROM range(0, {N}, 1, 5) ORDER BY id;\n"))
    one_line_error(late, 3, "statement 1 (line 1) failed")
    printed = late.stdout.splitlines()
    assert printed[0] == "id\tok" and printed[1:] == [f"{i}\tNULL" for i in range(len(printed) - 1)]
    assert len(printed) - 1 < N  # never a complete-looking result with exit 0


def test_every_row_without_the_whole_result_in_the_driver(tmp_path):
    """A result larger than spark.driver.maxResultSize, in partitions smaller than it: collect() fails
    ("Total size of serialized results ... is bigger than spark.driver.maxResultSize"); trib sql prints it all."""
    n = 200_000
    script = _script(tmp_path, f"SELECT id, sha2(CAST(id AS STRING), 256) AS h FROM range(0, {n}, 1, 50);\n")
    p = run_trib("-q", "sql", "-f", script, "--conf", "spark.driver.maxResultSize=1m",
                 "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
                 env={"SPARK_LOCAL_IP": "127.0.0.1"}, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert lines[0] == "id\th" and len(lines) == n + 1
    assert sorted(int(line.split("\t")[0]) for line in lines[1:]) == list(range(n))
    assert sum(len(line) + 1 for line in lines) > 10 * 1024 * 1024  # 10x the driver's result limit


def test_the_embedded_metastore_stays_out_of_the_working_directory(tmp_path):
    """Without --metastore, Hive's defaults would leave derby.log, metastore_db/ and spark-warehouse/
    in the cwd; trib keeps them under $XDG_STATE_HOME/trib/spark-catalog and says so."""
    work, state = tmp_path / "work", tmp_path / "state"
    work.mkdir()
    script = _script(tmp_path, "CREATE TABLE t (a INT) USING parquet;\nINSERT INTO t VALUES (1), (2);\n"
                               "SELECT COUNT(*) AS n FROM t;\n")
    p = run_trib("sql", "-f", script, "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
                 env={"SPARK_LOCAL_IP": "127.0.0.1", "XDG_STATE_HOME": str(state)}, cwd=work)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == ["n", "2"]
    assert sorted(os.listdir(work)) == []
    home = state / "trib" / "spark-catalog"
    assert f"embedded metastore and warehouse in {home}" in p.stderr
    assert (home / "metastore_db").is_dir() and (home / "derby.log").is_file() and (home / "warehouse").is_dir()
