"""The table state: every committed file and each app's last transaction, as of one version.

A checkpoint is this state written down; a reader gets it from the newest
checkpoint plus the commits after it (:class:`tributary_read.table.log.ManifestLog`).
Applying commits is the one place that decides what a commit does to the table:
an append adds files, an expire removes them, a replace swaps files for their
compacted copy without changing data, a restate swaps whole
partitions' files for their recomputed ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tributary_read.errors import ManifestCorruptError
from tributary_read.table.docstore import header
from tributary_read.table.manifest import (
    OP_REPLACE, OP_RESTATE, REPLACE_FORMAT_VERSION, RESTATE_FORMAT_VERSION, Commit, FileEntry, Placement, Transaction,
    load_document,
)
from tributary_read.table.restate_swap import restaged

#: How long the state (and so every checkpoint) remembers a removed file, counted
#: in commit time. Removed files are deleted only while remembered, so a deletion
#: grace must be shorter; afterwards a leftover is an ordinary orphan.
REMOVAL_MEMORY_MS = 30 * 86_400_000


@dataclass(frozen=True)
class AppState:
    """The last committed transaction of one app id.

    ``high`` maps each offset key to the greatest offset any commit of the app
    ever carried, or is None when unknown (a checkpoint written before trib
    kept it). It survives log retention in the checkpoints, so a transaction
    beyond it is known to be new without the removed commits
    (:meth:`ManifestLog.find_transaction`); the last transaction alone cannot
    say that once runs are not in offset order (an ETL backfill of an older hour).
    """

    version: int
    transaction: Transaction
    high: Mapping[str, int] | None = field(default=None, hash=False)

    def to_json(self) -> dict:
        d = {"version": self.version, "transaction": self.transaction.to_json()}
        if self.high is not None:
            d["high"] = dict(self.high)
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> AppState:
        high = d.get("high")
        if high is not None and not (isinstance(high, dict) and all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in high.items())):
            raise ValueError("apps.high must map strings to integers")
        return cls(int(d["version"]), Transaction.from_json(d["transaction"]), high)

    def after(self, version: int, t: Transaction) -> AppState:
        """The app's state once commit ``version`` carrying ``t`` is applied."""
        high = None
        if self.high is not None:
            high = dict(self.high)
            for k, v in t.offsets.items():
                if k not in high or v > high[k]:
                    high[k] = v
        return AppState(version, t, high)


def same_transaction(a: Transaction, b: Transaction) -> bool:
    """Transaction identity: the same app and the same offsets (``meta`` is not part of it)."""
    return a.app_id == b.app_id and dict(a.offsets) == dict(b.offsets)


@dataclass(frozen=True)
class Removal:
    """A file an expire or replace commit took out of the state, remembered until it may be deleted.

    ``by``: replaced, not expired: the compacted file that took its records. Its
    bytes are still data a reader behind the replace may need (docs/compaction.md).
    ``restated``: removed by a restate, whose swap set it aside in this directory (the
    partition's staging directory, :class:`~tributary_read.table.manifest.Restatement`).
    """

    version: int
    timestamp_ms: int
    entry: FileEntry
    by: str | None = None
    restated: str | None = None

    def to_json(self) -> dict:
        d = {"version": self.version, "timestamp_ms": self.timestamp_ms, "file": self.entry.to_json()}
        if self.by is not None:
            d["by"] = self.by
        if self.restated is not None:
            d["restated"] = self.restated
        return d


