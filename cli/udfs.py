"""``trib udfs jar|spark-args|register``: trib's JVM library (docs/udfs.md)."""

from __future__ import annotations

import click

from tributary_read.errors import InvalidInputError

from .context import emit, json_option, metastore_option


@click.group()
def udfs() -> None:
    """The hive_udfs jar: seed 002's mtime-window path filter and trib's Hive UDFs."""


@udfs.command()
@json_option
def jar(as_json) -> None:
    """Build the jar if needed (javac, against the pyspark wheel's jars) and print its path."""
    from tributary_read.hive_udfs import registry as lib

    path = lib.jar_path()
    emit(as_json, {"jar": str(path), "path_filter": lib.PATH_FILTER_CLASS,
                   "extensions": lib.EXTENSIONS_CLASS, "functions": dict(lib.FUNCTIONS),
                   "properties": list(lib.PROPERTIES)}, str(path))


@udfs.command("spark-args")
@json_option
def spark_args(as_json) -> None:
    """Print the spark-sql / spark-submit arguments that enable the mtime window and trib's functions."""
    from tributary_read.hive_udfs import registry as lib

    args = lib.spark_args()
    emit(as_json, {"args": args}, lib.shell_line(args))


@udfs.command()
@metastore_option(accepts=("hs2",), note="Creates PERMANENT functions there (replacing trib's own); without it, "
                  "prints the CREATE TEMPORARY FUNCTION statements for a session.",
                  refusals={"thrift": "functions are registered with SQL, which a metastore does not run",
                            "spark": "a session's functions come from trib udfs spark-args"})
@click.option("--database", default="default", show_default=True,
              help="Database of the permanent functions.")
@json_option
def register(metastore, database, as_json) -> None:
    """Register trib's functions: permanently through HiveServer2, or print a session's statements."""
    from tributary_read.hive_udfs import registry as lib

    if not metastore:
        statements = lib.register_sql()
        emit(as_json, {"statements": statements, "executed": False},
             lambda: click.echo(";\n".join(statements) + ";"))
        return
    from tributary_read.hive.metastore import open_metastore
    from tributary_read.hive.sql import drop_function
    from tributary_read.hive.uri import MetastoreKind, MetastoreURI

    uri = MetastoreURI.parse(metastore)
    if uri.kind is not MetastoreKind.HS2:
        raise InvalidInputError(f"trib udfs register needs a HiveServer2 (hs2://HOST:PORT), not {metastore}")
    statements = lib.register_sql(database)
    with open_metastore(uri) as ms:
        for name, stmt in zip(lib.FUNCTIONS, statements):
            ms.execute(drop_function(name, database))  # idempotent: ours replace ours
            ms.execute(stmt)
    emit(as_json, {"statements": statements, "executed": True, "metastore": metastore},
         f"registered {len(statements)} functions in {database} through {metastore}")


COMMANDS = [udfs]
