"""``trib ingest``: exactly-once append of a newline-delimited source."""

from __future__ import annotations

import os
import signal
import sys

import click

from tributary_read.write.ingest import FROM_TABLE, Interrupted, OnBadRecord, TimeSpec, stop_on_signals
from tributary_read.write.ingest import ingest as run_ingest
from tributary_read.write.ingest_lineage import IngestLineage
from tributary_read.table.config import Protocol, RollPolicy, parse_fraction, parse_size
from tributary_read.table.timeunit import IntegerTimes, TimeUnit

from .context import Duration, TribState, emit, json_option, pass_state
from .lineage_hooks import chain, enabled, warn
from .kafka_ingest import file_only_kafka_flags, follow_options, kafka_only_file_flags, kafka_options, run_kafka
from .ingest_common import committer as table_committer, dead_letters_warning, given, mirror as table_mirror, mirrored
from .spool_ingest import run_spool, spool_given, spool_options

#: How an integer-time refusal names the settings here (see IntegerTimes.spelling).
FLAG_SPELLING = ("--time-unit {}", "--allow-any-time")


def time_options(f):
    """The options that say where a record's time comes from (ingest and dead-letter replay)."""
    for opt in reversed([
        click.option("--time-field", help="JSON field (dotted path) holding the event time."),
        click.option("--time-regex", help="Regex whose first group (or group 'ts') is the event time."),
        click.option("--arrival-time", is_flag=True,
                     help="File each record under the time it is ingested (a live feed). One of --time-field, "
                          "--time-regex and --arrival-time is required."),
        click.option("--time-format",
                     help="strptime pattern for the time (default: ISO-8601, or an integer of --time-unit)."),
        click.option("--time-unit", type=click.Choice(TimeUnit.values()),
                     help="Unit of integer times (epoch s, ms, us, ns). Default: ms, and an integer time that is "
                          "not plausible as ms stops the run (exit 3) naming the unit that fits."),
        click.option("--allow-any-time", is_flag=True,
                     help="Accept integer times before 2000-01-01 or more than a day ahead (historical data); "
                          "needs --time-unit. Otherwise such a record is a bad record (--on-bad-record)."),
    ]):
        f = opt(f)
    return f


def write_options(f):
    """How records are written and what happens to bad ones (ingest and dead-letter replay)."""
    for opt in reversed([
        click.option("--commit-every", type=int, default=10_000, show_default=True, help="Records per commit."),
        click.option("--protocol", type=click.Choice(Protocol.values()), help="Override the table's commit protocol."),
        click.option("--on-bad-record", type=click.Choice(OnBadRecord.values()),
                     help="Records that cannot be placed (not valid JSON, no usable time, a time out of range). "
                          "Default: keep them in _tributary/dead_letter, but fail the run (exit 3, that batch "
                          "uncommitted) when over --max-bad-fraction. 'dead-letter' given explicitly (without "
                          "--max-bad-fraction): keep every one, no limit. 'fail': fail at the first (exit 3)."),
        click.option("--max-bad-fraction",
                     help="Fail the run (exit 3) before a commit once more than 10 and more than this share of "
                          "its records are bad (0.01 or 1%; default: the table's setting, 1%; 0: none may be bad). "
                          "A run where every record is bad always fails."),
        click.option("--roll-size", help="Override the table's roll size."),
        click.option("--roll-records", type=int, help="Override the table's roll record count."),
        click.option("--roll-inactivity", type=Duration(), help="Override the table's roll inactivity."),
    ]):
        f = opt(f)
    return f


def time_spec(time_field, time_regex, arrival_time, time_format, time_unit, allow_any_time) -> TimeSpec:
    integers = IntegerTimes(time_unit, allow_any_time, FLAG_SPELLING)
    spec = TimeSpec(time_field, time_regex, time_format, integers, arrival=arrival_time)
    spec.check()  # before the table is opened: a missing time source is the caller's first thing to fix
    return spec


def bad_record_policy(on_bad_record, max_bad_fraction):
    """(policy, limit) from the two flags: the default is the table's limit; an explicit
    ``--on-bad-record dead-letter`` without ``--max-bad-fraction`` is the opt-out (no limit)."""
    if max_bad_fraction is not None:
        if on_bad_record == OnBadRecord.FAIL.value:
            raise click.UsageError("--max-bad-fraction limits dead letters; --on-bad-record fail keeps none")
        return OnBadRecord.DEAD_LETTER, parse_fraction(max_bad_fraction, "--max-bad-fraction")
    if on_bad_record is None:
        return OnBadRecord.DEAD_LETTER, FROM_TABLE
    return OnBadRecord.parse(on_bad_record, "on_bad_record"), None


