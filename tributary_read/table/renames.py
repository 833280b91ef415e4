"""The rename protocol's roll-forward: committed files still under their hidden staged names.

Under the ``rename`` protocol a writer commits, then renames each staged file to
its final name. A crash in between leaves committed files hidden; the commit is
the truth, so whoever finds them (the next ingest, ``trib recover``, a reader)
finishes the renames. The protocol belongs to the table, below both the
writers and the readers that repair it.

A committed file's bytes only ever move forward through its names: staged
(``.part-….inprogress``), final, set aside (:data:`REPLACED_DIR`, once a
compaction replaced it). A roll-forward moves staged -> final, a set-aside
moves either to set aside; nothing moves bytes back. Every step here that
looks at several names of one file looks at them in that order, and
tolerates a source that another process moved on first. That is what keeps
a roll-forward and a set-aside of the same file, in any interleaving, from
leaving the original visible beside its compacted copy (docs/compaction.md,
*A roll-forward racing the set-aside*).
"""

from __future__ import annotations

import posixpath
from typing import Sequence

from tributary_read.errors import StorageError, VerificationError
from tributary_read.faults import crash_point
from tributary_read.table.config import Table
from tributary_read.table.log import META_DIR
from tributary_read.table.manifest import Commit, FileEntry
from tributary_read.table.restate_swap import finish_restate, in_staging, restaged, swap

#: Where a compaction moves the files it replaced (``trib compact``): out of the partition
#: directories, so Hive and Spark directory readers count only the compacted copy, and under
#: their own names, since Spark reads an explicit path whose name starts with "." or "_" as
#: empty. Readers behind the compaction read them here until ``trib clean`` deletes them.
REPLACED_DIR = f"{META_DIR}/replaced"


def replaced_path(path: str) -> str:
    """Where the file committed as ``path`` lies once a compaction replaced it."""
    return f"{REPLACED_DIR}/{path}"


def locations(f: FileEntry) -> tuple[str, ...]:
    """Every name a committed file's bytes may have: final, staged, set aside by a compaction."""
    return tuple(p for p in (f.path, f.staged, replaced_path(f.path)) if p)


def removal_locations(r) -> tuple[str, ...]:
    """Every name the bytes of a removed file (a :class:`~tributary_read.table.state.Removal`) may have:
    :func:`locations`, and where a restate's swap set it aside."""
    if r.restated is None:
        return locations(r.entry)
    return (*locations(r.entry), in_staging(r.restated, r.entry.path))


def finish_compactions(table: Table, state, outputs: Sequence[FileEntry] | None = None, *,
                       since: int = 0) -> list[str]:
    """Finish what compactions that stopped after their commit left: each compacted file's inputs
    set aside, then the file revealed, in that order (:func:`finish_replace`); idempotent.

    ``outputs``: the compacted files to finish; default: those of ``state`` (the latest
    :class:`~tributary_read.table.state.TableState`) still under their staged names, and the
    inputs of every replace after version ``since`` found still in place. A compacted file's
    inputs are the files the state remembers as replaced by it. Any reader that finds a
    compacted file still staged calls this first, so a directory reader never sees a compacted
    file beside the files it replaced. Returns the paths set aside.
    """
    st = table.storage
    if outputs is None:
        staged = [f for f in state.files.values() if f.sources and f.staged]
        outputs = [f for f, info in zip(staged, st.stat_many([f.path for f in staged])) if info is None]
        recent = [r.entry for r in state.removed.values() if r.by is not None and r.version > since]
    else:
        recent = []
    wanted = {f.path for f in outputs}
    inputs = list({f.path: f for f in [*recent, *(r.entry for r in state.removed.values()
                                                    if r.by in wanted)]}.values())
    # Staged names first, then final ones (one batch each: most were set aside long ago). A file
    # rolled forward between the two looks is seen under one of them; looked at the other way round
    # it could be missed by both, and stay visible beside the compacted file this call reveals.
    staged = [f for f in inputs if f.staged]
    there = {f.path for f, info in zip(staged, st.stat_many([f.staged for f in staged])) if info is not None}
    there |= {f.path for f, info in zip(inputs, st.stat_many([f.path for f in inputs])) if info is not None}
    return finish_replace(table, outputs, [f for f in inputs if f.path in there])


def finish_replace(table: Table, added: Sequence[FileEntry], removed: Sequence[FileEntry]) -> list[str]:
    """After a replace commit: set the replaced files aside, then reveal the compacted ones; idempotent.
    Returns the paths set aside.

    In this order, a crash in between leaves a directory reader short of the
    compacted records for a moment (every trib reader reveals committed files it
    finds staged, :func:`finish_renames`), never counting them twice.
    """
    moved = set_aside(table, removed)
    roll_forward(table, added)
    return moved


def set_aside(table: Table, files: Sequence[FileEntry]) -> list[str]:
    """Move replaced files to :data:`REPLACED_DIR`; idempotent, a file already there is left.

    A file's staged name is retired before its final name. A roll-forward of the
    same commit (the writer's own, its app's next run, a reader's) only ever
    moves staged -> final, so once the staged name is gone nothing can bring the
    final name back; then the final name goes. The other way round, a
    roll-forward could move the file to its final name after that name was
    looked at and before the staged one was (on a store whose rename is a copy
    and a delete, from a copy a killed rename left behind), and the original
    stayed visible beside its compacted file for good.
    """
    st = table.storage
    moved = []
    for f in files:
        to = replaced_path(f.path)
        if f.staged and st.exists(f.staged):
            if st.exists(to) or st.exists(f.path):  # a leftover copy: its bytes are set aside or final
                st.delete(f.staged)
            elif _move(st, f.staged, to):
                moved.append(f.path)
        if st.exists(f.path):  # in place, or rolled forward by another process meanwhile
            if st.exists(to):  # moved before a crash; a copying store left the source behind
                st.delete(f.path)
            elif _move(st, f.path, to):
                moved.append(f.path)
    return moved


