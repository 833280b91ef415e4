"""Every partition SQL template, rendered, through real parsers and a real HiveServer2.

Parsers: Spark 4's (``sessionState.sqlParser``) and Hive 2.3's own
(``org.apache.hadoop.hive.ql.parse.ParseDriver``, in the pyspark wheel's hive-exec
jar). ``SET`` is not SQL to Hive: its command processor handles it before the
parser, so those templates are parsed by Spark and executed on HS2 instead.
"""

from __future__ import annotations

import uuid

import pytest

from conftest import hs2_connect
from tributary_read.hive.dialect import DIALECTS
from tributary_read.hive.sql import METASTORE_DIR, load_template, render, render_spec, sql_string

pytestmark = pytest.mark.integration

#: template -> whether Hive's parser sees it (False: a Hive processor command)
TEMPLATES = {
    "add_partitions": True, "drop_partitions": True, "set_location": True, "show_partitions": True,
    "describe_table": True, "describe_partition": True, "analyze_partition": True,
    "analyze_partition_noscan": True, "msck_repair": True, "probe_engine": False, "set_conf": False,
    "create_table": True,
}
ITEMS = ["add_partitions.item", "drop_partitions.item"]
HOSTILE_LOCATION = "file:///tmp/it's; `a` \\ dir"


def _rendered(table="`db`.`t`", location="file:///tmp/x/2024_01_01/00") -> dict[str, str]:
    spec = render_spec(["dt"], {"dt": "2024010100"})
    spec2 = render_spec(["dt"], {"dt": "2024010101"})
    loc = sql_string(location)
    return {
        "add_partitions": render("add_partitions", table=table, items=" ".join(
            render("add_partitions.item", spec=s, location=loc) for s in (spec, spec2))),
        "drop_partitions": render("drop_partitions", table=table, items=", ".join(
            render("drop_partitions.item", spec=s) for s in (spec, spec2))),
        "set_location": render("set_location", table=table, spec=spec, location=loc),
        "show_partitions": render("show_partitions", table=table),
        "describe_table": render("describe_table", table=table),
        "describe_partition": render("describe_partition", table=table, spec=spec),
        "analyze_partition": render("analyze_partition", table=table, spec=spec),
        "analyze_partition_noscan": render("analyze_partition_noscan", table=table, spec=spec),
        "msck_repair": render("msck_repair", table=table),
        "probe_engine": render("probe_engine"),
        "set_conf": render("set_conf", key=DIALECTS["spark"].batch_conf, value="1000"),
        "create_table": _create_table_ddl(table, location),
    }


def _create_table_ddl(table: str, location: str) -> str:
    from tributary_read.hive.ddl import TableDefinition
    from tributary_read.hive.model import TableName

    db, name = (p.strip("`") for p in table.split("."))
    return TableDefinition(TableName(db, name), (("a", "STRING"), ("b", "DECIMAL(10,2)")), ("dt",),
                           location, "text", "\t").ddl()


def test_every_template_is_known_and_rendered():
    files = {p.name[:-4] for p in METASTORE_DIR.glob("*.sql")}
    assert set(TEMPLATES) | set(ITEMS) <= files
    assert set(_rendered()) == set(TEMPLATES)
    for d in DIALECTS.values():
        assert d.refresh in TEMPLATES or d.name == "metastore"  # the Thrift API runs no SQL
    for name in TEMPLATES:
        assert "--" not in load_template(name) and load_template(name).strip()


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_spark_parses(spark, name):
    parser = spark._jsparkSession.sessionState().sqlParser()
    plan = parser.parsePlan(_rendered()[name])
    assert plan is not None


@pytest.mark.parametrize("name", sorted(n for n, hive in TEMPLATES.items() if hive))
def test_hive_parses(spark, name):
    driver = spark._jvm.org.apache.hadoop.hive.ql.parse.ParseDriver()
    ast = driver.parse(_rendered()[name])
    assert ast.dump().strip()


def test_quoting_survives_both_parsers(spark):
    """A location full of quotes, a backslash, a semicolon, backticks: one statement, one exact string."""
    sql = _rendered(location=HOSTILE_LOCATION)["set_location"]
    plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(sql)
    assert plan.getClass().getSimpleName() == "SetTableLocation"
    assert plan.location() == HOSTILE_LOCATION
    jvm = spark._jvm.org.apache.hadoop.hive.ql.parse
    literals = [t for t in _texts(jvm.ParseDriver().parse(sql)) if t and t.startswith("'")]
    assert sorted(jvm.BaseSemanticAnalyzer.unescapeSQLString(t) for t in literals) == ["2024010100", HOSTILE_LOCATION]


def _texts(node) -> list[str]:
    out = [node.getText()]
    for i in range(node.getChildCount()):
        out += _texts(node.getChild(i))
    return out


def test_every_template_runs_on_hiveserver2(hive_services, tmp_path):
    conn = hs2_connect(hive_services)
    cur = conn.cursor()
    table = f"`default`.`tpl_{uuid.uuid4().hex[:8]}`"
    (tmp_path / "dt=2024010102").mkdir()
    (tmp_path / "dt=2024010102" / "a.txt").write_text("x\n")
    cur.execute(f"CREATE EXTERNAL TABLE {table} (line STRING) PARTITIONED BY (dt STRING) "
                f"LOCATION 'file://{tmp_path}'")
    try:
        sql = _rendered(table, f"file://{tmp_path}/2024_01_01/00")
        for name in ["describe_table", "set_conf", "probe_engine", "add_partitions", "show_partitions",
                     "describe_partition", "set_location", "analyze_partition", "analyze_partition_noscan",
                     "drop_partitions", "msck_repair"]:
            cur.execute(sql[name])
            if cur.description:
                cur.fetchall()
        cur.execute(render("show_partitions", table=table))
        assert cur.fetchall() == [("dt=2024010102",)]  # MSCK found the key=value directory
    finally:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        conn.close()
