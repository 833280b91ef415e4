"""The application ``trib etl submit`` hands to spark-submit: ``driver.py JOB.toml --schedule-time T``.

A plain script, because spark-submit runs a file, not a module. It runs the
job on the session spark-submit configured and prints the run's JSON report on
stdout (alone: spark-submit merges the driver's stderr into its stdout, so
progress lines are opt-in); a failure prints one ``trib: error:`` line and exits
with trib's exit code for its class, so a scheduler watching spark-submit sees
the same codes as with ``trib etl run``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _find(path: str) -> str:
    """The job or SQL file: as given, else where spark-submit's ``--files`` put it (cluster mode)."""
    if os.path.exists(path):
        return path
    try:
        from pyspark import SparkFiles

        shipped = SparkFiles.get(os.path.basename(path))
        if os.path.exists(shipped):
            return shipped
    except Exception:  # noqa: BLE001 - no SparkContext yet, or no such file: report the path as given
        pass
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tributary_read.etl.driver")
    parser.add_argument("job")
    parser.add_argument("--schedule-time", required=True)
    parser.add_argument("--sql", help="the SQL file (cluster mode: its shipped name)")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--progress", action="store_true",
                        help="progress lines (spark-submit merges them into stdout, before the JSON)")
    args = parser.parse_args(argv)
    from tributary_read.exits import exit_line, raise_on_sigterm

    import signal

    # A scheduler's or YARN's kill ends the driver with one line and 143, as it ends `trib etl run`.
    previous = raise_on_sigterm()
    try:
        return _run(args)
    except BaseException as e:  # noqa: BLE001 - Terminated and Ctrl-C too: every end is one line
        from tributary_read.errors import TributaryError

        if isinstance(e, Exception) and not isinstance(e, TributaryError):
            import traceback

            traceback.print_exc()  # a driver log has no -v: the trace goes before the line
        line, code = exit_line(e)
        if line:
            print(line, file=sys.stderr, flush=True)
        return code
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args) -> int:
    from dataclasses import replace

    from tributary_read.errors import TributaryError
    from tributary_read.etl.job import Job, _Parser
    from tributary_read.etl.run import run_job
    from tributary_read.spark.session import sql_session
    from tributary_read.table.config import load_config

    progress = (lambda m: print(f"trib etl: {m}", file=sys.stderr, flush=True)) if args.progress else None
    job = None
    try:
        job = Job.load(_find(args.job), load_config(None))
    except TributaryError:
        if os.path.exists(args.job):
            raise
    if progress:
        progress("starting Spark")
    spark = sql_session(None, job.spark.conf if job else None, f"trib-etl-{job.name if job else 'job'}",
                        catalog=job.catalog if job else None, udfs=False)
    if job is None:  # shipped with --files: visible once the SparkContext exists
        job = Job.load(_find(args.job), load_config(None))
    if args.sql:
        path, text = _Parser(job.path, {}).sql(_find(args.sql))
        job = replace(job, sql_path=path, sql=text)
    from tributary_read.errors import PartitionsHeldError

    try:
        report = run_job(job, args.schedule_time, spark=spark, dry_run=args.dry_run, progress=progress)
    except PartitionsHeldError as e:  # committed and acked without the held partitions: the report, then exit 17
        print(json.dumps(e.report.to_json(), indent=2, default=str), flush=True)
        raise
    print(json.dumps(report.to_json(), indent=2, default=str))
    report.raise_error()  # the report first, then the mirror's exit 8 (its line names the catch-up)
    return 0


if __name__ == "__main__":
    sys.exit(main())
