"""``trib etl stream JOB.toml``: a job file's SQL over a streaming input, exactly once per micro-batch.

The job's ``[stream]`` is read with Spark's own streaming sources (files, rate,
Kafka where the cluster has the connector) as the SQL's view; the query's rows go
through :class:`~tributary_read.spark.stream.StreamSink`, which commits each
micro-batch with the transaction ``(stream:JOB, batch id)`` and skips the batch
Spark runs again after a crash. ``[hive]`` mounts each commit's partitions as
``trib etl run``'s sync does (the same function); without it the output table's
own partition-commit policy applies (``trib partitions commit --policy``).

A first SIGINT or SIGTERM stops the query between two batches (never inside
one's commit) and the run reports and exits 0; Spark's checkpoint then holds
where the next start goes on. docs/streaming.md has the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from tributary_read.errors import InvalidInputError
from tributary_read.etl.job import Job
from tributary_read.etl.spec import StreamSource, StreamSpec

#: How often the driver looks at the query (stop requests, progress) while it runs.
POLL_S = 0.5


@dataclass(frozen=True)
class StreamReport:
    job: str
    query: str  # the app id in the output's log: stream:JOB
    query_id: str | None  # Spark's id of the query: the checkpoint's
    batches: int  # committed by this run
    skipped: tuple[int, ...]  # batches found already committed (Spark's re-run after a crash)
    records: int
    version: int | None  # the output's version after this run's last commit
    stopped_by: str | None
    checkpoint: str
    #: what the output's Iceberg mirror did after the last commit (iceberg.auto.Mirrored), if it has one
    iceberg: Any = None

    def to_json(self) -> dict:
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items() if k != "iceberg"}
        if self.iceberg is not None:
            d["iceberg"] = self.iceberg.to_json()
        return d

    def raise_error(self) -> None:
        """End the run with the mirror's failure (exit 8, the catch-up command), once the report is printed."""
        if self.iceberg is not None:
            self.iceberg.raise_error()


def stream_job(job: Job, *, spark=None, trigger_ms: int | None = None, available_now: bool | None = None,
               restart: bool = False, stop=None, progress: Callable[[str], None] | None = None,
               warn: Callable[[str], None] | None = None) -> StreamReport:
    """Run ``job``'s streaming query until its input is drained (available-now) or ``stop`` is set.

    ``trigger_ms`` / ``available_now`` override the job's ``[stream] trigger``. ``restart``: accept a
    checkpoint other than the one the table's last batch came from (a lost checkpoint; see
    docs/streaming.md: the source must start where that batch ended). ``stop``: a StopRequest
    (:func:`tributary_read.write.ingest.stop_on_signals`). ``warn``: told when the output's Iceberg mirror
    starts failing (default: ``progress``); the query goes on, and the report's ``iceberg`` says how it ended.
    """
    job.needs("stream")
    spec = job.stream
    assert spec is not None
    say = progress or (lambda _msg: None)
    spark = spark or session(job, say)
    from tributary_read.spark.stream import StreamSink

    start = _restart_offsets(job) if restart and spec.source is StreamSource.KAFKA else None
    if start is not None:
        say(f"{job.name}: a new checkpoint: Kafka starts where the table's last batch ended ({start})")
    reader(spark, spec, start).createOrReplaceTempView(spec.view)
    rows = spark.sql(job.sql)
    if not rows.isStreaming:
        raise InvalidInputError(f"{job.sql_path}: the SQL does not read the stream (view {spec.view}): a streaming "
                                "job's SQL selects from its [stream] view")
    sink = StreamSink(job.output.root, job.name, job.output.time_column, job.output.storage_options,
                      job.output.times, restart, _mount(job, spark) if job.hive is not None else None,
                      spec.checkpoint, warn or say)
    writer = rows.writeStream.foreachBatch(sink).option("checkpointLocation", spec.checkpoint).queryName(job.name)
    now = spec.available_now if available_now is None else available_now
    every = trigger_ms if trigger_ms is not None else spec.trigger_ms
    if now:
        writer = writer.trigger(availableNow=True)
    elif every:
        writer = writer.trigger(processingTime=f"{every} milliseconds")
    q = writer.start()
    say(f"{job.name}: streaming query {q.id} started ({'available-now' if now else f'trigger {every} ms'}); "
        f"checkpoint {spec.checkpoint}")
    stopped_by = _run(q, sink, stop, say)
    return StreamReport(job.name, sink.app_id, str(q.id), sink.batches, tuple(sink.skipped), sink.records,
                        sink.version, stopped_by, spec.checkpoint, sink.mirror.last if sink.mirror else None)


