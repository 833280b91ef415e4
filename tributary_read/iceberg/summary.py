"""What a mirror writes into each Iceberg snapshot's summary, and how a rerun reads its position back.

Every snapshot a mirror commits names the trib commit it registers (``trib.version``) and the trib table
it mirrors (``trib.table``, ``trib.table-created-ms``). A commit to the catalog is atomic, so the newest
snapshot's summary is the mirror's position: a run killed anywhere resumes from the Iceberg table alone,
at the next trib version, registering no file twice and skipping none. No side file can disagree with it.

The table's identity is its URI and its creation time (table.json's ``created_ms``): a copy of a table
at another place, or another table at the same place, is another table, and mirroring it into the same
Iceberg table would mix two histories.

A landing zone (a directory other tools write Parquet into, registered by a durable consumer:
:mod:`tributary_read.iceberg.landing`) is named by its root and the consumer's name (``trib.landing``,
``trib.consumer``), and each of its snapshots by the consumer's plan it registers (``trib.plan``): the
plan id is how a rerun tells a registered plan from one still to register. The two kinds of identity
share no key, so an Iceberg table of one kind is never taken for the other's.
"""

from __future__ import annotations

from typing import Mapping

from tributary_read.errors import InvalidInputError
from tributary_read.table.config import Table

VERSION = "trib.version"
TABLE = "trib.table"
CREATED = "trib.table-created-ms"
OPERATION = "trib.operation"
LANDING = "trib.landing"
CONSUMER = "trib.consumer"
PLAN = "trib.plan"


def identity(table: Table) -> dict[str, str]:
    """The keys that name ``table`` in every snapshot summary and in the Iceberg table's properties."""
    return {TABLE: table.uri, CREATED: str(table.config.created_ms)}


def landing_identity(root: str, consumer: str) -> dict[str, str]:
    """The keys that name a landing zone's registration: its root and the consumer that delivers its files."""
    return {LANDING: root, CONSUMER: consumer}


def _named(d: Mapping[str, str]) -> str:
    if LANDING in d:
        return f"landing zone {d.get(LANDING)} (consumer {d.get(CONSUMER)})"
    return f"{d.get(TABLE)} (created_ms {d.get(CREATED)})"


def check_owner(properties: Mapping[str, str], ident: Mapping[str, str], name: str) -> None:
    """Refuse an Iceberg table this mirror did not create, or created for another trib table or landing zone."""
    if TABLE not in properties and LANDING not in properties:
        raise InvalidInputError(f"Iceberg table {name} was not created by trib iceberg sync (another tool wrote it): "
                                "trib mirrors only into a table it created; mirror into another Iceberg table")
    if any(properties.get(k) != v for k, v in ident.items()):
        what = "landing zone" if LANDING in ident else "trib table"
        raise InvalidInputError(f"Iceberg table {name} mirrors {_named(properties)}, not {_named(ident)}: give "
                                f"this {what} another Iceberg table")


def position(summary: Mapping[str, str] | None, ident: Mapping[str, str], name: str, snapshot_id: int | None) -> int:
    """The trib version the newest snapshot (its ``summary``; None: no snapshot yet) registered.

    A snapshot without trib's keys was written by another tool (an append, a delete by hand): the
    Iceberg table no longer equals any version of the trib table, so the mirror refuses rather than
    build on it.
    """
    if summary is None:
        return 0
    version = summary.get(VERSION)
    if version is None or not version.isdigit():
        raise InvalidInputError(f"Iceberg table {name}: its newest snapshot {snapshot_id} was written by another "
                                f"tool (operation {summary.get('operation')}, no {VERSION}): it no longer equals the "
                                "trib table; roll it back to trib's last snapshot, or mirror into a new Iceberg table")
    if any(summary.get(k) != v for k, v in ident.items()):
        raise InvalidInputError(f"Iceberg table {name}: its newest snapshot {snapshot_id} registers "
                                f"{_named(summary)}, not {_named(ident)}: give this trib table another Iceberg table")
    return int(version)
