"""``trib ingest``: exactly-once append of a newline-delimited source."""

from __future__ import annotations

import os
import signal
import sys

import click

from tributary_read.hive.commit import committer_for
from tributary_read.write.ingest import Interrupted, OnBadRecord, TimeSpec, stop_on_signals
from tributary_read.write.ingest import ingest as run_ingest
from tributary_read.table.config import Protocol, RollPolicy, parse_size
from tributary_read.table.timeunit import IntegerTimes, TimeUnit

from .context import Duration, TribState, emit, json_option, pass_state

#: How an integer-time refusal names the settings here (see IntegerTimes.spelling).
FLAG_SPELLING = ("--time-unit {}", "--allow-any-time")


@click.command()
@click.argument("root")
@click.option("--source", required=True, type=click.Path(dir_okay=False), help="Newline-delimited input file.")
@click.option("--app-id", required=True, help="Identifies this pipeline's offsets in the log.")
@click.option("--source-name",
              help="Key of the source in the offsets (default: file base name). A different file "
                   "under a name already committed is refused (exit 3): give it a new name.")
@click.option("--time-field", help="JSON field (dotted path) holding the event time.")
@click.option("--time-regex", help="Regex whose first group (or group 'ts') is the event time.")
@click.option("--time-format",
              help="strptime pattern for the time (default: ISO-8601, or an integer of --time-unit).")
@click.option("--time-unit", type=click.Choice(TimeUnit.values()),
              help="Unit of integer times (epoch s, ms, us, ns). Default: ms, and an integer time that is not "
                   "plausible as ms stops the run (exit 3) naming the unit that fits.")
@click.option("--allow-any-time", is_flag=True,
              help="Accept integer times before 2000-01-01 or more than a day ahead (historical data); "
                   "needs --time-unit. Otherwise such a record is a bad record (--on-bad-record).")
@click.option("--commit-every", type=int, default=10_000, show_default=True, help="Records per commit.")
@click.option("--protocol", type=click.Choice(Protocol.values()), help="Override the table's commit protocol.")
@click.option("--on-bad-record", type=click.Choice(OnBadRecord.values()), default=OnBadRecord.DEAD_LETTER.value,
              show_default=True,
              help="Records that cannot be placed (not valid JSON, no usable time, a time out of range): "
                   "keep them in _tributary/dead_letter, or fail the run (exit 3).")
@click.option("--roll-size", help="Override the table's roll size.")
@click.option("--roll-records", type=int, help="Override the table's roll record count.")
@click.option("--roll-inactivity", type=Duration(), help="Override the table's roll inactivity.")
@click.option("--final", is_flag=True,
              help="The source is complete: also ingest a last line that has no trailing newline "
                   "(by default it is taken as still being written and left for the next run).")
@json_option
@pass_state
def ingest(state: TribState, root, source, app_id, source_name, time_field, time_regex, time_format,
           time_unit, allow_any_time, commit_every, protocol, on_bad_record, roll_size, roll_records,
           roll_inactivity, final, as_json) -> None:
    """Append SOURCE's uncommitted records to ROOT, exactly once per app id.

    Without --time-field/--time-regex records go to the partition of their arrival time.

    SIGINT/SIGTERM stop at the next record boundary: the records read so far are
    committed and the run exits 130/143. A second signal stops it at once. Either
    way no committed record is lost, and running again resumes.
    """
    with stop_on_signals(restore=False) as stop:
        try:
            integers = IntegerTimes(time_unit, allow_any_time, FLAG_SPELLING)
            spec = TimeSpec(time_field, time_regex, time_format, integers)
            _ingest(state, stop, root, source, app_id, source_name, spec,
                    commit_every, protocol, on_bad_record, roll_size, roll_records, roll_inactivity, as_json,
                    final=final)
        except Interrupted as e:
            click.echo(f"trib: stopped at once by a second {e.args[0]}; whatever was committed is kept, "
                       f"run again to resume", err=True)
            raise click.exceptions.Exit(128 + e.signum) from None


def _ingest(state: TribState, stop, root, source, app_id, source_name, spec: TimeSpec,
            commit_every, protocol, on_bad_record, roll_size, roll_records, roll_inactivity, as_json,
            final=False) -> None:
    t = state.table(root)
    base = t.config.roll
    roll = RollPolicy(
        parse_size(roll_size) if roll_size else base.max_bytes,
        roll_records if roll_records is not None else base.max_records,
        roll_inactivity / 1000 if roll_inactivity is not None else base.inactivity_s,
    )
    size = os.path.getsize(source) if os.path.isfile(source) else 0
    committer = committer_for(t)  # the table's partition-commit policy, if any
    kwargs = dict(time_spec=spec, commit_every=commit_every, protocol=protocol, roll=roll,
                  on_bad_record=on_bad_record, source_name=source_name, final=final,
                  on_commit=committer.on_commit if committer else None, stop=stop)
    try:
        if state.progress_enabled():
            with click.progressbar(length=size, label="ingest", file=sys.stderr) as bar:
                result = run_ingest(t, source, app_id, progress=bar.update, **kwargs)
        else:
            result = run_ingest(t, source, app_id, **kwargs)
    finally:
        committed = committer.close() if committer else None
    msg = (f"{result.records} records from {result.source} (offsets {result.start_offset}..{result.last_offset}) "
           f"in {result.commits} commits" + (f", {result.dead_letters} dead letters" if result.dead_letters else ""))
    if result.dead_letters and not as_json:
        click.echo(f"trib: warning: {result.dead_letters} records went to {t.uri}/_tributary/dead_letter", err=True)
    if result.partial_line_bytes:  # a note, not a warning: a live log's last line is often mid-write
        click.echo(f"trib: note: left the last {result.partial_line_bytes} bytes of {source}, a line without a "
                   f"newline yet, for the next run; pass --final if the producer is done", err=True)
    emit(as_json, {**result.to_json(), **({"partition_commit": committed} if committed else {})}, msg)
    if committer and committer.error:  # the records are committed; only the partition commit is behind
        raise type(committer.error)(f"records committed, but the partition commit failed: {committer.error}; "
                                    f"catch up with: trib partitions commit {root}")
    if result.stopped_by:
        click.echo(f"trib: interrupted by {result.stopped_by}: stopped after committing offsets up to "
                   f"{result.last_offset}; run again to resume", err=True)
        raise click.exceptions.Exit(128 + getattr(signal, result.stopped_by))
