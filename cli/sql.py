"""``trib sql -f SCRIPT``: a Hive SQL script on Spark with trib's mtime window and UDFs (docs/sql.md)."""

from __future__ import annotations

import click

from tributary_read.errors import InvalidInputError
from tributary_read.read.window import WindowForm

from .context import Duration, TribState, json_option, key_values, metastore_option, pass_state



@click.command("sql")
@click.option("-f", "--file", "script", required=True, type=click.File("r", encoding="utf-8"),
              help="The script (Hive SQL; statements end with ';'). '-' reads stdin.")
@click.option("--schedule-time", help="Define the window of the run scheduled at this time (ISO-8601 or "
              "epoch ms): ${window_start_ms}, ${window_end_ms}, ${window_start}, ${window_end}, "
              "${window_dt}, ${schedule_time_ms}.")
@click.option("--period", type=Duration(), default="1h", show_default=True, help="The window's period.")
@click.option("--lag", type=Duration(), default="0s", show_default=True,
              help="The window ends by the schedule time's period start minus this.")
@click.option("--window-form", type=click.Choice(WindowForm.values()), default=WindowForm.ALIGNED.value,
              show_default=True, help="aligned: the last whole --period ending by T - lag; "
                                      "sliding: [T - lag - window, T - lag) (docs/reading.md).")
@click.option("--window", "window_length", type=Duration(), help="The sliding form's length (default: --period).")
@click.option("--timezone", default="UTC", show_default=True, help="Zone of the period boundaries and ${window_dt}.")
@click.option("--var", "var", multiple=True, metavar="NAME=VALUE", help="Define ${NAME} (repeatable).")
@metastore_option(accepts=("thrift", "spark"), note="Default: spark, the session's own catalog.",
                  refusals={"hs2": "HiveServer2 cannot host a Spark session: use beeline there"})
@click.option("--database", help="USE this database first (unqualified names resolve there).")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="A Spark conf (repeatable).")
@click.option("--limit", type=click.IntRange(min=0),
              help="Print at most this many rows of the last statement (JSON says truncated). Default: every "
                   "row, fetched a partition at a time, as spark-sql and beeline print them.")
@json_option
@pass_state
def sql(state: TribState, script, schedule_time, period, lag, window_form, window_length, timezone, var, metastore, database, conf, limit,
        as_json) -> None:
    """Run a Hive SQL script on Spark, with the mtime-window filter and trib's UDFs in place."""
    from tributary_read.spark.script import run_script, split_statements, substitute, window_variables

    statements = split_statements(script.read())  # bad input fails before Spark starts
    variables = {}
    if schedule_time is not None:
        variables.update(window_variables(schedule_time, period, lag, timezone, window_form, window_length))
    variables.update(key_values(var, "--var", "NAME"))
    for stmt in statements:  # an undefined ${var} is bad input: name it before Spark starts
        substitute(stmt, variables)
    from tributary_read.hive.uri import MetastoreURI
    from tributary_read.spark.session import sql_session

    catalog = MetastoreURI.parse(metastore or "spark")
    catalog.catalog_conf()  # HiveServer2 is refused before Spark starts
    spark_conf = key_values(conf, "--conf", settings=True)
    if not state.quiet:
        n = len(statements)
        click.echo(f"trib: starting Spark for {n} statement{'s' if n != 1 else ''}...", err=True)
        from tributary_read.spark.session import embedded_catalog_conf, embedded_catalog_dir

        if embedded_catalog_conf({**catalog.catalog_conf(), **spark_conf}):
            click.echo(f"trib: catalog: the embedded metastore and warehouse in {embedded_catalog_dir()} "
                       "(--metastore thrift://HOST:PORT for a shared one)", err=True)
    spark = sql_session(None, spark_conf, "trib-sql", catalog=catalog)
    if not state.verbose:  # -v keeps pyspark's own report of a failed statement, with its stack
        from tributary_read.spark.script import quiet_statement_logs

        quiet_statement_logs()
    if database:
        from tributary_read.spark.script import error_line

        try:
            spark.catalog.setCurrentDatabase(database)
        except Exception as e:  # noqa: BLE001 - Spark's AnalysisException, one line
            raise InvalidInputError(f"--database {database}: {error_line(e)}") from e

    def progress(stmt) -> None:
        if not state.quiet:
            click.echo(f"trib: statement {stmt.number} (line {stmt.line})", err=True)

    result = run_script(spark, statements, variables, limit=limit, progress=progress)
    out = click.get_text_stream("stdout")
    if as_json:
        _print_json(out, result)
    else:
        if result.columns:
            out.write("\t".join(result.columns) + "\n")
        for row in result.rows:
            out.write("\t".join("NULL" if v is None else str(v) for v in row) + "\n")
    out.flush()
    if result.truncated and not as_json:
        click.echo(f"trib: printed the first {limit} rows (--limit {limit}); more exist", err=True)


def _print_json(out, result) -> None:
    """``{"columns": [...], "rows": [...]}`` written row by row: every row without holding them all at once."""
    import json

    def dump(v) -> str:
        return json.dumps(v, default=str)

    out.write('{\n  "columns": ' + dump(result.columns) + ',\n  "rows": [')
    sep = "\n    "
    try:
        for row in result.rows:  # fetched as it goes: a failure can come mid-document
            out.write(sep + dump(row))
            sep = ",\n    "
    except BaseException:
        out.write("\n")  # the failure's error object (TribGroup.main) is a line of its own
        raise
    out.write("\n  ]" if sep != "\n    " else "]")
    out.write(',\n  "truncated": true\n}\n' if result.truncated else "\n}\n")


COMMANDS = [sql]
