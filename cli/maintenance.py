"""Operations on a table's log: ``trib log``, ``recover``, ``verify``, ``clean``."""

from __future__ import annotations

from datetime import datetime, timezone

import click

from tributary_read.ingest import recover as run_recover
from tributary_read.maintenance import clean as run_clean
from tributary_read.maintenance import verify as run_verify

from .context import Duration, TribState, echo_capped, emit, json_option, pass_state


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


@click.command("log")
@click.argument("root")
@click.option("--since-version", type=int, default=0, help="Only versions after this one.")
@click.option("--limit", type=int, default=0, help="Only the newest N commits (0 = all).")
@json_option
@pass_state
def log(state: TribState, root, since_version, limit, as_json) -> None:
    """List commits: version, time, app, files, records, offsets."""
    t = state.table(root)
    since = since_version
    if limit:
        since = max(since, t.log.latest_version() - limit)
    rows = []
    for c in t.log.commits(since):
        txn = c.transaction
        rows.append({"version": c.version, "timestamp_ms": c.timestamp_ms, "time": _iso(c.timestamp_ms),
                     "app_id": txn.app_id if txn else None, "files": len(c.files), "records": c.records,
                     "offsets": dict(txn.offsets) if txn else {}, "protocol": c.protocol})

    def human():
        click.echo(f"{'version':>8}  {'time (UTC)':<29} {'app':<16} {'files':>5} {'records':>9}  offsets")
        for r in rows:
            offs = ", ".join(f"{k}={v}" for k, v in r["offsets"].items())
            click.echo(f"{r['version']:>8}  {r['time']:<29} {str(r['app_id'] or '-'):<16} "
                       f"{r['files']:>5} {r['records']:>9}  {offs}")
    emit(as_json, {"root": t.uri, "commits": rows}, human)


@click.command()
@click.argument("root")
@click.option("--app-id", required=True)
@json_option
@pass_state
def recover(state: TribState, root, app_id, as_json) -> None:
    """Print the app's last committed transaction (and finish its pending renames)."""
    t = state.table(root)
    app, rolled = run_recover(t, app_id)
    if app is None:
        data = {"app_id": app_id, "version": None, "offsets": {}, "rolled_forward": []}
        emit(as_json, data, f"app {app_id!r} has no committed transaction; start from the beginning")
        return
    data = {"app_id": app_id, "version": app.version, "offsets": dict(app.transaction.offsets),
            "meta": dict(app.transaction.meta), "rolled_forward": rolled}
    offs = ", ".join(f"{k}={v}" for k, v in app.transaction.offsets.items())
    emit(as_json, data, f"app {app_id} committed at version {app.version}: {offs}"
         + (f" (rolled forward {len(rolled)} files)" if rolled else ""))


@click.command()
@click.argument("root")
@json_option
@pass_state
def verify(state: TribState, root, as_json) -> None:
    """Check every committed file exists with its recorded size; list orphans."""
    t = state.table(root)
    report = run_verify(t)

    def human():
        echo_capped([f"{p.problem}: {p.path} (expected {p.expected_size} bytes, found {p.actual_size})"
                     for p in report.problems])
        echo_capped([f"orphan: {o.path} ({o.size} bytes)" for o in report.orphans])
        if report.untracked:
            click.echo(f"untracked (not written by trib, left alone): {len(report.untracked)} files")
        status = "ok" if report.ok else f"FAILED: {len(report.problems)} problems"
        click.echo(f"{status}: {report.committed_files} committed files at version {report.version}, "
                   f"{len(report.orphans)} orphans")
    emit(as_json, report.to_json(), human)
    if not report.ok:
        if any(p.problem == "pending_roll_forward" for p in report.problems):
            click.echo("trib: hint: run `trib recover ROOT --app-id ID` (or the ingest) to finish renames", err=True)
        raise click.exceptions.Exit(9)


@click.command()
@click.argument("root")
@click.option("--older-than", type=Duration(), default="24h", show_default=True,
              help="Grace period: younger orphans may belong to a running writer.")
@click.option("--dry-run", is_flag=True, help="List what would be deleted.")
@json_option
@pass_state
def clean(state: TribState, root, older_than, dry_run, as_json) -> None:
    """Delete orphans (trib-written, unreferenced) older than the grace period."""
    t = state.table(root)
    victims = run_clean(t, older_than, dry_run)
    verb = "would delete" if dry_run else "deleted"
    data = {"dry_run": dry_run, "deleted": [{"path": v.path, "size": v.size} for v in victims]}

    def human():
        echo_capped([f"{verb}: {v.path}" for v in victims])
        click.echo(f"{verb} {len(victims)} orphans ({sum(v.size for v in victims)} bytes)")
    emit(as_json, data, human)


COMMANDS = [log, recover, verify, clean]