#: The logger of the streaming query's thread, which logs a failed batch's whole stack ("terminated with error").
QUERY_LOGGER = "org.apache.spark.sql.execution.streaming"


def session(job: Job, say: Callable[[str], None] | None = None, *, quiet_failures: bool = False):
    """The job's SparkSession, from its ``[spark]`` (built before the signal handlers: pyspark installs its own).

    ``quiet_failures`` (``trib etl stream`` without ``-v``): a failed batch ends the run in one line, so
    the stacks Spark logs of it (the failed task's, pyspark's record of the SQL error, the query's
    own) stay off the console, as ``trib etl run`` keeps them off its."""
    from tributary_read.spark.session import quiet_task_failures, sql_session

    if say is not None:
        say(f"{job.name}: starting Spark ({job.spark.master or 'from the environment'})")
    spark = sql_session(job.spark.master, job.spark.conf, f"trib-stream-{job.name}", catalog=job.catalog,
                        udfs=False)
    if quiet_failures:
        from tributary_read.spark.script import quiet_statement_logs

        quiet_task_failures(spark, (QUERY_LOGGER,))
        quiet_statement_logs()
    return spark


def _run(q, sink, stop, say) -> str | None:
    """Wait for the query; on a stop request, stop it between two batches. Raises the query's failure."""
    import signal

    seen = 0
    while q.isActive:
        if stop is not None and stop.signum is not None:
            while sink.busy:  # the batch in flight commits (or not) whole; Spark reruns it if not
                time.sleep(0.05)
            q.stop()
            break
        try:
            q.awaitTermination(POLL_S)
        except Exception:  # noqa: BLE001 - the query failed: its exception is read below, as trib raised it
            break
        if sink.batches != seen:
            seen = sink.batches
            say(f"{sink.query}: {sink.batches} batches, {sink.records} records committed (version {sink.version})")
    error = q.exception()
    if error is not None:
        from tributary_read.spark.stream import query_failure

        raise query_failure(sink, error)
    return signal.Signals(stop.signum).name if stop is not None and stop.signum is not None else None


def _restart_offsets(job: Job) -> str | None:
    """Where the Kafka source ends in the table's last batch of this job (None: no batch, or not recorded)."""
    from tributary_read.spark.stream import SOURCE_OFFSETS, stream_app_id
    from tributary_read.table.config import Table

    app = Table.load(job.output.root, job.output.storage_options).log.state().apps.get(stream_app_id(job.name))
    ends = (app.transaction.meta or {}).get(SOURCE_OFFSETS) if app is not None else None
    return ends[0] if isinstance(ends, list) and ends and isinstance(ends[0], str) else None


def reader(spark, spec: StreamSpec, starting_offsets: str | None = None):
    """The streaming DataFrame ``[stream]`` describes; ``starting_offsets``: a Kafka start (a new checkpoint's),
    unless the job's options name one."""
    r = spark.readStream
    if spec.source is StreamSource.FILES:
        r = r.format(spec.format).schema(spec.schema)
        if spec.max_files_per_trigger is not None:
            r = r.option("maxFilesPerTrigger", spec.max_files_per_trigger)
        return r.options(**spec.read_options).load(spec.path)
    if spec.source is StreamSource.RATE:
        return r.format("rate").options(**spec.read_options).load()
    options = dict(spec.read_options)
    if starting_offsets is not None:
        options.setdefault("startingOffsets", starting_offsets)
    return r.format("kafka").options(**options).load()


def _mount(job: Job, spark):
    """Each commit's partitions into the job's ``[hive]`` table, by the sync step's own function."""
    from tributary_read.etl.sync_step import mount_commit_of

    def mount(table, commit) -> None:
        mount_commit_of(job, table, commit, spark if job.catalog else None)

    return mount
