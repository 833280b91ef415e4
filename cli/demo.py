"""``trib demo``: a day of late logs, the hourly job run naive and trib's way, the hourly distinct users naive,
append and restate, and the lateness report."""

from __future__ import annotations

import click

from .context import TribState, emit, json_option, pass_state


@click.command("demo")
@click.option("--hours", type=click.IntRange(1, 168), default=24, show_default=True,
              help="Event hours to simulate; one hourly cycle each.")
@click.option("--dir", "dir_", default=".trib/demo", show_default=True, type=click.Path(file_okay=False),
              help="Work directory: the raw and DW tables, the job, the report (recreated on every run).")
@click.option("--hive-dir", type=click.Path(file_okay=False),
              help="Use the Hive pair of this `trib hive up --dir` (default: DIR/hive, started and stopped here).")
@click.option("--seed", type=int, default=2002, show_default=True, help="The arrival mix's random seed.")
@click.option("--spark", "spark_mode", default="classic", show_default=True, metavar="classic|connect|sc://HOST:PORT",
              help="Where the jobs run: a Spark driver in this process; a local Spark Connect server started "
                   "on the demo's Hive pair and stopped at the end; or a running server whose catalog is that "
                   "pair (trib spark up --hive-dir DIR, with --hive-dir DIR).")
@json_option
@pass_state
def demo(state: TribState, hours, dir_, hive_dir, seed, spark_mode, as_json) -> None:
    """Replay a day of late-arriving logs; run the hourly job naive and trib's way, and count each hour's distinct
    users naive, append and restate; compare; report lateness."""
    from tributary_read.demo.run import run_demo

    def say(msg: str) -> None:
        if not state.quiet:
            click.echo(f"trib demo: {msg}", err=True)

    result = run_demo(dir_, hours, hive_dir=hive_dir, say=say, seed=seed, spark_mode=spark_mode)
    emit(as_json, result, lambda: _print(result))


def _print(r: dict) -> None:
    n = r["expected"]
    click.echo(f"\n{n} events in {r['files']} files over {r['hours']} hours; each hour's job ran two ways:\n")
    click.echo(f"  {'':<8}{'captured':>10}{'share':>9}{'lost':>7}{'duplicates':>12}")
    for way in ("naive", "trib"):
        w = r[way]
        click.echo(f"  {way:<8}{w['captured']:>10}{100 * w['captured_share']:>8.1f}%{w['lost']:>7}{w['duplicates']:>12}")
    click.echo("\n  events lost, by how their file arrived:")
    click.echo(f"  {'pattern':<18}{'events':>8}{'naive lost':>12}{'trib lost':>11}")
    for p, v in r["naive"]["by_pattern"].items():
        click.echo(f"  {p:<18}{v['expected']:>8}{v['lost']:>12}{r['trib']['by_pattern'][p]['lost']:>11}")
    lat = r["lateness"]
    rec = lat["recommended_lag"].get("p99.9") or {}
    click.echo(f"\nlateness of the raw log: {lat['late_files']} of {lat['files']} files landed after their hour; "
               f"a naive job would need a lag of {rec.get('lag', '?')} to catch 99.9% of files (by what mtimes "
               "and commit times show: preserved mtimes and late renames hide their lateness).")
    click.echo(f"report: {r['report']}")
    _print_users(r["users"])
    ok = r["trib"]["lost"] == 0 and r["trib"]["duplicates"] == 0
    click.echo(f"\ntrib: {'100% captured, 0 duplicates' if ok else 'LOST OR DUPLICATED EVENTS'}; "
               f"naive lost {r['naive']['lost']} events ({100 * (1 - r['naive']['captured_share']):.1f}%). "
               f"Took {r['seconds']:.0f}s.")


def _print_users(u: dict) -> None:
    """The hourly distinct users three ways: a summary, then one hour that shows why."""
    click.echo("\nhourly count(DISTINCT user), three ways, against the exact count over every raw file at the end:\n")
    click.echo(f"  {'':<9}{'hours right':>12}{'wrong':>7}{'rows':>7}")
    for way in ("naive", "append", "restate"):
        click.echo(f"  {way:<9}{u[way]['right']:>12}{u[way]['wrong']:>7}{u[way]['rows']:>7}")
    if u["example"] is not None:
        e = u["hours"][u["example"]]
        dt, (exact, events) = e["dt"], e["exact"]
        k = len(e["late_files"])
        late = f"{k} late file{'' if k == 1 else 's'}: {', '.join(e['late_files'])}"
        parts = " + ".join(str(users) for users, _ in e["append"])
        click.echo(f"\n  hour {dt[:4]}-{dt[4:6]}-{dt[6:8]} {dt[8:]}:00 ({late}): exact {exact} users in {events} events")
        click.echo(f"    naive    {sum(x for x, _ in e['naive'])} users: it counted the hour once, before "
                   "its late files landed")
        click.echo(f"    append   {len(e['append'])} rows, {parts} = {sum(x for x, _ in e['append'])} users: "
                   f"every event once ({sum(n for _, n in e['append'])}), but a user in two rows counts twice")
        n = len(e["restate"])
        click.echo(f"    restate  {n} row{'' if n == 1 else 's'}, {sum(x for x, _ in e['restate'])} users")
    click.echo("\n  append adds a partial row each time an hour's files reach another run: a late file, or the next\n"
               "  hour's first files, which the run at 5 past already sees. restate recomputes the hour from all\n"
               "  of its files, and replaces its row.")


COMMANDS = [demo]
