"""Steps 2 and 3, read + commit: the inputs as views, the SQL, and the run's one commit.

An hour with input and an empty hour take the same commit path
(:func:`~tributary_read.spark.write.commit_files`, on top of the log version
at which the run found its transaction not committed), so a concurrent copy
that commits first is found by the commit itself and comes back as
``already_committed``, whatever the storage: the run then goes on with that
commit, exactly like a rerun.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tributary_read.errors import InvalidInputError, StorageError, TributaryError, UnreadableInputError
from tributary_read.etl.report import iso_z
from tributary_read.etl.restated import recorded
from tributary_read.etl.remote import url_params
from tributary_read.faults import crash_point

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.etl.run import _Run
    from tributary_read.spark.write import WriteResult
    from tributary_read.table.manifest import Transaction


def session(run: _Run):
    """The run's SparkSession: the one given, else one built from the job's ``[spark]`` on first use: a
    Spark Connect session when the job or the environment names a server (:mod:`tributary_read.etl.remote`)."""
    if run.spark is None:
        from tributary_read.etl.remote import check
        from tributary_read.spark.session import connect_session, sql_session

        # a dry run starts Spark only for what its checks need, and says so
        why = " to analyse the SQL's output columns for the Hive table check" if run.dry_run else ""
        url = check(run.job)
        if url is not None:
            from tributary_read.secret import redacted_url

            run.say(f"{run.job.name}: connecting to the Spark Connect server {redacted_url(url)}{why}")
            run.spark = connect_session(url, run.job.spark.conf, f"trib-etl-{run.job.name}",
                                        session_id=_kept_session_id(run, url),
                                        views=[spec.view for spec in run.job.inputs])  # read() defines them
            if run.lock is not None:
                run.lock.set_note(SESSION_NOTE, f"{_server_key(url)} {run.spark.session_id}")
            return run.spark  # the server's log, not this console, has its tasks' traces
        run.say(f"{run.job.name}: starting Spark ({run.job.spark.master or 'from the environment'}){why}")
        run.spark = sql_session(run.job.spark.master, run.job.spark.conf, f"trib-etl-{run.job.name}",
                                catalog=run.job.catalog, udfs=False)
        if not run.verbose:  # a planned file that cannot be read ends in one line (unreadable), not a JVM trace
            from tributary_read.spark.session import quiet_task_failures

            quiet_task_failures(run.spark)
    return run.spark


#: The job lock's note of the job's kept Spark Connect session: "SERVER_KEY SESSION_ID".
SESSION_NOTE = "spark_connect_session"


def _server_key(url: str) -> str:
    """The server URL as the note keeps it: a digest, since the URL may carry a token."""
    import hashlib

    return hashlib.sha256(url.encode()).hexdigest()[:16]


def _kept_session_id(run: _Run, url: str) -> str | None:
    """The session a run of this job keeps on the server at ``url``: the last run's, else a new one.

    Only a run that holds the job's lock keeps one (no two clients ever share it); a dry run, which may
    watch a run in progress, and a URL that names its own session take a session of their own.
    """
    import uuid

    if run.lock is None or "session_id" in url_params(url):
        return None
    server, _, last = (run.lock.note(SESSION_NOTE) or "").partition(" ")
    return last if server == _server_key(url) and last else str(uuid.uuid4())


def read(run: _Run, filesets, count: bool | str = True) -> list[int | None]:
    """Register each input as its view; returns the records per input (None: not counted; ``count``
    False: none is, the views are for the query's columns only; ``"with-write"``: an input to count
    is counted by the write's own Spark job (:func:`commit`, ``run.count_frames``), not by one of its own).

    A planned file that is gone or unreadable is :class:`UnreadableInputError` (exit 7), naming it
    and the ways forward (:func:`unreadable`), here and in :func:`commit`, where Spark reads lazily.
    """
    spark = session(run)
    try:
        return _read(run, spark, filesets, count)
    except Exception as e:  # noqa: BLE001 - Spark's own errors: only a planned file's becomes exit 7
        if isinstance(e, TributaryError) and not isinstance(e, StorageError):
            raise
        raise unreadable(run, filesets, e) or e


def _read(run: _Run, spark, filesets, count: bool | str = True) -> list[int | None]:
    from tributary_read.etl import lineage_step
    from tributary_read.spark.read import read_files
    from tributary_read.spark.write import spark_columns

    counts = []
    for spec, (fs, _plan), rep in zip(run.job.inputs, filesets, run.inputs):
        run.say(f"{run.job.name}: input {spec.view}: {len(fs.files)} files, {fs.bytes} bytes")
        kw: dict[str, Any] = {}
        if spec.schema is not None:
            kw["schema"] = spec.schema
        if spec.hive_table is not None:
            kw["hive_table"] = spec.hive_table
            if run.job.hive is not None:
                kw["metastore"] = run.job.hive.metastore
        options = dict(spec.read_options)
        if spec.format is not None:
            options["format"] = spec.format
        if options:
            kw["options"] = options
        try:
            df = read_files(spark, fs, **kw)
        except InvalidInputError as e:
            i = run.job.inputs.index(spec)
            hint = f" (give inputs[{i}].schema in the job file)" if not fs.files and spec.schema is None else ""
            raise InvalidInputError(f"input {spec.view}: {e}{hint}") from None
        df.createOrReplaceTempView(spec.view)
        if lineage_step.enabled(run):  # only lineage's events name them (a schema round trip on Spark Connect)
            run.input_columns[spec.view] = spark_columns(df)
        n = rep.records
        if n is None and run.job.count_inputs and count == "with-write":
            run.count_frames.append((len(counts), df))
        elif n is None and run.job.count_inputs and count:
            n = df.count()
        counts.append(n)
    return counts


def commit(run: _Run, txn: Transaction, base_version: int, empty: bool, filesets=()) -> WriteResult:
    """Run the SQL and commit its rows (``empty``: commit no files, no Spark), on top of ``base_version``."""
    from tributary_read.spark.write import commit_files, write

    if empty:
        crash_point("etl.before_commit")
        result = commit_files(run.output.log, [], txn, base_version=base_version)
    else:
        df = query(run)
        crash_point("etl.before_commit")
        run.say(f"{run.job.name}: running the SQL and committing to {run.output.uri}")
        try:
            result = write(df, run.output, time_column=run.job.output.time_column, transaction=txn,
                           time_unit=run.job.output.times, base_version=base_version,
                           schema_change=run.job.output.schema_change,
                           count=[frame for _, frame in run.count_frames],
                           restate=run.recompute.partitions if run.recompute is not None else None,
                           restate_causes=recorded(run),
                           restate_by=str(run.job.output.restate_by) if run.job.output.restate_by else None)
        except Exception as e:  # noqa: BLE001 - Spark's own errors: only a planned file's becomes exit 7
            if isinstance(e, TributaryError) and not isinstance(e, StorageError):
                raise
            raise unreadable(run, filesets, e) or read_failure(run, e) or e
    if result.already_committed:
        run.say(f"{run.job.name}: another run committed {iso_z(run.t)} first (version {result.version}); "
                "its commit stands" + ("" if empty else ", this copy's files are orphans for `trib clean`"))
    return result


def query(run: _Run):
    """The job's SQL over the registered views, analysed (its columns known), not run: the one place it is
    planned, once per run (the Hive check before the commit and the commit share it)."""
    if run.query_df is not None:
        return run.query_df
    spark = session(run)
    from pyspark.errors import AnalysisException

    if not run.verbose:  # an error in the SQL is one line below, not also pyspark's JSON record of it
        from tributary_read.spark.script import quiet_statement_logs

        quiet_statement_logs()
    try:
        run.query_df = spark.sql(run.job.sql)
        return run.query_df
    except AnalysisException as e:  # a parse error too: the SQL file is the input to fix
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        # ... unless analysis read a file to infer its schema (json.`path`) and could not.
        raise read_failure(run, e) or InvalidInputError(f"{run.job.sql_path}: {first}") from None


_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z_]+(?:\.[A-Z_]+)?)\]")
_CAUSE = re.compile(r"(?:Caused by: )?((?:java|org|com)\.[\w.$]+(?:Exception|Error)): ([^\n]{0,160})")


def unreadable(run: _Run, filesets, e: BaseException) -> UnreadableInputError | None:
    """The one line for a Spark failure that a planned input file caused (gone, truncated, corrupt), or None.

    Spark names the file in its message (``[PATH_NOT_FOUND]``, ``[FAILED_READ_FILE]``); without
    this a consumer's plan stays pending and every rerun fails with a JVM stack trace and exit 1,
    naming no way forward. The line names the file, whether it is missing, and both ways forward.
    """
    from tributary_read.etl.spec import InputMode

    text = str(e)
    for spec, (fs, plan) in zip(run.job.inputs, filesets):
        if not fs.files:
            continue
        hits = [f for f in fs.files if f.path in text]
        src = spec.source()
        if hits:
            hit = max(hits, key=lambda f: len(f.path))  # a.jsonl.gz, not a.jsonl
        elif "PATH_NOT_FOUND" in text or "FileNotFound" in text:
            hit = next((f for f in fs.files if not src.storage.exists(f.path)), None)
            if hit is None:
                continue
        else:
            continue
        if not src.storage.exists(hit.path):
            how = "is missing"
        else:
            cls = _ERROR_CLASS.search(text)
            causes = _CAUSE.findall(text)
            why = ", ".join(x for x in (cls.group(1) if cls else None,
                                         f"{causes[-1][0].rsplit('.', 1)[-1]}: {causes[-1][1].strip()}"
                                         if causes else None) if x)
            how = f"cannot be read ({why or type(e).__name__})"
        if spec.mode is InputMode.CONSUMER and plan is not None:
            from tributary_read.read.consumer import Consumer

            c = Consumer(src, spec.consumer, spec.state_dir, spec.storage_options)
            return UnreadableInputError(
                f"input {spec.view}: planned file {hit.path} {how}; plan {plan.plan_id} of consumer "
                f"{spec.consumer} stays pending, so every run reads it again: restore the file and rerun, or leave "
                f"it unread: {c.skip_command(hit.path)} (or drop the whole plan: "
                f"{c.reset_command('discard-plan')})")
        return UnreadableInputError(f"input {spec.view}: file {hit.path} of {fs.root} {how}; restore it and rerun "
                                    "(the rerun resolves its window again)")
    return None


#: Spark's error classes for a file it could not read (Spark 4: docs/sql-error-conditions).
_READ_CLASSES = ("FAILED_READ_FILE", "PATH_NOT_FOUND", "CANNOT_READ_FILE_FOOTER", "FILE_NOT_EXIST")
_READ_PATH = re.compile(r"(?:reading file|Path does not exist:|File does not exist:?|footer for file:?)\s+(\S+?)\.?(?:\s|$)")


def read_failure(run: _Run, e: BaseException) -> UnreadableInputError | None:
    """The one line for a file the job's SQL reads itself (a lookup, another table) and Spark cannot.

    Not the user's SQL to fix (exit 3) nor trib's fault (exit 1): the data needs restoring, and a
    rerun then reads it, like any unreadable input (exit 7).
    """
    text = _with_causes(e)
    cls = next((m for m in _ERROR_CLASS.finditer(text) if m.group(1).split(".")[0] in _READ_CLASSES), None)
    if cls is None:
        return None
    path = _READ_PATH.search(text)
    causes = _CAUSE.findall(text)
    why = cls.group(1) + (f", {causes[-1][0].rsplit('.', 1)[-1]}: {causes[-1][1].strip()}" if causes else "")
    return UnreadableInputError(f"{run.job.sql_path}: Spark cannot read {path.group(1) if path else 'an input'} "
                                f"({why}), which no input of the job planned; restore or fix it and rerun")


def _with_causes(e: BaseException) -> str:
    """The message and those of its JVM causes: an AnalysisException hides the read error in its cause."""
    parts = [str(e)]
    java = getattr(e, "_origin", None) or getattr(e, "java_exception", None)
    try:
        cause = java.getCause() if java is not None else None
        for _ in range(8):
            if cause is None:
                break
            parts.append(str(cause.toString()))
            cause = cause.getCause()
    except Exception:  # noqa: BLE001 - a gone JVM: the message alone
        pass
    return "\n".join(parts)

