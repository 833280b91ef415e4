"""``trib doctor [--master M]``: run one tiny task on the executors and report their Python, pyarrow and trib."""

from __future__ import annotations

import click

from .context import TribState, emit, json_option, key_values, pass_state


@click.command("doctor")
@click.option("--master", envvar="TRIB_SPARK_MASTER",
              help="The Spark master to check (default: $TRIB_SPARK_MASTER, $SPARK_MASTER, local[*]).")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE",
              help="A Spark conf, as the job's [spark] conf gives it (repeatable): spark.pyspark.python=…")
@json_option
@pass_state
def doctor(state: TribState, master, conf, as_json) -> None:
    """Run one tiny task on a Spark master's executors: their Python, pyarrow and trib."""
    from tributary_read.spark.doctor import check
    from tributary_read.spark.session import sql_session

    settings = key_values(conf, "--conf", settings=True)
    settings.setdefault("spark.ui.enabled", "false")
    if not state.quiet:
        click.echo("trib: starting Spark and one task per executor core...", err=True)
    spark = sql_session(master, settings, "trib-doctor", udfs=False)
    try:
        report = check(spark)
    finally:
        spark.stop()

    def human() -> None:
        d = report["driver"]
        click.echo(f"master {report['master']}; executors run {report['executors_python']}")
        click.echo(f"driver   {d['host']}: Python {d['version']} ({d['python']}), pyarrow {d['pyarrow']}, "
                   f"trib {d['trib']}")
        for x in report["executors"]:
            click.echo(f"executor {x['host']}: Python {x['version']} ({x['python']}), pyarrow {x['pyarrow']}, "
                       f"trib {x['trib']} from {x['trib_from']}")
        click.echo("ok: the executors can run trib's tasks")

    emit(as_json, report, human)
