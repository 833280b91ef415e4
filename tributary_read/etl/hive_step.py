"""Before the commit: the job's Hive table is there to mount the partitions in, or the run stops.

A run that committed and then found no Hive table would leave an hour committed but not mounted,
and a new user's first run ended exactly so. So a run with ``[hive]`` looks the table up before
anything is committed:

* it exists: the run goes on (a dry run also compares it with the table trib would create:
  columns, partition keys, format, location, and lists every difference);
* it, or its database, is missing: with ``[hive] create = true`` the run creates the table; else it
  refuses, exit 3, with the statements to run. A missing database is never created: it is the
  warehouse's decision, and the refusal names its ``CREATE DATABASE`` line.

The table's definition has one owner, :func:`tributary_read.hive.ddl.definition_for`, which
``trib hive create-table`` calls too: its format, partition keys and location come from the output
table, its columns from the SQL's output as the commit records them (the table's recorded columns
once a run committed, else the SQL analysed over the run's views, :func:`commit_step.query`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tributary_read.errors import InvalidInputError

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.etl.run import _Run
    from tributary_read.hive.ddl import TableCheck, TableDefinition


def _name(run: _Run):
    from tributary_read.hive.model import TableName

    return TableName.parse(run.job.hive.table)


def _metastore(run: _Run):
    from tributary_read.etl.commit_step import session
    from tributary_read.hive.metastore import open_metastore

    return open_metastore(run.job.hive.metastore_uri, spark=session(run) if run.job.catalog else None)


def sql_columns(run: _Run, filesets, views_ready: bool = False) -> list | None:
    """The SQL's output columns as the commit records them, or None when its views cannot be built
    (an input with no files this run and no ``schema``)."""
    from tributary_read.etl import commit_step
    from tributary_read.spark.write import spark_columns

    if not views_ready:
        if not all(fs.files or spec.schema is not None for spec, (fs, _) in zip(run.job.inputs, filesets)):
            return None
        commit_step.read(run, filesets, count=False)
    return spark_columns(commit_step.query(run))


def output_columns(run: _Run, filesets, views_ready: bool = False) -> list | None:
    """The output's columns: recorded by its commits, else the SQL's over this run's views."""
    from tributary_read.spark.write import table_columns

    return table_columns(run.output.log) or sql_columns(run, filesets, views_ready)


def definition(run: _Run, columns) -> TableDefinition | None:
    """The Hive table for the job's output with ``columns`` (None: no columns known, no definition)."""
    if not columns:
        return None
    from tributary_read.hive.ddl import definition_for

    return definition_for(run.output, _name(run), columns)


def refusal(run: _Run, found: TableCheck, where: str) -> InvalidInputError:
    """Exit 3, before anything is committed: what is missing and the statements that make it."""
    stmts = [" ".join(s.split()) + ";" for s in found.statements()]
    h = run.job.hive
    if found.definition is None and found.table_exists is False:
        how = ("its columns cannot be known before a run with input files (or a schema for each input); "
               "create the table yourself")
        how = f"{stmts[0]} then {how}" if not found.database_exists else how
    else:
        how = " ".join(stmts)
    hint = "" if not found.database_exists or h.create else "; or set create = true in the job's [hive]"
    return InvalidInputError(f"Hive {found.missing} does not exist ({where}): nothing was committed; "
                             f"create it: {how}{hint}")


def check(run: _Run, filesets) -> TableCheck:
    """A dry run: the table, its database and how it differs; raises the refusal a real run would."""
    from tributary_read.hive.ddl import check_table

    defn = definition(run, output_columns(run, filesets))
    with _metastore(run) as ms:
        found = check_table(ms, _name(run), defn)
        where = ms.address
    if found.missing is not None and (not found.database_exists or not run.job.hive.create):
        raise refusal(run, found, where)
    if found.missing is not None:
        run.say(f"{run.job.name}: would create Hive table {found.name}: {' '.join(found.statements()[-1:])}")
    for d in found.differences:
        run.say(f"{run.job.name}: Hive table {found.name} differs from the output: {d}")
    return found


def ensure(run: _Run, filesets, views_ready: bool) -> TableCheck | None:
    """A real run, before its commit: the table exists, or is created (``create``), or the run refuses."""
    from tributary_read.hive.ddl import check_table

    with _metastore(run) as ms:
        found = check_table(ms, _name(run))
        if found.missing is None:
            return None
        found = replace(found, definition=definition(run, output_columns(run, filesets, views_ready)))
        if not found.database_exists or not run.job.hive.create or found.definition is None:
            raise refusal(run, found, ms.address)
        run.say(f"{run.job.name}: creating Hive table {found.name}")
        ms.create_table(found.definition)
    return found


def definition_from_sql(run: _Run) -> TableDefinition:
    """The table from the SQL analysed over the views of ``run``, a dry run (``trib hive create-table``)."""
    from tributary_read.etl import resolve_step

    cols = sql_columns(run, resolve_step.resolve(run))
    if cols is None:
        from tributary_read.etl.report import iso_z

        raise InvalidInputError(f"{run.job.name}: no input files for the run of {iso_z(run.t)} and no schema for "
                                "each input, so the SQL's columns cannot be known: give the columns, or a "
                                "schedule time whose inputs have files")
    return definition(run, cols)
