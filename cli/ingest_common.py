"""What every ``trib ingest`` source shares in the CLI: which flags were given, and how a run ends."""

from __future__ import annotations

import signal

import click

from .context import emit


def given(names) -> list[str]:
    """The flags (``--name``) of the parameters ``names`` given on the command line, defaults aside."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    flags = {o.name: o.opts[0] for o in ctx.command.params}
    return sorted(flags[k] for k in names if ctx.get_parameter_source(k) not in (None, ParameterSource.DEFAULT))


def committer(t):
    """The table's partition committer, or None; its module (the Hive client's) is loaded only when the table has
    a partition-commit policy, so that every other ingest run does not pay for it."""
    if not t.config.partition_commit:
        return None
    from tributary_read.hive.commit import committer_for

    return committer_for(t)


def mirror(t, follow: bool = False):
    """The table's Iceberg mirror hook (tributary_read.iceberg.auto), or None when it mirrors nothing; a
    ``follow`` run, which may never end with the failure's exit 8, warns of each outage as it starts."""
    from tributary_read.iceberg.auto import hook

    return hook(t, (lambda line: click.echo(f"trib: warning: {line}", err=True)) if follow else None)


def mirrored(mirror) -> dict:
    """The ``iceberg`` key of a run's JSON: what the mirror after its last commit did (none: no key)."""
    return {"iceberg": mirror.last.to_json()} if mirror is not None and mirror.last is not None else {}


def dead_letters_warning(t, root, as_json: bool, result) -> None:
    """A run that kept dead letters says so on stderr: how many, the first, and whether only the allowance of
    the bad-record limit let them through (that line also with --json: the JSON holds ``bad_records``)."""
    from tributary_read.write.lines import bad_records_warning

    report = getattr(result, "bad_records", None)
    if report:
        text = bad_records_warning(report).replace("the max bad fraction", "--max-bad-fraction")
        click.echo(f"trib: warning: {text}; see them with: trib dead-letters list {root}", err=True)
    elif result.dead_letters and not as_json:
        click.echo(f"trib: warning: {result.dead_letters} records went to {t.uri}/_tributary/dead_letter; "
                   f"see them with: trib dead-letters list {root}", err=True)


def finish(t, root, as_json: bool, result, msg: str, committer, committed, follow: bool, what: str,
           mirror=None) -> None:
    """Print a continuous source's run (Kafka topics, a spool directory) and end with its exit status.

    The partition commit's or the Iceberg mirror's failure is the run's error (the records are committed); a
    bounded run stopped by a signal exits 128 + signal, a follow run stopped by one has ended as asked (exit 0).
    """
    dead_letters_warning(t, root, as_json, result)
    emit(as_json, {**result.to_json(), **({"partition_commit": committed} if committed else {}),
                   **mirrored(mirror)}, msg)
    if committer and committer.error:
        raise type(committer.error)(f"records committed, but the partition commit failed: {committer.error}; "
                                    f"catch up with: trib partitions commit {root}")
    if mirror is not None:
        mirror.raise_error()
    if result.stopped_by and not follow:
        click.echo(f"trib: interrupted by {result.stopped_by}: the {what} read so far are committed; run again "
                   "to resume", err=True)
        raise click.exceptions.Exit(128 + getattr(signal, result.stopped_by))
