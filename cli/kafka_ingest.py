"""``trib ingest ROOT --kafka HOST:PORT --topic T``: Kafka topics into a table, exactly once (docs/kafka.md)."""

from __future__ import annotations

import click

from .context import Duration, TribState
from .ingest_common import committer as table_committer, finish, given, mirror as table_mirror
from .lineage_hooks import chain, enabled, warn

START_HELP = ("Where a partition the table has never seen starts: earliest (default), latest, or an ISO-8601 "
              "instant with an offset (the first record at or after it). Recorded in its first commit. A "
              "partition added to the topic after the app's first run starts at earliest.")


def kafka_options(f):
    for opt in reversed([
        click.option("--kafka", envvar="TRIB_KAFKA", metavar="HOST:PORT",
                     help="Read Kafka topics from this broker (bootstrap servers) instead of --source."),
        click.option("--topic", "topics", multiple=True, help="A topic to read (repeatable)."),
        click.option("--kafka-option", "kafka_option", multiple=True, metavar="KEY=VALUE",
                     help="A librdkafka client setting (SASL, TLS, fetch sizes; repeatable); over trib.toml's [kafka]."),
        click.option("--start", default="earliest", show_default=True, help=START_HELP),
        click.option("--time-source", type=click.Choice(["value", "kafka"]), default="value", show_default=True,
                     help="kafka: the event time is the record's Kafka timestamp (no --time-field needed)."),
        click.option("--partitions", help="Read only these partitions of each topic (0,1,2)."),
        click.option("--worker", metavar="i/N", help="Read every N-th partition from the i-th: a deterministic split "
                                                     "of the topics' partitions over N workers."),
        click.option("--kafka-columns", help="Add record metadata as columns: key,topic,partition,offset,timestamp,"
                                             "headers (as kafka_key, …; jsonl and parquet tables)."),
        click.option("--broker-timeout", type=Duration(), default="2m", show_default=True,
                     help="How long the broker may not answer before the run stops (exit 7); the client "
                          "reconnects meanwhile, and what was read is committed."),
        click.option("--on-gap", type=click.Choice(["fail", "skip"]), default="fail", show_default=True,
                     help="Offsets the topic's retention deleted before they were read: stop (exit 13, naming "
                          "them), or skip them and record how many in the commit."),
    ]):
        f = opt(f)
    return f


def follow_options(f):
    """Continuous reading: the same for Kafka topics and spool directories (write.pacing)."""
    for opt in reversed([
        click.option("--follow", is_flag=True,
                     help="With --kafka or --source-dir: keep reading until SIGTERM/SIGINT (then one last commit, "
                          "exit 0); default: read to the ends found at the start, commit, exit."),
        click.option("--commit-interval", type=Duration(), default="60s", show_default=True,
                     help="With --follow: commit at least this often (or every --commit-every records)."),
    ]):
        f = opt(f)
    return f


def kafka_only_file_flags(source_name, final, final_after, other: str = "--kafka") -> None:
    used = [n for n, v in (("--source-name", source_name), ("--final", final), ("--final-after", final_after)) if v]
    if used:
        raise click.UsageError(f"{', '.join(used)} apply to --source files, not to {other}")


def file_only_kafka_flags(kafka: dict) -> None:
    """Refuse the Kafka flags a --source run was given (click knows which were given, defaults aside)."""
    used = given(k for k in kafka if k != "kafka")
    if used:
        raise click.UsageError(f"{', '.join(sorted(used))} apply to --kafka only")


def run_kafka(state: TribState, stop, root, app_id, kafka: dict, follow: bool, commit_interval_ms: int, spec,
              commit_every, protocol, on_bad_record, max_bad_fraction, roll_for, as_json) -> None:
    from tributary_read.kafka.client import parse_options
    from tributary_read.kafka.ingest import KafkaSource, ingest_kafka
    from tributary_read.kafka.records import parse_columns
    from tributary_read.kafka.lineage import KafkaLineage
    from tributary_read.kafka.offsets import added_note, parse_partitions, parse_worker

    if not kafka["topics"]:
        raise click.UsageError("--kafka needs at least one --topic")
    source = KafkaSource(
        kafka["kafka"], tuple(dict.fromkeys(kafka["topics"])),
        {**state.config.get("kafka", {}), **parse_options(kafka["kafka_option"])},
        kafka["start"],
        tuple(parse_partitions(kafka["partitions"])) if kafka["partitions"] else None,
        parse_worker(kafka["worker"]) if kafka["worker"] else None,
        kafka["broker_timeout"] / 1000)
    columns = parse_columns(kafka["kafka_columns"])
    t = state.table(root)
    committer = table_committer(t)
    mirror = table_mirror(t, follow)
    lineage = enabled(KafkaLineage(t, app_id, source.bootstrap, source.topics, warn, follow=follow),
                      committer)

    def note(line: str) -> None:
        if not state.quiet:
            click.echo(f"trib: {line}", err=True)

    try:
        result = ingest_kafka(
            t, source, app_id, time_spec=spec, follow=follow, commit_every=commit_every,
            commit_interval_s=commit_interval_ms / 1000, columns=columns, on_gap=kafka["on_gap"],
            protocol=protocol, roll=roll_for(t), on_bad_record=on_bad_record, max_bad_fraction=max_bad_fraction,
            on_commit=chain(lineage and lineage.on_commit, committer and committer.on_commit,
                            mirror and mirror.on_commit),
            stop=stop, progress=note if follow else None, on_start=lineage and lineage.on_start)
    except BaseException as e:
        if lineage:
            lineage.failed(e)
        raise
    finally:
        committed = committer.close() if committer else None
    if lineage:
        lineage.finished(result)
    stop.finished = True  # the run is over: a second signal now must not add a second, contradicting line
    extra = [f"{result.tombstones} tombstones skipped"] if result.tombstones else []
    if result.dead_letters:
        extra.append(f"{result.dead_letters} dead letters")
    if result.skipped:
        extra.append("skipped " + ", ".join(f"{n} offsets of {tp}" for tp, n in result.skipped.items()))
    msg = (f"{result.records} records from {', '.join(result.topics)} in {result.commits} commits"
           + (f" ({'; '.join(extra)})" if extra else "") + "; next offsets "
           + ", ".join(f"{tp}@{p['next']}" for tp, p in result.partitions.items()))
    if result.added_partitions and not follow:  # a follow run said so when it found them
        click.echo(f"trib: note: {added_note(result.added_partitions, '--start')}", err=True)
    if result.skipped and not as_json:
        click.echo("trib: warning: skipped " + ", ".join(f"{n} offsets of {tp}" for tp, n in result.skipped.items())
                   + ": the topic's retention deleted them before they were read; the commit records how many",
                   err=True)
    finish(t, root, as_json, result, msg, committer, committed, follow, "records", mirror)