def roll_policy(t, roll_size, roll_records, roll_inactivity) -> RollPolicy:
    base = t.config.roll
    return RollPolicy(
        parse_size(roll_size) if roll_size else base.max_bytes,
        roll_records if roll_records is not None else base.max_records,
        roll_inactivity / 1000 if roll_inactivity is not None else base.inactivity_s,
    )


@click.command()
@click.argument("root")
@click.option("--source", type=click.Path(dir_okay=False),
              help="Newline-delimited input file (or --kafka for Kafka topics).")
@click.option("--app-id", required=True, help="Identifies this pipeline's offsets in the log.")
@click.option("--source-name",
              help="Key of the source in the offsets (default: file base name). A different file "
                   "under a name already committed is refused (exit 3): give it a new name.")
@time_options
@write_options
@click.option("--final", is_flag=True,
              help="The source is complete now: also ingest a last line that has no trailing newline.")
@click.option("--final-after", type=Duration(),
              help="Take a last line without a newline once the file has not changed for this long "
                   "(default: the table's setting, 5m). Until then it is left for the next run "
                   "(pending_bytes in --json), as a line still being written.")
@spool_options
@follow_options
@kafka_options
@json_option
@pass_state
def ingest(state: TribState, root, source, app_id, source_name, time_field, time_regex, arrival_time,
           time_format, time_unit, allow_any_time, commit_every, protocol, on_bad_record, max_bad_fraction,
           roll_size, roll_records, roll_inactivity, final, final_after, follow, commit_interval, as_json,
           source_dir, pattern, exclude, close_inactive, on_complete, allow_lost, **kafka) -> None:
    """Append a file's, a log directory's or Kafka topics' new records to ROOT, exactly once.

    The source is a file (--source), a directory of rotating log files (--source-dir) or Kafka
    topics (--kafka); its position is kept per app id in the table's own commits.

    Each record's time comes from --time-field or --time-regex; --arrival-time
    files records under the time they are ingested, and must be said.

    SIGINT/SIGTERM stop at the next record boundary: the records read so far are
    committed and the run exits 130/143. A second signal stops it at once. Either
    way no committed record is lost, and running again resumes.
    """
    spool = dict(source_dir=source_dir, pattern=pattern, exclude=exclude, close_inactive=close_inactive,
                 on_complete=on_complete, allow_lost=allow_lost)
    if sum(x is not None for x in (source, source_dir, kafka["kafka"])) != 1:
        raise click.UsageError("give one of --source FILE, --source-dir DIR or --kafka HOST:PORT (with --topic)")
    if source_dir is None and spool_given(spool):
        raise click.UsageError(f"{', '.join(spool_given(spool))} apply to --source-dir")
    if kafka["kafka"] is None:
        file_only_kafka_flags(kafka)
    if source is not None and (follow or given(["commit_interval"])):
        raise click.UsageError("--follow and --commit-interval apply to --kafka and --source-dir; a --source file "
                               "is read to its end")
    if source is None:
        kafka_only_file_flags(source_name if kafka["kafka"] else None, final, final_after,
                              "--kafka" if kafka["kafka"] else "--source-dir")
    with stop_on_signals(restore=False) as stop:
        try:
            if source_dir is not None:
                spec = time_spec(time_field, time_regex, arrival_time, time_format, time_unit, allow_any_time)
                policy, limit = bad_record_policy(on_bad_record, max_bad_fraction)
                return run_spool(state, stop, root, app_id, spool, follow, commit_interval, spec, commit_every,
                                 protocol, policy, limit, lambda t: roll_policy(t, roll_size, roll_records,
                                                                                roll_inactivity),
                                 source_name, as_json)
            if kafka["kafka"] is not None:
                times = (time_field, time_regex, arrival_time, time_format, time_unit, allow_any_time)
                if kafka["time_source"] == "kafka" and any(times):
                    raise click.UsageError("--time-source kafka takes the record timestamp: drop the other "
                                           "time options")
                spec = None if kafka["time_source"] == "kafka" else time_spec(*times)
                policy, limit = bad_record_policy(on_bad_record, max_bad_fraction)
                return run_kafka(state, stop, root, app_id, kafka, follow, commit_interval, spec, commit_every, protocol, policy, limit,
                                 lambda t: roll_policy(t, roll_size, roll_records, roll_inactivity), as_json)
            spec = time_spec(time_field, time_regex, arrival_time, time_format, time_unit, allow_any_time)
            policy, limit = bad_record_policy(on_bad_record, max_bad_fraction)
            _ingest(state, stop, root, source, app_id, source_name, spec,
                    commit_every, protocol, policy, limit, roll_size, roll_records, roll_inactivity, as_json,
                    final=final, final_after=final_after)
        except Interrupted as e:
            click.echo(f"trib: stopped at once by a second {e.args[0]}; whatever was committed is kept, "
                       f"run again to resume", err=True)
            raise click.exceptions.Exit(128 + e.signum) from None


