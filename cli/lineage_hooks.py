"""What ``trib ingest`` (a file, Kafka topics) does with its OpenLineage events: one warning line per problem,
the table's Hive name as a symlink of the output, one ``on_commit`` for the lineage and the partition commit."""

from __future__ import annotations

import click

from tributary_read.errors import TributaryError


def warn(msg: str) -> None:
    click.echo(f"trib: warning: {msg}", err=True)


def enabled(lineage, committer):
    """``lineage`` (None: no transport configured), with the table's Hive name from its partition-commit policy."""
    if not lineage.enabled:
        return None
    policy = committer.policy if committer else None
    if policy is not None and policy.hive_table:  # the table's Hive name, as a symlink of the output
        from tributary_read.hive.uri import MetastoreURI

        try:
            uri = MetastoreURI.parse(policy.metastore) if policy.metastore else None
        except TributaryError:  # the partition commit reports it; lineage names the table without its host
            uri = None
        lineage.hive = {"hive_table": policy.hive_table, "hive_namespace": uri.lineage_namespace if uri else "hive"}
    return lineage


def chain(*hooks):
    """One ``on_commit`` calling each of ``hooks`` given (None: none given)."""
    given = [h for h in hooks if h]
    if len(given) < 2:
        return given[0] if given else None

    def each(commit) -> None:
        for h in given:
            h(commit)
    return each
