"""``trib dead-letters``: see the records ingest could not place, and replay them exactly once."""

from __future__ import annotations

import click

from tributary_read.hive.commit import committer_for
from tributary_read.write.dead_letters import REPLAY_APP, list_dead_letters
from tributary_read.write.dead_letters import replay as run_replay
from tributary_read.write.ingest import Interrupted, stop_on_signals

from .context import TribState, echo_capped, emit, json_option, pass_state
from .ingest import bad_record_policy, roll_policy, time_options, time_spec, write_options


@click.group("dead-letters")
def dead_letters() -> None:
    """List the records ingest could not place, and replay them exactly once."""


@dead_letters.command("list")
@click.argument("root")
@json_option
@pass_state
def list_(state: TribState, root, as_json) -> None:
    """Print ROOT's dead-letter files: records, sources, reasons, and how much was replayed."""
    t = state.table(root)
    files = list_dead_letters(t)
    data = {"root": t.uri, "files": [f.to_json() for f in files],
            "records": sum(f.records for f in files), "pending": sum(f.records - f.replayed for f in files)}

    def human():
        lines = []
        for f in files:
            top = f.reasons[0] if f.reasons else {"reason": "?", "count": 0}
            more = f" (+{len(f.reasons) - 1} other reasons)" if len(f.reasons) > 1 else ""
            lines.append(f"{f.path}  {f.records} records from {', '.join(sorted(f.sources))}, "
                         f"{f.replayed} replayed  first reason: {top['reason']} ({top['count']}){more}")
        echo_capped(lines)
        click.echo(f"{data['records']} dead letters in {len(files)} files, {data['pending']} not replayed")
    emit(as_json, data, human)


@dead_letters.command("replay")
@click.argument("root")
@click.option("--app-id", default=REPLAY_APP, show_default=True,
              help="The app whose offsets record which dead letters were replayed.")
@time_options
@write_options
@json_option
@pass_state
def replay(state: TribState, root, app_id, time_field, time_regex, arrival_time, time_format, time_unit,
           allow_any_time, commit_every, protocol, on_bad_record, max_bad_fraction, roll_size, roll_records,
           roll_inactivity, as_json) -> None:
    """Ingest ROOT's dead letters not yet replayed, exactly once, with ingest's options.

    Typically the corrected options of the run that dead-lettered them (e.g. the
    right --time-field). Each commit records which dead-letter lines it took, so a
    killed replay resumes where it stopped. Records still bad become new dead letters.
    """
    with stop_on_signals(restore=False) as stop:
        try:
            spec = time_spec(time_field, time_regex, arrival_time, time_format, time_unit, allow_any_time)
            policy, limit = bad_record_policy(on_bad_record, max_bad_fraction)
            t = state.table(root)
            committer = committer_for(t)
            try:
                results = run_replay(t, app_id, stop=stop, time_spec=spec, commit_every=commit_every,
                                     protocol=protocol, roll=roll_policy(t, roll_size, roll_records, roll_inactivity),
                                     on_bad_record=policy, max_bad_fraction=limit,
                                     on_commit=committer.on_commit if committer else None)
            finally:
                committed = committer.close() if committer else None
        except Interrupted as e:
            click.echo(f"trib: stopped at once by a second {e.args[0]}; whatever was committed is kept, "
                       f"run again to resume", err=True)
            raise click.exceptions.Exit(128 + e.signum) from None
    records = sum(r.records for r in results)
    dead = sum(r.dead_letters for r in results)
    emit(as_json, {"root": t.uri, "app_id": app_id, "files": [r.to_json() for r in results], "records": records,
                   "dead_letters": dead, **({"partition_commit": committed} if committed else {})},
         f"replayed {records} dead letters from {len(results)} files"
         + (f"; {dead} are still bad (new dead letters)" if dead else ""))
    if committer and committer.error:
        raise type(committer.error)(f"records committed, but the partition commit failed: {committer.error}; "
                                    f"catch up with: trib partitions commit {root}")
    stopped = next((r.stopped_by for r in results if r.stopped_by), None)
    if stopped:
        import signal

        click.echo(f"trib: interrupted by {stopped}: run again to resume the replay", err=True)
        raise click.exceptions.Exit(128 + getattr(signal, stopped))
