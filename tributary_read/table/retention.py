"""Retention: expire old partitions (``trib expire``) and trim the log (``trib clean``).

Expiring is two steps, like Delta's remove + VACUUM. One ``expire`` commit takes
whole partitions' files out of the table: that commit is the commit point, and
from then on no reader, consumer or ``verify`` counts them. Their bytes are
deleted only once the removal is older than a grace period, so a reader that
resolved its file list just before the commit can still read them.

Only files that trib committed are removed. Files other tools put into an
expired partition are not in the log, so removing them could not be recorded
and a listing reader may still be delivering them: they are left alone and
reported (``kept``), and their directory then stays.

Log retention follows Delta's ``logRetentionDuration``: commit files older than
the retention *and* below the newest checkpoint are deleted, oldest first, so
the retained commits stay contiguous and every later version stays readable
from that checkpoint.
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass
from typing import Callable

from tributary_read.errors import CommitConflictError, InvalidInputError, LogRetentionError, ManifestCorruptError
from tributary_read.table.log import CHECKPOINTS, COMMITS, LAST_CHECKPOINT, LOG_DIR, META_DIR, checkpoint_path, commit_path
from tributary_read.table.renames import REPLACED_DIR, removal_locations, replaced_path
from tributary_read.table.restate_swap import is_marker_name, is_staging_name
from tributary_read.table.state import REMOVAL_MEMORY_MS, TableState
from tributary_read.table.manifest import KIND_DATA, FileEntry
from tributary_read.io.storage import FileInfo, Storage
from tributary_read.table.config import Table
from tributary_read.table.maintenance import VerifyReport, require_consistent

#: A table-wide ``expire`` racing appends retries this long before giving up.
EXPIRE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ExpirePlan:
    """What one ``trib expire`` removes: partitions whose period ended before ``cutoff_ms``."""

    cutoff_ms: int
    directories: tuple[str, ...]
    removed: tuple[FileEntry, ...]
    #: Files in expired directories that no live commit lists; never deleted by expire.
    kept: tuple[FileInfo, ...] = ()

    def to_json(self) -> dict:
        return {"cutoff_ms": self.cutoff_ms, "directories": list(self.directories),
                "removed": [f.to_json() for f in self.removed],
                "kept": [{"path": k.path, "size": k.size, "mtime_ms": k.mtime_ms} for k in self.kept]}


@dataclass(frozen=True)
class ExpireResult:
    plan: ExpirePlan
    #: The expire commit's version; None when nothing was old enough or on a dry run.
    version: int | None
    #: Files of removals older than the grace period, deleted by this run (or that would be).
    deleted: tuple[FileInfo, ...]
    dry_run: bool

    def to_json(self) -> dict:
        return {"dry_run": self.dry_run, "version": self.version, **self.plan.to_json(),
                "deleted": [{"path": d.path, "size": d.size} for d in self.deleted]}


@dataclass(frozen=True)
class LogCleanup:
    """Log files removed (or that would be) by log retention."""

    checkpoint: int
    oldest_retained: int
    commits: tuple[int, ...] = ()
    checkpoints: tuple[int, ...] = ()

    def to_json(self) -> dict:
        return {"checkpoint": self.checkpoint, "oldest_retained": self.oldest_retained,
                "commits": list(self.commits), "checkpoints": list(self.checkpoints)}


def plan_expire(table: Table, state: TableState, older_than_ms: int, now_ms: int,
                listed: list[FileInfo] | None = None) -> ExpirePlan:
    """Every live data file in a layout directory whose period ended at or before now - older_than."""
    if older_than_ms < 0:
        raise InvalidInputError("the age must not be negative", older_than="the age")
    cutoff = now_ms - older_than_ms
    layout = table.layout
    expired: dict[str, bool] = {}

    def is_expired(d: str) -> bool:
        if d not in expired:
            p = layout.try_parse(d) if d and not d.startswith(META_DIR) else None
            expired[d] = p is not None and p.end_ms <= cutoff
        return expired[d]

    removed = [e for e in state.files.values()
               if e.kind == KIND_DATA and is_expired(posixpath.dirname(e.path))]
    removed.sort(key=lambda e: e.path)
    dirs = sorted({posixpath.dirname(e.path) for e in removed})
    kept: list[FileInfo] = []
    if listed is not None:
        known = set(state.files) | set(state.removed)
        known |= {e.staged for e in state.files.values() if e.staged}
        known |= {r.entry.staged for r in state.removed.values() if r.entry.staged}
        kept = sorted((f for f in listed if f.path not in known and is_expired(posixpath.dirname(f.path))),
                      key=lambda f: f.path)
    return ExpirePlan(cutoff, tuple(dirs), tuple(removed), tuple(kept))


def expire(table: Table, older_than_ms: int, grace_ms: int, *, dry_run: bool = False,
           now_ms: int | None = None, before_delete: Callable[[], bool] | None = None) -> ExpireResult:
    """Record the removal of expired partitions in one commit, then delete what is past the grace.

    A lost race re-plans on the new latest state instead of committing a stale
    plan: the winner may have added files to an expired hour (late data) or
    removed some already. An unknown commit outcome raises
    CommitStateUnknownError; nothing has been deleted then, and rerunning is safe
    because an already-removed file is not removed twice.

    A table that ``verify`` finds inconsistent is refused before anything is
    committed or deleted: the state a removal is planned on may be missing commits.

    ``before_delete``: called after the commit, before any file is deleted (the table's Iceberg mirror
    registers the removal first, so no Iceberg snapshot a reader is sent to names deleted bytes); False:
    delete nothing now, a later ``trib expire`` or ``trib clean`` does.
    """
    check_grace(grace_ms)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    checked = require_consistent(table, "expire")
    log = table.log
    listed = table.storage.list()
    state = log.state()
    plans = [plan_expire(table, state, older_than_ms, now, listed)]
    version = None
    stamped = 0  # the removal commit's time
    if not dry_run and plans[0].removed:
        def replan(st: TableState) -> tuple[FileEntry, ...]:
            # A lost race re-plans on the winner's state: it may have added late files or removed some.
            if st.version != state.version:
                plans.append(plan_expire(table, st, older_than_ms, now, listed))
            return plans[-1].removed
        try:
            made = log.commit((), base_version=state.version, writer="expire", timeout_s=EXPIRE_TIMEOUT_S,
                              removed=replan)
            version, stamped = made.version, made.timestamp_ms
        except CommitConflictError as e:
            raise CommitConflictError(f"expire {e}; run it again") from None
    plan = plans[-1]
    # The clock is read again: with --grace 0s the commit just made is past its grace. Commit times only
    # rise (the previous one's + 1 ms at least), so a removal made in the previous commit's millisecond is
    # stamped a moment ahead of this clock: its own time counts as now.
    at = now_ms if now_ms is not None else max(int(time.time() * 1000), stamped)
    if not dry_run and before_delete is not None and not before_delete():
        return ExpireResult(plan, version, (), dry_run)
    deleted = delete_removed(table, grace_ms, dry_run=dry_run, now_ms=at, checked=checked)
    return ExpireResult(plan, version, tuple(deleted), dry_run)


def check_grace(grace_ms: int) -> None:
    if grace_ms < 0:
        raise InvalidInputError("grace period must be >= 0")
    if grace_ms >= REMOVAL_MEMORY_MS:
        raise InvalidInputError(
            f"grace period must be shorter than {REMOVAL_MEMORY_MS // 86_400_000} days, the time a table "
            "remembers removed files")


def delete_removed(table: Table, grace_ms: int, *, dry_run: bool = False,
                   now_ms: int | None = None, checked: VerifyReport | None = None,
                   pending: frozenset[str] | None = None) -> list[FileInfo]:
    """Delete the files of removals recorded at least ``grace_ms`` ago (both names under rename).

    The state is read right here, so a path committed again after its removal
    (it is live again) is never deleted. ``checked``: the report of
    :func:`require_consistent` this run already has (else it is made here).

    Files a compaction replaced still hold data for readers behind it: they go
    only after the table's ``compact.retention`` (or the grace, if longer) and
    when no pending plan names them. ``pending``: the paths consumers' pending
    plans name; None (not known) keeps every replaced file.
    """
    if grace_ms < 0:
        raise InvalidInputError("grace period must be >= 0")
    if checked is None:
        require_consistent(table, "delete")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    storage = table.storage
    # Listed before the state is read: a file is set aside only after its replace commit landed,
    # so the state read next remembers every file listed here that is not past its memory.
    aside = storage.list(REPLACED_DIR) if pending is not None else []  # unknown plans: nothing swept
    state = table.log.state()
    live = set(state.files) | {e.staged for e in state.files.values() if e.staged}
    victims: list[FileInfo] = []
    for r in sorted(state.removed.values(), key=lambda r: r.entry.path):
        if r.timestamp_ms > now - grace_ms:
            continue
        # replaced or restated: the bytes are data for readers behind the commit, kept like a compaction's
        if (r.by is not None or r.restated is not None) and (
                pending is None or r.timestamp_ms > now - table.config.compact.retention_ms
                or any(p in pending for p in removal_locations(r))):
            continue
        for p in removal_locations(r):
            if p not in live:
                info = storage.info(p)
                if info is not None and not info.is_dir and not storage.links([p]):
                    victims.append(info)  # a symbolic link is never deleted through
    remembered = {replaced_path(r.entry.path) for r in state.removed.values()}
    victims += [f for f in aside if f.path not in remembered and f.path not in (pending or ())
                and f.path[len(REPLACED_DIR) + 1:] not in live]
    if not dry_run:
        for v in victims:
            storage.delete(v.path)
        dirs = {posixpath.dirname(v.path) for v in victims}
        for d in dirs:  # a restate's set-aside directory whose files are all gone: its markers go too
            if is_staging_name(posixpath.basename(d)):
                left = storage.list(d, recursive=False)
                if left and all(is_marker_name(f.path.rpartition("/")[2]) for f in left):
                    for f in left:
                        storage.delete(f.path)
        for d in sorted(dirs, reverse=True):
            _remove_empty_dirs(storage, d)
    return victims


def _remove_empty_dirs(storage: Storage, d: str) -> None:
    """Remove ``d`` and its parents while they are empty, so the partition is gone for listings.

    Never recursive (:meth:`Storage.remove_empty_dir`): a file a writer puts
    there concurrently survives.
    """
    while d and not d.startswith(META_DIR):
        try:
            if not storage.remove_empty_dir(d):
                return
        except Exception:  # noqa: BLE001 - an empty directory left behind costs nothing
            return
        d = posixpath.dirname(d)


def clean_log(table: Table, retention_ms: int | None = None, *, dry_run: bool = False,
              now_ms: int | None = None, checked: VerifyReport | None = None) -> LogCleanup:
    """Delete commit files older than the retention and below the newest checkpoint.

    The checkpoint hint is first made to name that checkpoint (or a newer one),
    so no reader starts below the commits that remain. Superseded checkpoints
    go too once no retained commit follows them. ``checked``: the report of
    :func:`require_consistent` this run already has (else it is made here).
    """
    retention = table.config.log_retention_ms if retention_ms is None else retention_ms
    if retention < 0:
        raise InvalidInputError("log retention must be >= 0")
    if checked is None:
        require_consistent(table, "log retention")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    storage, log = table.storage, table.log
    commits: dict[int, FileInfo] = {}
    cps: dict[int, FileInfo] = {}
    for f in storage.list(LOG_DIR, recursive=False):
        if (v := COMMITS.number(f.path)) is not None:
            commits[v] = f
        elif (v := CHECKPOINTS.number(f.path)) is not None:
            cps[v] = f
    newest = 0
    for v in sorted(cps, reverse=True):
        if v not in commits:
            continue  # a checkpoint without its commit is not trusted to fold anything
        try:
            log._read_checkpoint(v)
        except (ManifestCorruptError, LogRetentionError):
            continue
        newest = v
        break
    if not newest:
        return LogCleanup(0, min(commits, default=0))
    cutoff = now - retention
    gone: list[int] = []
    for v in sorted(commits):
        if v >= newest or commits[v].mtime_ms > cutoff:
            break  # only a prefix: the retained commits stay contiguous
        gone.append(v)
    oldest = gone[-1] + 1 if gone else min(commits)
    old_cps = [k for k in sorted(cps) if k < newest and k + 1 < oldest and cps[k].mtime_ms <= cutoff]
    if not dry_run and (gone or old_cps):
        if log.last_checkpoint() < newest:
            storage.write(LAST_CHECKPOINT, json.dumps({"version": newest}).encode())
        for v in gone:
            storage.delete(commit_path(v))
        for k in old_cps:
            storage.delete(checkpoint_path(k))
    return LogCleanup(newest, oldest, tuple(gone), tuple(old_cps))
