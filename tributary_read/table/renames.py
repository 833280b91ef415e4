"""The rename protocol's roll-forward: committed files still under their hidden staged names.

Under the ``rename`` protocol a writer commits, then renames each staged file to
its final name. A crash in between leaves committed files hidden; the commit is
the truth, so whoever finds them (the next ingest, ``trib recover``, a reader)
finishes the renames. The protocol belongs to the table, below both the
writers and the readers that repair it.
"""

from __future__ import annotations

from typing import Sequence

from tributary_read.errors import StorageError, VerificationError
from tributary_read.table.config import Table
from tributary_read.table.log import META_DIR
from tributary_read.table.manifest import FileEntry

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
    here = st.stat_many([f.path for f in inputs])  # one batch: most were set aside long ago
    return finish_replace(table, outputs, [f for f, info in zip(inputs, here) if info is not None])


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
    """Move replaced files to :data:`REPLACED_DIR`; idempotent, a file already there is left."""
    st = table.storage
    moved = []
    for f in files:
        to = replaced_path(f.path)
        for name in (f.path, f.staged):
            if not (name and st.exists(name)):
                continue
            if st.exists(to):  # moved before a crash; a copying store left the source behind
                st.delete(name)
                continue
            st.makedirs(to.rsplit("/", 1)[0])
            st.rename(name, to)
            moved.append(f.path)
    return moved


#: Renames run at once on a remote store: there a rename is a round trip (on S3 a
#: server-side copy), and a commit of 24 hourly files would otherwise wait for 24.
REMOTE_RENAMES = 16


def roll_forward(table: Table, files: Sequence[FileEntry]) -> list[str]:
    """Rename committed-but-still-hidden files to their visible names; idempotent."""
    st = table.storage

    def one(f: FileEntry) -> str | None:
        if not (f.staged and st.exists(f.staged)):
            return None
        if not st.exists(f.path):
            st.rename(f.staged, f.path)
        else:  # renamed before a crash, staged copy left behind by a copying store
            st.delete(f.staged)
        return f.path

    staged = [f for f in files if f.staged]
    if len(staged) > 1 and st.capabilities.remote:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(staged), REMOTE_RENAMES), "trib-rename") as pool:
            done = list(pool.map(one, staged))
    else:
        done = [one(f) for f in staged]
    return [p for p in done if p is not None]


def finish_renames(table: Table, entries) -> dict[str, str]:
    """Roll forward committed files still under their staged names; returns path -> staged path for any left.

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
            raise VerificationError(f"committed file {st.uri}/{e.path} is missing (neither it nor its staged "
                                    f"name {e.staged} exists); run `trib verify`")
        left[e.path] = e.staged
    return left