@dataclass(frozen=True)
class TableState:
    """All committed files and the last transaction per app, as of ``version``.

    ``removed`` holds the files expire commits removed, for :data:`REMOVAL_MEMORY_MS`
    of commit time: they are no longer part of the table, but their bytes may
    still be on storage (deleted only after a grace period), so ``verify`` and
    ``clean`` must not call them orphans. Forgetting by commit time keeps every
    way of computing a state (checkpoint + tail, or all commits) identical.
    """

    version: int
    files: Mapping[str, FileEntry] = field(default_factory=dict, hash=False)
    apps: Mapping[str, AppState] = field(default_factory=dict, hash=False)
    removed: Mapping[str, Removal] = field(default_factory=dict, hash=False)
    #: Live file -> the version that added it, where known (a checkpoint written before trib
    #: kept it does not say). A compaction names each original's version, the commit whose
    #: new data it was (tributary_read/read/changes.py).
    added: Mapping[str, int] = field(default_factory=dict, hash=False)
    #: The layout and format of the newest commit that recorded them (table/placement.py).
    settings: Placement | None = None
    #: Partition directory -> the directory its live files are in, for each partition a moved restate
    #: recomputed last (:attr:`~tributary_read.table.manifest.Restatement.moved`): kept here, not derived
    #: from the files, because one the recompute emptied has none. Read through
    #: :func:`tributary_read.table.restate_swap.partition_dir`.
    locations: Mapping[str, str] = field(default_factory=dict, hash=False)

    def apply(self, c: Commit) -> TableState:
        return self.apply_all((c,))

    def apply_all(self, commits) -> TableState:
        """The state after ``commits`` (in version order), copying the maps once.

        Applying commits one state at a time copied every file entry per commit,
        quadratic in a long tail: 880 commits over 100k files took 1.6 s.
        """
        files = dict(self.files)
        apps = dict(self.apps)
        removed = dict(self.removed)
        added = dict(self.added)
        locations = dict(self.locations)
        version, settings = self.version, self.settings
        for c in commits:
            if removed:
                horizon = c.timestamp_ms - REMOVAL_MEMORY_MS
                removed = {p: r for p, r in removed.items() if r.timestamp_ms >= horizon}
            for f in c.files:
                files[f.path] = f
                added[f.path] = c.version
                removed.pop(f.path, None)
            holder = {s.path: f.path for f in c.files for s in f.sources} if c.operation == OP_REPLACE else {}
            # a swapped restate sets its removed files aside in its staging directory; a moved one leaves them
            aside = {r.directory: r.staging for r in c.restated if not r.moved} if c.operation == OP_RESTATE else {}
            for r in c.restated:
                if r.moved:
                    locations[r.directory] = r.staging
                else:
                    locations.pop(r.directory, None)
            for f in c.removed:
                gone = files.pop(f.path, None)
                added.pop(f.path, None)
                if gone is not None:
                    # A replaced compacted file names the originals; the first one's holder is the file's.
                    by = holder.get(f.path) or (holder.get(f.sources[0].path) if f.sources else None)
                    removed[f.path] = Removal(c.version, c.timestamp_ms, gone,
                                              by if c.operation == OP_REPLACE else None,
                                              aside.get(f.path.rpartition("/")[0]))
            if c.transaction is not None:
                prev = apps.get(c.transaction.app_id)
                apps[c.transaction.app_id] = (prev.after(c.version, c.transaction) if prev is not None else
                                              AppState(c.version, c.transaction, dict(c.transaction.offsets)))
            version = c.version
            settings = c.settings if c.settings is not None else settings
        return TableState(version, files, apps, removed, added, settings, locations)

    @property
    def compacted(self) -> bool:
        """Whether the state holds compacted files or remembers replaced ones (its checkpoint is version 2)."""
        return any(f.sources for f in self.files.values()) or any(r.by for r in self.removed.values())

    @property
    def restated(self) -> bool:
        """Whether the state remembers files a restate removed, or holds a restate's files not swapped in yet
        (its checkpoint is version 3: a trib that rolls staged files forward one by one must refuse it), or
        partitions a moved restate left in a directory of their own (one that reads by layout must refuse it)."""
        return any(r.restated for r in self.removed.values()) or bool(restaged(list(self.files.values()))) \
            or bool(self.locations)

    def to_json(self) -> dict:
        version = RESTATE_FORMAT_VERSION if self.restated else REPLACE_FORMAT_VERSION if self.compacted else None
        return {
            **header("checkpoint"),
            **({"format_version": version} if version else {}),
            "version": self.version,
            "files": [f.to_json() for f in self.files.values()],
            "apps": {a: s.to_json() for a, s in self.apps.items()},
            # Optional within version 1: a reader that ignores it still gets the right files.
            **({"removed": [r.to_json() for r in self.removed.values()]} if self.removed else {}),
            # Optional within version 1 too: a version per live file, as [path, version] pairs.
            **({"added": [[p, v] for p, v in self.added.items()]} if self.added else {}),
            # Optional within version 1: the placement the commits were written with.
            **({"settings": self.settings.to_json()} if self.settings is not None else {}),
            # Within version 3: where moved restates left partitions' files.
            **({"locations": dict(self.locations)} if self.locations else {}),
        }

    @classmethod
    def from_json(cls, data: bytes, where: str) -> TableState:
        d = load_document(data, where)
        try:
            files = {f.path: f for f in (FileEntry.from_json(x) for x in d["files"])}
            apps = {a: AppState.from_json(s) for a, s in d["apps"].items()}
            removed = {}
            for r in d.get("removed", []):
                e = FileEntry.from_json(r["file"])
                by, aside = r.get("by"), r.get("restated")
                if by is not None and not isinstance(by, str) or aside is not None and not isinstance(aside, str):
                    raise ValueError("removed.by and removed.restated must be paths")
                removed[e.path] = Removal(int(r["version"]), int(r["timestamp_ms"]), e, by, aside)
            added = {}
            for pair in d.get("added", []):
                p, v = pair
                if not isinstance(p, str) or isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ValueError("added must hold [path, version] pairs")
                if p in files:
                    added[p] = v
            settings = Placement.from_json(d["settings"]) if "settings" in d else None
            locations = d.get("locations", {})
            if not isinstance(locations, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in locations.items()):
                raise ValueError("locations must map partition directories to directories")
            return cls(int(d["version"]), files, apps, removed, added, settings, locations)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ManifestCorruptError(f"corrupt checkpoint {where}: {e}") from None
