"""Around the commit: the job's Hive table is there to mount the partitions in and matches them, or the run stops.

A run that committed and then found no Hive table would leave an hour committed but not mounted,
and a new user's first run ended exactly so. So a run with ``[hive]`` looks the table up before
anything is committed (:func:`before_commit`):

* it exists: its data columns are compared with the output's after this commit (the SQL's columns
  merged with the recorded ones, as the commit will record them); a difference is refused, exit 5,
  naming the column, both types and the statements that fix it: a Parquet file whose column type
  is not the table's fails every Hive query over it;
* it, or its database, is missing: without ``[hive] create = true``, or for a missing database, the
  run refuses, exit 3, with the statements to run. A missing database is never created: it is the
  warehouse's decision, and the refusal names its ``CREATE DATABASE`` line.

With ``create = true`` the table is created only after the commit (:func:`after_commit`), from the
columns the commit recorded: a run that fails on its input (a string time column, a bad row)
creates nothing, so its rerun never meets a table made from the SQL it had to fix. A rerun of a
committed hour, and a run that finds the table dropped since, make it the same way; a run that
created the table mounts every committed partition (a full sync), not only its own.

The table's definition has one owner, :func:`tributary_read.hive.ddl.definition_for`, which
``trib hive create-table`` calls too, and so has the comparison
(:meth:`~tributary_read.hive.ddl.TableDefinition.column_differences`): format, partition keys and
location come from the output table, columns from the SQL's output as the commit records them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tributary_read.errors import HiveTableConflictError, InvalidInputError
from tributary_read.etl.report import iso_z

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


def run_columns(run: _Run, filesets, empty: bool, sql_fallback: bool = True) -> list | None:
    """The output's columns once this run commits: the SQL's merged with the recorded ones, by the rule
    the commit applies (:func:`~tributary_read.io.parquet_schema.evolve_columns`); an empty hour writes
    no file, so the recorded ones (else, ``sql_fallback``, the SQL's over the inputs' schemas)."""
    from tributary_read.io.parquet_schema import evolve_columns
    from tributary_read.spark.write import table_columns

    recorded = table_columns(run.output.log)
    if empty:
        return recorded or (sql_columns(run, filesets) if sql_fallback else None)
    return evolve_columns(recorded, sql_columns(run, filesets, views_ready=True),
                          run.job.output.schema_change == "allow", f"the output {run.output.uri}")


def definition(run: _Run, columns) -> TableDefinition | None:
    """The Hive table for the job's output with ``columns`` (None: no columns known, no definition)."""
    if not columns:
        return None
    from tributary_read.hive.ddl import definition_for

    return definition_for(run.output, _name(run), columns)


def refusal(run: _Run, found: TableCheck, where: str, committed: str | None = None) -> InvalidInputError:
    """Exit 3: what is missing and the statements that make it (``committed``: what the run committed,
    else nothing was)."""
    stmts = [" ".join(s.split()) + ";" for s in found.statements()]
    h = run.job.hive
    if found.definition is None and found.table_exists is False:
        how = ("its columns cannot be known before a run with input files (or a schema for each input); "
               "create the table yourself")
        how = f"{stmts[0]} then {how}" if not found.database_exists else how
    else:
        how = " ".join(stmts)
    hint = "" if not found.database_exists or h.create else "; or set create = true in the job's [hive]"
    state = f"{committed}, not yet mounted" if committed else "nothing was committed"
    return InvalidInputError(f"Hive {found.missing} does not exist ({where}): {state}; "
                             f"create it: {how}{hint}" + ("; then rerun" if committed else ""))


#: Output formats whose files carry typed columns that Hive's SerDe for them reads by name: there a
#: column of another type fails every query (a CSV table reads every column as STRING, a text one
#: splits one line by the table's own columns: nothing to compare).
TYPED_FORMATS = ("parquet", "jsonl")


def _typed(run: _Run, found: TableCheck) -> bool:
    """Whether the table's columns must be the output's: a typed format, read by trib's SerDe for it (a
    table that reads the same JSON files as raw lines, say, is another view of them, not a mismatch)."""
    return (run.output.config.format in TYPED_FORMATS and found.found is not None and found.definition is not None
            and (found.found.serde or "").lower() == found.definition.serde.lower())