def _ingest(state: TribState, stop, root, source, app_id, source_name, spec: TimeSpec,
            commit_every, protocol, on_bad_record, max_bad_fraction, roll_size, roll_records, roll_inactivity,
            as_json, final=False, final_after=None) -> None:
    t = state.table(root)
    roll = roll_policy(t, roll_size, roll_records, roll_inactivity)
    size = os.path.getsize(source) if os.path.isfile(source) else 0
    committer = table_committer(t)
    mirror = table_mirror(t)
    lineage = _lineage(t, app_id, source, committer)
    kwargs = dict(time_spec=spec, commit_every=commit_every, protocol=protocol, roll=roll,
                  on_bad_record=on_bad_record, max_bad_fraction=max_bad_fraction, source_name=source_name,
                  final=final, final_after_ms=final_after,
                  on_commit=chain(lineage and lineage.on_commit, committer and committer.on_commit,
                                  mirror and mirror.on_commit), stop=stop,
                  on_start=lineage and lineage.on_start)
    try:
        if state.progress_enabled():
            with click.progressbar(length=size, label="ingest", file=sys.stderr) as bar:
                result = run_ingest(t, source, app_id, progress=bar.update, **kwargs)
        else:
            result = run_ingest(t, source, app_id, **kwargs)
    except BaseException as e:
        if lineage:
            lineage.failed(e)
        raise
    finally:
        committed = committer.close() if committer else None
    if lineage:
        lineage.finished(result)
    stop.finished = True  # the run is over: a second signal now must not add a second, contradicting line
    msg = (f"{result.records} records from {result.source} (offsets {result.start_offset}..{result.last_offset}) "
           f"in {result.commits} commits" + (f", {result.dead_letters} dead letters" if result.dead_letters else ""))
    dead_letters_warning(t, root, as_json, result)
    if result.pending_bytes:  # a note, not a warning: a live log's last line is often mid-write
        click.echo(f"trib: note: left the last {result.pending_bytes} bytes of {source}, a line without a "
                   f"newline, for a later run: the file changed less than --final-after ago (taken from "
                   f"{result.pending_until} if it stays unchanged; --final takes it now)", err=True)
    if result.took_unterminated_line and not final:
        click.echo(f"trib: note: took the last line of {source}, which has no newline, as complete: the file "
                   f"was unchanged for --final-after", err=True)
    emit(as_json, {**result.to_json(), **({"partition_commit": committed} if committed else {}),
                   **mirrored(mirror)}, msg)
    if committer and committer.error:  # the records are committed; only the partition commit is behind
        raise type(committer.error)(f"records committed, but the partition commit failed: {committer.error}; "
                                    f"catch up with: trib partitions commit {root}")
    if mirror is not None:  # the records are committed; only the Iceberg mirror is behind
        mirror.raise_error()
    if result.stopped_by:
        click.echo(f"trib: interrupted by {result.stopped_by}: stopped after committing offsets up to "
                   f"{result.last_offset}; run again to resume", err=True)
        raise click.exceptions.Exit(128 + getattr(signal, result.stopped_by))


def _lineage(t, app_id, source, committer) -> IngestLineage | None:
    """The run's OpenLineage events (None: no transport configured), after sending what earlier runs left."""
    lineage = enabled(IngestLineage(t, app_id, source, warn), committer)
    if lineage:
        lineage.recover()
    return lineage
