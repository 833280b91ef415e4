"""``trib consumer``: list, show, ack, skip, replay and reset durable consumers."""

from __future__ import annotations

from datetime import datetime, timezone

import click

from tributary_read.errors import InvalidInputError
from tributary_read.read.consumer import Consumer, ResetTarget, list_consumers

from .context import TribState, emit, json_option, pass_state
from .files import listing_progress, open_source

_state_dir = click.option("--state-dir", help="Consumer state lives in DIR/NAME (as given to `trib files`).")


def _iso(ms) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


@click.group()
def consumer() -> None:
    """Durable consumers: exactly-once delivery across scheduled runs.

    \b
    A run does:  trib files ROOT --consumer NAME --json   (same plan until acked)
                 ... process the files ...
                 trib consumer ack ROOT NAME PLAN_ID
    """


@consumer.command("ack")
@click.argument("root")
@click.argument("name")
@click.argument("plan_id")
@_state_dir
@json_option
@pass_state
def ack(state: TribState, root, name, plan_id, state_dir, as_json) -> None:
    """Commit PLAN_ID: its files count as delivered. Acking it again is a no-op.

    \b
    Exits 17 (after acking) when the plan held partitions back: the line names
    each one and what changed; `trib consumer replay` resolves them.
    """
    from tributary_read.read.ack_lineage import ack as ack_with_lineage

    src, options = open_source(state, root, None, None, None)
    c = Consumer(src, name, state_dir, options)
    result = ack_with_lineage(c, plan_id, lambda msg: click.echo(f"trib: warning: {msg}", err=True))
    msg = (f"plan {plan_id} was already acked (consumer {name} at version {result.state.version})"
           if result.already_acked else f"acked {plan_id}: consumer {name} at version {result.state.version}")
    emit(as_json, result.to_json(), msg)
    if result.held:  # acked: the rest is delivered; the run still ends with its own code
        raise c.held_error(result.held, plan_id)


@consumer.command("list")
@click.argument("root")
@_state_dir
@json_option
@pass_state
def list_(state: TribState, root, state_dir, as_json) -> None:
    """List the consumers of ROOT."""
    src, options = open_source(state, root, None, None, None)
    rows = list_consumers(src, state_dir, options)

    def human():
        click.echo(f"{'consumer':<24} {'mode':<9} {'version':>7}  {'updated (UTC)':<25} pending")
        for r in rows:
            if "error" in r:
                click.echo(f"{r['consumer']:<24} ERROR: {r['error']}")
                continue
            pend = r["pending"]["plan_id"] if r.get("pending") else "-"
            click.echo(f"{r['consumer']:<24} {str(r.get('mode') or '-'):<9} {r['version']:>7}  "
                       f"{_iso(r.get('updated_ms')):<25} {pend}")
    emit(as_json, {"root": src.uri, "consumers": rows}, human)


@consumer.command("show")
@click.argument("root")
@click.argument("name")
@_state_dir
@json_option
@pass_state
def show(state: TribState, root, name, state_dir, as_json) -> None:
    """Show a consumer's position, ledger size and pending plan."""
    src, options = open_source(state, root, None, None, None)
    info = Consumer(src, name, state_dir, options).show()

    def human():
        click.echo(f"consumer   {info['consumer']}  ({info['location']})")
        click.echo(f"version    {info['version']}  mode {info.get('mode') or '-'}  updated {_iso(info.get('updated_ms'))}")
        if info.get("mode") in ("manifest", "both"):
            click.echo(f"position   table version {info['manifest_version']}")
        if info.get("mode") in ("listing", "both"):
            click.echo(f"ledger     {info['ledger_files']} files in {info['ledger_directories']} partitions, "
                       f"{info['sealed_directories']} sealed; lookback {info['lookback_ms'] // 3_600_000}h; "
                       f"{info.get('state_bytes')} bytes")
            every = info.get("full_scan_every_ms") or 0
            click.echo(f"full scan  every {every / 3_600_000:g}h, last {_iso(info.get('last_full_scan_ms'))}"
                       if every else f"full scan  only with --full-scan, last {_iso(info.get('last_full_scan_ms'))}")
        if "initial_position" in info:
            click.echo(f"first run  {_first_run(info['initial_position'])}")
        click.echo(f"delivered  {info.get('delivered_files', 0)} files, {info.get('delivered_bytes', 0)} bytes")
        p = info["pending"]
        click.echo("pending    " + (f"{p['plan_id']}: {p['files']} files, {p['bytes']} bytes, made "
                                    f"{_iso(p['created_ms'])}" if p else "-"))
        for f in (p or {}).get("skipped") or ():
            click.echo(f"skipped    {f} (of the pending plan: the next run leaves it unread)")
        for f in info.get("skipped") or ():
            click.echo(f"skipped    {f} (of the last acked plan: delivered, never read)")
        for h in info.get("held") or ():
            click.echo(f"held       {h['path']}: {', '.join(h['changes'])} (until `trib consumer replay`)")
    emit(as_json, info, human)