def conflict(run: _Run, found: TableCheck, where: str, committed: str | None = None) -> HiveTableConflictError:
    """Exit 5: the table's data columns are not the output's; names the first, both types and the fix."""
    from tributary_read.hive.sql import add_columns, drop_table, set_external

    diffs, name, defn = found.column_differences, found.name, found.definition
    assert defn is not None and diffs
    first = diffs[0].describe(name) + (f" (and {len(diffs) - 1} more difference(s))" if len(diffs) > 1 else "")
    state = f"{committed}, not yet mounted" if committed else "nothing was committed"
    added = [d.column for d in diffs if d.found is None and not d.moved]
    tail = [c for c, _ in defn.columns][len(defn.columns) - len(added):]
    if len(added) == len(diffs) and [c.lower() for c in tail] == added:  # new columns at the end only
        fix = f"add them: {add_columns(name.db, name.name, defn.columns[-len(added):])};"
    else:
        h = run.job.hive
        again = ("rerun: create = true makes it from the output's columns and mounts every committed partition"
                 if h.create else
                 f"trib hive create-table --job {run.job.path or 'JOB.toml'}, then "
                 f"trib partitions sync {run.output.uri} --hive-table {name} --metastore {h.metastore}")
        fix = f"recreate it: {drop_table(name.db, name.name)}; (an EXTERNAL table's files stay) then {again}"
        if found.external is False:
            fix = (f"it is not EXTERNAL, so dropping it would delete its files: {set_external(name.db, name.name)}; "
                   f"then {fix}")
    return HiveTableConflictError(f"{first} ({where}): {state}; {fix}")


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
        run.say(f"{run.job.name}: would create Hive table {found.name} after the commit: "
                f"{' '.join(found.statements()[-1:])}")
    for d in found.differences:
        run.say(f"{run.job.name}: Hive table {found.name} differs from the output: {d}")
    if found.column_differences and _typed(run, found):
        raise conflict(run, found, where)
    return found


def before_commit(run: _Run, filesets, empty: bool) -> TableCheck:
    """A real run, before its commit: the table exists and its columns are the output's, or it is missing
    and will be created after the commit (``create``), or the run refuses. Creates nothing."""
    from tributary_read.hive.ddl import check_table

    with _metastore(run) as ms:  # one lookup; the SQL is analysed with the connection closed
        where = ms.address
        found = check_table(ms, _name(run))
    if found.missing is not None:  # the definition too: a column with no Hive form stops the run here
        found = replace(found, definition=definition(run, run_columns(run, filesets, empty)))
        if not found.database_exists or not run.job.hive.create or found.definition is None:
            raise refusal(run, found, where)
        return found
    defn = definition(run, run_columns(run, filesets, empty, sql_fallback=False))
    if defn is None:  # nothing ever written, nothing to write: no column to compare
        return found
    found = found.compared(defn)
    if found.column_differences and _typed(run, found):
        raise conflict(run, found, where)
    return found


def after_commit(run: _Run, version: int, checked: TableCheck | None) -> bool:
    """After the commit (the run's own, or one a rerun found): the table is there and matches what the
    output's commits recorded, or is created now (``create``); else the refusal. True: it was created.

    ``checked``: the run's :func:`before_commit` found the table and its columns matched (no second lookup).
    """
    from tributary_read.hive.ddl import check_table
    from tributary_read.spark.write import table_columns

    if checked is not None and checked.missing is None:
        return False
    committed = f"the run of {iso_z(run.t)} is committed (version {version})"
    defn = definition(run, table_columns(run.output.log))
    with _metastore(run) as ms:
        where = ms.address
        found = check_table(ms, _name(run), defn)
        if found.missing is None:
            if found.column_differences and _typed(run, found):
                raise conflict(run, found, where, committed)
            return False
        if not found.database_exists or not run.job.hive.create or defn is None:
            raise refusal(run, found, where, committed)
        run.say(f"{run.job.name}: creating Hive table {found.name}")
        ms.create_table(defn)
    return True


def definition_from_sql(run: _Run, explicit: bool = False) -> TableDefinition:
    """The table for ``run``'s job (``trib hive create-table --job``): the columns the output's commits
    recorded (what its files hold: no input needed, as after a dropped table), else, before the first
    commit or for an ``explicit`` schedule time, the SQL analysed over the views of ``run``, a dry run."""
    from tributary_read.etl import resolve_step

    from tributary_read.spark.write import table_columns

    cols = table_columns(run.output.log) if not explicit else None
    cols = cols or sql_columns(run, resolve_step.resolve(run))
    if cols is None:
        raise InvalidInputError(f"{run.job.name}: no input files for the run of {iso_z(run.t)} and no schema for "
                                "each input, so the SQL's columns cannot be known: give the columns, or a "
                                "schedule time whose inputs have files")
    return definition(run, cols)