def _move(st, src: str, dst: str) -> bool:
    """Rename ``src`` to ``dst``; False when ``src`` went first (another process rolled it forward
    or set it aside), which is that process's step done, not a failure."""
    st.makedirs(dst.rsplit("/", 1)[0])
    try:
        st.rename(src, dst)
    except StorageError:
        if st.exists(src):
            raise
        return False
    return True


#: Renames run at once on a remote store: there a rename is a round trip (on S3 a
#: server-side copy), and a commit of 24 hourly files would otherwise wait for 24.
REMOTE_RENAMES = 16


def roll_forward(table: Table, files: Sequence[FileEntry]) -> list[str]:
    """Rename committed-but-still-hidden files to their visible names; idempotent. A restate's files
    move with their whole partition, in one directory swap (:mod:`~tributary_read.table.restate_swap`)."""
    st = table.storage
    done_paths: list[str] = []

    def one(f: FileEntry) -> str | None:
        # file_exists: each commit's files are looked at under both names; on S3 a look that finds
        # nothing is one HEAD that way, not a HEAD and a LIST.
        if not (f.staged and st.file_exists(f.staged)):
            return None
        if not st.file_exists(f.path):
            crash_point("roll_forward.before_rename")  # looked at both names, renames next
            try:
                st.rename(f.staged, f.path)
            except StorageError:
                if st.file_exists(f.staged):
                    raise
                return None  # moved on first: by a concurrent roll-forward, or set aside by a compaction
        else:  # renamed before a crash, staged copy left behind by a copying store
            st.delete(f.staged)
        return f.path

    staged = [f for f in files if f.staged]
    groups = restaged(staged)
    for (directory, staging), members in groups.items():  # a restated partition moves in whole, never a file
        if swap(table, directory, staging):
            done_paths.extend(f.path for f in members)
    if groups:
        moved = {f.path for fs in groups.values() for f in fs}
        staged = [f for f in staged if f.path not in moved]
    if len(staged) > 1 and st.capabilities.remote:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(staged), REMOTE_RENAMES), "trib-rename") as pool:
            done = list(pool.map(one, staged))
    else:
        done = [one(f) for f in staged]
    return done_paths + [p for p in done if p is not None]


def roll_forward_commit(table: Table, commit: Commit) -> list[str]:
    """Finish what ``commit``'s writer may have left after the commit point: its files' renames, or, for a
    restate, the swap of every partition it restates (one the recompute emptied has no file to find it by)."""
    if not commit.restated:
        return roll_forward(table, commit.files)
    moved = {r.staging for r in commit.restated if r.moved}  # their files stay put: only renamed in (HDFS)
    return finish_restate(table, commit) + roll_forward(
        table, [f for f in commit.files if posixpath.dirname(f.path) in moved])


def finish_renames(table: Table, entries) -> dict[str, str]:
    """Roll forward committed files still under their staged names; returns path -> where the bytes are
    for any not at their final name (staged, or set aside by a compaction since the caller read them).

    Under the ``rename`` protocol a crash between a commit and its renames
    leaves committed files hidden, and their final paths do not exist. The
    commit is the truth, so the reader finishes the renames itself (exactly
    what ``trib recover`` and the next ingest do; idempotent, and a concurrent
    roll-forward is harmless) instead of returning paths that do not exist.
    Where the store refuses (a read-only table), the staged path is returned:
    the same committed bytes, readable where the final name is not. Only
    rename-protocol entries are checked, with one batched stat; a final path
    whose bytes are gone under both names is a verification failure (exit 9),
    never silently dropped from a batch a consumer will ack.
    """
    staged = [e for e in entries if e.staged]
    if not staged:
        return {}
    st = table.storage
    found = st.stat_many([e.path for e in staged])
    pending = [e for e, i in zip(staged, found) if i is None]
    if not pending:
        return {}
    try:
        compacted = [e for e in pending if e.sources]
        if compacted:  # a compaction stopped after its commit: its inputs leave the directory first
            finish_compactions(table, table.log.state(), compacted)
        roll_forward(table, pending)
    except StorageError:
        pass  # read-only, or a concurrent reader renamed first: look again
    left: dict[str, str] = {}
    for e, final, stage in zip(pending, st.stat_many([e.path for e in pending]),
                               st.stat_many([e.staged for e in pending])):
        if final is not None:
            continue
        if stage is None:
            if st.exists(e.path):  # rolled forward between the two looks
                continue
            aside = replaced_path(e.path)
            if st.exists(aside):  # a compaction replaced it since the caller read its state: same bytes
                left[e.path] = aside
                continue
            raise VerificationError(f"committed file {st.uri}/{e.path} is missing (neither it nor its staged "
                                    f"name {e.staged} exists); run `trib verify`")
        left[e.path] = e.staged
    return left