@consumer.command("skip")
@click.argument("root")
@click.argument("name")
@click.argument("file")
@click.option("--execute", is_flag=True, help="Apply it. Without it, only show what would change.")
@_state_dir
@json_option
@pass_state
def skip(state: TribState, root, name, file, execute, state_dir, as_json) -> None:
    """Leave FILE of the pending plan unread: the way past a planned file that is missing or corrupt (exit 7).

    \b
    The plan stays pending and keeps its id; the next run reads its other files,
    records the skip in its commit, and acks the plan, so FILE counts as
    delivered and is never read. Applied only with --execute.
    """
    src, options = open_source(state, root, None, None, None)
    r = Consumer(src, name, state_dir, options).skip(file, execute=execute)
    what = f"skip {r['path']} of plan {r['plan_id']}"
    if r["already_skipped"]:
        emit(as_json, r, f"consumer {name}: {r['path']} of plan {r['plan_id']} is already skipped")
        return

    def human():
        click.echo(f"consumer {name}: {what}: {r['effect']}")
        if r["applied"]:
            click.echo(f"applied: the skip is recorded; plan {r['plan_id']} stays pending until a run acks it")
        else:
            click.echo("nothing changed: add --execute to apply", err=True)
    emit(as_json, r, human)


def _first_run(pos) -> str:
    """What a consumer's first plan took as delivered, from its state's ``initial_position``."""
    if pos is None:
        return "baseline (created before initial positions: partitions older than its lookback were taken as delivered)"
    if pos == "earliest":
        return "earliest (delivered every file that existed)"
    if pos == "latest":
        return "latest (took every file that existed as delivered)"
    return f"{_iso(pos)} (took partitions that ended before it as delivered)"


@consumer.command("replay")
@click.argument("root")
@click.argument("name")
@click.option("--partition", "partitions", required=True, multiple=True,
              help="A partition directory, as the error named it (e.g. 2024_01_01/02); several: repeat it, or "
                   "separate them with commas, as an exit-17 line names them.")
@click.option("--redeliver", is_flag=True,
              help="Deliver the partitions again, every file they hold (the preview counts the files and bytes "
                   "already delivered that this repeats). Without it nothing delivered is delivered again.")
@click.option("--execute", is_flag=True, help="Apply it. Without it, only show what would change.")
@_state_dir
@json_option
@pass_state
def replay(state: TribState, root, name, partitions, redeliver, execute, state_dir, as_json) -> None:
    """Resolve held partitions (exit 17): take each as it is now, or deliver it again with --redeliver.

    \b
    Without --redeliver nothing delivered is delivered again and nothing is
    left undelivered: a removed file is taken as removed, a rewritten one as
    it is now (its new bytes are not delivered), and the files never delivered
    there are delivered by the next plan. Applied only with --execute; any
    pending plan becomes stale.
    """
    src, options = open_source(state, root, None, None, None)
    r = Consumer(src, name, state_dir, options).replay(list(partitions), execute=execute, redeliver=redeliver)
    what = ("replay --redeliver " if redeliver else "replay ") + " ".join(r["partitions"])
    emit(as_json, r, lambda: _moved(name, what, r["effect"], r["applied"], r["version"]))


@consumer.command("reset")
@click.argument("root")
@click.argument("name")
@click.option("--to-earliest", is_flag=True, help="Forget everything delivered: the next plan delivers every file again.")
@click.option("--to-latest", is_flag=True, help="Take everything visible now as delivered (what is undelivered is skipped).")
@click.option("--to-version", type=int, help="Manifest and both consumers: continue after this table version.")
@click.option("--discard-plan", is_flag=True, help="Keep the position; drop only the pending plan.")
@click.option("--execute", is_flag=True, help="Apply the reset. Without it, only show what would change.")
@click.option("--layout", help="Plain directory without stored layout: its template (for --to-latest).")
@click.option("--partition", "partition_spec", help="Plain directory: partition spec.")
@click.option("--timezone", help="Plain directory: zone of the directory times.")
@_state_dir
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@json_option
@pass_state
def reset(state: TribState, root, name, to_earliest, to_latest, to_version, discard_plan, execute, layout,
          partition_spec, timezone, state_dir, quiet, as_json) -> None:
    """Move a consumer to a target; shows what would change, and applies it only with --execute.

    \b
    Exactly one target: --to-earliest, --to-latest, --to-version V or --discard-plan.
    Applied, any pending plan becomes stale.
    """
    targets = [t for t, given in ((ResetTarget.EARLIEST, to_earliest), (ResetTarget.LATEST, to_latest),
                                  (ResetTarget.VERSION, to_version is not None),
                                  (ResetTarget.DISCARD_PLAN, discard_plan)) if given]
    if len(targets) != 1:
        raise InvalidInputError(("a reset needs a target: " if not targets else "give one target, not several: ")
                                + "--to-earliest, --to-latest, --to-version V or --discard-plan")
    src, options = open_source(state, root, layout, partition_spec, timezone)
    c = Consumer(src, name, state_dir, options)
    with listing_progress(state, src.uri, quiet) as progress:
        r = c.reset(targets[0], execute=execute, to_version=to_version, progress=progress)

    emit(as_json, r.to_json(), lambda: _moved(name, f"reset to {r.target}", r.effect, r.applied, r.after.version))


def _moved(name: str, what: str, effect: str, applied: bool, version: int) -> None:
    """A reset's or replay's human lines: what it does, then whether it was applied (previews say how)."""
    click.echo(f"consumer {name}: {what}: {effect}")
    if applied:
        click.echo(f"applied: consumer {name} at state version {version}")
    else:
        click.echo("nothing changed: add --execute to apply", err=True)
