"""``trib ingest ROOT --source-dir DIR``: a directory of rotating log files into a table, exactly once
(docs/sources.md)."""

from __future__ import annotations

import click

from .context import Duration, TribState
from .ingest_common import committer as table_committer, finish, given, mirror as table_mirror
from .lineage_hooks import chain


def spool_options(f):
    for opt in reversed([
        click.option("--source-dir", type=click.Path(file_okay=False),
                     help="Read a directory of rotating log files (every file that --pattern selects), "
                          "each line once, whatever renames, compression and truncation happen meanwhile."),
        click.option("--pattern", default="*", show_default=True, help="With --source-dir: the file names to read "
                                                                       "(a glob; rotated names must match too)."),
        click.option("--exclude", multiple=True, help="With --source-dir: file names to skip (a glob; repeatable)."),
        click.option("--close-inactive", type=Duration(), default="5m", show_default=True,
                     help="With --source-dir: a file read to its end, with a newer file beside it and unchanged "
                          "this long, is finished: its last line without a newline is taken, and it leaves the "
                          "open files."),
        click.option("--on-complete", type=click.Choice(["keep", "delete", "rename"]), default="keep",
                     show_default=True,
                     help="With --source-dir: what to do with a finished file once the commit holding its last "
                          "byte has landed (rename: to NAME.COMPLETED)."),
        click.option("--allow-lost", is_flag=True,
                     help="With --source-dir: exit 0 even when a file was deleted before it was read to its end "
                          "(default: exit 13 after committing the rest; the commit records the loss)."),
    ]):
        f = opt(f)
    return f


def spool_given(spool: dict) -> list[str]:
    """The --source-dir flags given on the command line (defaults aside)."""
    return given(k for k in spool if k != "source_dir")


def run_spool(state: TribState, stop, root, app_id, spool: dict, follow: bool, commit_interval_ms: int, spec,
              commit_every, protocol, on_bad_record, max_bad_fraction, roll_for, source_name, as_json) -> None:
    from tributary_read.spool.ingest import SpoolSource, ingest_dir

    source = SpoolSource(spool["source_dir"], spool["pattern"], tuple(spool["exclude"]),
                         spool["close_inactive"] / 1000, spool["on_complete"])
    t = state.table(root)
    committer = table_committer(t)
    mirror = table_mirror(t, follow)

    def note(line: str) -> None:
        if not state.quiet or line.startswith("warning:"):
            click.echo(f"trib: {line}", err=True)

    try:
        result = ingest_dir(
            t, source, app_id, time_spec=spec, follow=follow, commit_every=commit_every,
            commit_interval_s=commit_interval_ms / 1000, source_name=source_name, protocol=protocol,
            roll=roll_for(t), on_bad_record=on_bad_record, max_bad_fraction=max_bad_fraction,
            allow_lost=spool["allow_lost"], stop=stop, progress=note,
            on_commit=chain(committer and committer.on_commit, mirror and mirror.on_commit))
    finally:
        committed = committer.close() if committer else None
    stop.finished = True  # the run is over: a second signal now must not add a second, contradicting line
    extra = [f"{result.dead_letters} dead letters"] if result.dead_letters else []
    if result.completed:
        extra.append(f"{len(result.completed)} files {spool['on_complete']}d")
    if result.lost:
        extra.append(f"{len(result.lost)} files lost before they were read")
    msg = (f"{result.records} records from {result.files_read} files of {source.directory} in {result.commits} "
           f"commits" + (f" ({'; '.join(extra)})" if extra else "")
           + f"; {result.tracked} open, {result.done} finished files remembered")
    finish(t, root, as_json, result, msg, committer, committed, follow, "lines", mirror)
