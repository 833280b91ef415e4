"""The table's own Iceberg mirror: the setting ``trib table set --iceberg`` records, and the one step every
committing command runs after its commit (docs/iceberg.md "Mirror every commit").

The setting lives in ``_tributary/iceberg/mirror.json``, not in table.json: table.json refuses keys it does
not know (a misspelt setting must never fall back to a default), so a new key there would make every older
trib refuse the whole table. An older trib ignores this file; its commits are simply registered by the next
commit a newer trib mirrors (a mirror always goes up to the table's latest version), or by
``trib iceberg sync``. ``trib verify`` counts the file as trib's metadata (a directory of its own under
``_tributary/``).

This module imports no pyiceberg: ``import tributary_read`` and every table without the setting never load
it. pyiceberg is imported by :func:`after_commit` only when the setting is there.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Callable

from tributary_read.errors import (
    InvalidInputError, ManifestCorruptError, MetastoreError, MissingDependencyError, TributaryError,
)
from tributary_read.exits import one_line
from tributary_read.iceberg.partition_by import check_layout, parse
from tributary_read.table.config import Table
from tributary_read.table.log import META_DIR

#: Where a table records its mirror.
SETTING = f"{META_DIR}/iceberg/mirror.json"


@dataclass(frozen=True)
class MirrorSetting:
    """The Iceberg table a trib table mirrors every commit into, and its catalog (a URI, never a default:
    a default depends on who runs the command and where, and two writers must mirror into one table)."""

    table: str
    catalog: str
    #: ``hour(ts)`` / ``day(ts)``: the transform a new Iceberg table is also partitioned by (None: identity only).
    partition_by: str | None = None

    def to_json(self) -> dict:
        """The setting as recorded: ``partition_by`` only when set, so a mirror without one stays readable by
        a trib that knows no transform (one that does not would refuse the key, and should: it would register
        files without the transform's value)."""
        return {"table": self.table, "catalog": self.catalog,
                **({"partition_by": self.partition_by} if self.partition_by else {})}

    def catch_up(self, root: str) -> str:
        """The command that brings the mirror up to the table's latest version."""
        where, cat = shlex.quote(root), shlex.quote(self.catalog)
        if self.partition_by:
            return (f"trib iceberg sync {where} --table {self.table} --catalog {cat} --partition-by "
                    f"{shlex.quote(self.partition_by)}")
        return f"trib iceberg sync {where} --table {self.table} --catalog {cat}"


def read_setting(table: Table) -> MirrorSetting | None:
    """The table's mirror setting; None: it mirrors nothing."""
    try:
        data = table.storage.read(SETTING)
    except FileNotFoundError:
        return None
    where = table.storage.uri_for(SETTING)
    try:
        d = json.loads(data)
        if not isinstance(d, dict) or set(d) - {"partition_by"} != {"table", "catalog"} \
                or not all(isinstance(v, str) and v for v in d.values()):
            raise ValueError("expected an object of table, catalog and optionally partition_by")
        parse(d.get("partition_by"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ManifestCorruptError(f"corrupt Iceberg mirror setting {where}: {one_line(e)}; set it again with "
                                   "trib table set --iceberg, or remove it with --no-iceberg") from None
    return MirrorSetting(d["table"], d["catalog"], d.get("partition_by"))


def save_setting(table: Table, name: str | None, catalog: str | None,
                 partition_by: str | None = None) -> MirrorSetting | None:
    """Record (``name``) or remove (None or empty) the table's mirror; returns what is now recorded.

    Checked before it is written, so a setting every later commit would fail on is refused now: the table
    must be Parquet, the name ``NS.NAME``, and a ``partition_by`` transform one the layout's partitions can
    give each file (:func:`~tributary_read.iceberg.partition_by.check_layout`). The catalog is recorded
    resolved (the default's URI spelt out). Nothing is mirrored here: ``trib iceberg sync`` or the next
    commit does that (and refuses an existing Iceberg table made with another transform).
    """
    if not name:
        try:
            table.storage.delete(SETTING)
        except FileNotFoundError:
            pass
        return None
    from tributary_read.iceberg.catalog import check_name, check_uri, default_catalog_uri
    from tributary_read.iceberg.schema import check_parquet  # needs the extra: a mirror set here must run here

    check_parquet(table)
    check_name(name)
    by = parse(partition_by)
    check_layout(by, table.layout)
    uri = check_uri(catalog or default_catalog_uri())
    setting = MirrorSetting(name, uri, str(by) if by is not None else None)
    table.storage.makedirs(SETTING.rpartition("/")[0])
    table.storage.replace(SETTING, json.dumps(setting.to_json(), indent=2, sort_keys=True).encode())
    return setting


@dataclass
class Mirrored:
    """What the mirror after a commit did: the Iceberg table's version, or the error (the commit stands)."""

    setting: MirrorSetting
    committed: int
    version: int | None = None
    snapshots: int = 0
    error: TributaryError | None = None

    def to_json(self) -> dict:
        return {"iceberg_table": self.setting.table, "catalog": self.setting.catalog, "version": self.version,
                "snapshots": self.snapshots, "error": str(self.error) if self.error else None}

    def raise_error(self) -> None:
        """End the command with the mirror's failure, once its own output is printed."""
        if self.error is not None:
            raise self.error


def after_commit(table: Table, committed: int) -> Mirrored | None:
    """Bring the table's Iceberg mirror up to its latest version after the commit ``committed`` (None: the
    table has no mirror). Every committing command calls this, and only this.

    A failure is returned, never raised here, so the caller can print what it committed first, then end
    with :meth:`Mirrored.raise_error`: exit 8 (:class:`MetastoreError`) for any failure of the mirror,
    exit 10 when the ``iceberg`` extra is not installed, each naming the catch-up command. The trib commit
    is never undone: the catch-up registers it, once, from the Iceberg table's own position.
    """
    return _mirror(table, committed, f"version {committed} of {table.uri} is committed, but")


def before_delete(table: Table) -> Mirrored | None:
    """Bring the mirror up before ``trib clean`` or ``trib expire`` deletes the bytes of removed files: until
    the Iceberg table has registered their removal, its current snapshot still names them. A failure
    (returned, as :func:`after_commit`'s) means: delete nothing now; a later run deletes them."""
    return _mirror(table, table.log.latest_version(), "no file was deleted (the Iceberg table may still name "
                                                      "them), because")


def _mirror(table: Table, committed: int, head: str) -> Mirrored | None:
    setting = read_setting(table)
    if setting is None:
        return None
    outcome = Mirrored(setting, committed)
    try:
        from tributary_read.iceberg.mirror import sync

        result = sync(table, setting.table, setting.catalog, setting.partition_by)
    except MissingDependencyError as e:
        outcome.error = MissingDependencyError(
            f"{head} the table mirrors into Iceberg table {setting.table}, and {one_line(e)}; then catch up with: "
            f"{setting.catch_up(table.uri)} (or stop the mirror: trib table set {table.uri} --no-iceberg)")
        return outcome
    except Exception as e:  # the commit stands whatever the catalog did: one line, the way to catch up
        cause = one_line(e) if isinstance(e, TributaryError) else f"{type(e).__name__}: {one_line(e)}"
        outcome.error = MetastoreError(f"{head} mirroring {table.uri} into Iceberg table {setting.table} failed "
                                       f"({cause[:300]}); catch up with: {setting.catch_up(table.uri)}")
        return outcome
    outcome.version, outcome.snapshots = result.version, len(result.snapshots)
    return outcome


class MirrorHook:
    """``on_commit`` for a command that commits many times (an ingest): each commit mirrored as it lands.

    A failed mirror does not stop the run (its records are committed); the next commit's mirror catches up
    what the last one missed. :attr:`last` is the newest outcome: the run ends with its error, if any.
    ``warn`` is told each failure as it happens (once per outage), so a ``--follow`` run that never ends
    does not fail in silence.
    """

    def __init__(self, table: Table, warn: Callable[[str], None] | None = None):
        self.table = table
        self.warn = warn
        self.last: Mirrored | None = None

    def on_commit(self, commit) -> None:
        was_failing = self.last is not None and self.last.error is not None
        self.last = after_commit(self.table, commit.version)
        if self.warn and self.last is not None and self.last.error is not None and not was_failing:
            self.warn(f"{self.last.error} (the run goes on: each later commit retries the mirror)")

    def raise_error(self) -> None:
        if self.last is not None:
            self.last.raise_error()


def hook(table: Table, warn: Callable[[str], None] | None = None) -> MirrorHook | None:
    """A :class:`MirrorHook` for ``table``, or None when it mirrors nothing (read once per run)."""
    return MirrorHook(table, warn) if read_setting(table) is not None else None
