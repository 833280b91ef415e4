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
    from dataclasses import replace

    from tributary_read.errors import TributaryError
    from tributary_read.etl.job import Job, _Parser
    from tributary_read.etl.run import run_job
    from tributary_read.spark.session import spark_session
    from tributary_read.table.config import load_config

    try:
        spark = None
        job = None
        try:
            job = Job.load(_find(args.job), load_config(None))
        except TributaryError:
            if os.path.exists(args.job):
                raise
        hive = job is not None and job.hive is not None and job.hive.metastore.split("?", 1)[0].lower() == "spark"
        spark = spark_session(None, job.spark.conf if job else None, f"trib-etl-{job.name if job else 'job'}",
                              hive=hive)
        if job is None:  # shipped with --files: visible once the SparkContext exists
            job = Job.load(_find(args.job), load_config(None))
        if args.sql:
            path, text = _Parser(job.path, {}).sql(_find(args.sql))
            job = replace(job, sql_path=path, sql=text)
        progress = (lambda m: print(f"trib etl: {m}", file=sys.stderr, flush=True)) if args.progress else None
        report = run_job(job, args.schedule_time, spark=spark, dry_run=args.dry_run, progress=progress)
    except TributaryError as e:
        print(f"trib: error: {' '.join(str(e).split())}", file=sys.stderr)
        return e.exit_code
    print(json.dumps(report.to_json(), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
