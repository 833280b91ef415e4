"""A restated partition reaches directory readers whole: its new files are staged in a hidden sibling
directory, and after the commit the two directories swap names in one step.

Why a directory swap, not per-file renames: a restate replaces a partition's whole file set
and may change its records (late data corrected an aggregate). Renaming new files in one by
one and the old ones out lets a directory reader (Hive, Spark over a partition, ``ls``) list
the old files and some new ones together, or neither; an aggregate read then is wrong
without any error. ``renameat2(RENAME_EXCHANGE)`` swaps ``base/2026_11_28/06`` with
``base/2026_11_28/.06.restate-RUN`` atomically: every listing sees the old partition or the
new one. The hidden directory then holds the old files, set aside for readers behind the
restate until ``trib clean``.

Each staging directory holds a hidden marker file named for it, so whether a swap was made is
one look: the marker is in the partition's directory once it was. The look and the swap run
under one lock (:meth:`~tributary_read.io.storage.Storage.exchange_dirs`), so two processes
finishing the same commit (the writer and a reader rolling forward) never swap it back.

Where the store cannot swap directories (S3, HDFS: :func:`moves`), a restate takes the Hive-native
way, as ``INSERT OVERWRITE`` does: the new files are written into the same hidden sibling and stay
there (their manifest paths are there, nothing is renamed); trib's readers take them as the
partition's files (:func:`logical_path`), and the Hive sync moves the partition's location in the
metastore to that directory after the commit (:func:`partition_dir`, the one owner of where a
partition's files are now). The old files stay where they were until ``trib clean`` removes them
like any removed file. A plain directory reader of the table's root then sees the old partition:
such a job must keep a Hive table (:func:`tributary_read.etl.restate.check`).

The swap moves a whole directory, so it would also move aside what other tools keep in the
partition. :func:`foreign` decides, per name, what is trib's own and what is not:

* another tool's data or directory (a visible name): a directory reader (Hive) counts it, and
  a swap would hide it. Such a partition is not restated (:func:`obstacle`, asked before any
  work); nor is one that is, or lies under, a symbolic link (the swap would exchange the link).
* another tool's marker or sidecar (``_SUCCESS``, ``.x.crc``): carried into the staging directory
  just before the swap (:func:`carry_over`, a hard link where the store has them), so readers
  still see it; whatever such entry appears after that is moved back right after (:func:`settle`).
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Collection, Sequence

from dataclasses import dataclass

from tributary_read.errors import InvalidInputError, StorageError, VerificationError
from tributary_read.faults import crash_point
from tributary_read.io.storage import ENTRY_DIR, ENTRY_FILE, STAGED_NAME
from tributary_read.table.names import WRITTEN_NAME

if TYPE_CHECKING:  # pragma: no cover - the manifest checks a restate's paths by this module's names
    from tributary_read.table.manifest import Commit, FileEntry

#: The staging directory's name: ``.<partition leaf>.restate-<run id>`` beside the partition's directory.
STAGING_INFIX = ".restate-"
#: The marker file in a staging directory: ``.trib-<its name without the dot>``.
MARKER_PREFIX = ".trib-"


def moves(storage, by: str | None = None) -> bool:
    """Whether a restate on ``storage`` moves the partition (new files stay in their own directory, the Hive
    sync moves the partition's location) rather than swapping two directories: the job asks for it
    (``by`` = ``"move"``, a job's ``[output] restate_by``), or the store cannot swap (``"swap"`` asked there is
    refused by :func:`~tributary_read.table.restatement.check_storage`)."""
    return by == "move" or not storage.capabilities.exchange_directories


def partition_dir(state, directory: str) -> str:
    """Where the live files of partition ``directory`` are now: the directory of its newest moved restate
    (:func:`moves`), else ``directory`` itself. Every Hive partition location is derived from this, never
    from the layout alone (a moved partition's layout directory still holds its old files)."""
    return state.locations.get(directory, directory)


def check_not_moved(state, files, uri: str) -> None:
    """Refuse an append into a partition a restate moved (one line, nothing committed): its new file would lie in
    the layout directory, beside the old files, where Hive no longer looks; only a restate writes it since."""
    for f in files:
        d = posixpath.dirname(f.path)
        if d in state.locations:
            raise InvalidInputError(
                f"partition {d} of {uri} was recomputed by a restate that moved it to {state.locations[d]} (where "
                f"Hive reads it), so {f.path} appended there would be invisible to Hive; nothing was committed: "
                "write this partition only through its restate job")


def staging_dir(directory: str, run_id: str) -> str:
    """The hidden sibling of partition ``directory`` that run ``run_id`` stages its new files in."""
    parent, _, leaf = directory.rpartition("/")
    if not leaf:
        raise InvalidInputError("a restated partition needs a directory of its own, not the table's root")
    return posixpath.join(parent, f".{leaf}{STAGING_INFIX}{run_id}")


def marker(staging: str) -> str:
    """The marker's name (not its path) for ``staging``."""
    return MARKER_PREFIX + posixpath.basename(staging).lstrip(".")


def in_staging(staging: str, path: str) -> str:
    """``path``'s name in ``staging``: where a restate writes a new file of the partition, and where the swap
    leaves a file it removed (set aside)."""
    return posixpath.join(staging, posixpath.basename(path))


def is_marker_name(name: str) -> bool:
    """Whether ``name`` is a restate's marker file (trib's own, never another tool's file)."""
    return name.startswith(MARKER_PREFIX) and STAGING_INFIX in name


def is_staging_name(name: str) -> bool:
    """Whether ``name`` (a directory's base name) is a restate's staging directory (``trib clean``'s to judge)."""
    return name.startswith(".") and STAGING_INFIX in name


#: :func:`foreign`'s answers for another tool's entry: a visible name, or a hidden one (``.`` or ``_`` first).
VISIBLE, HIDDEN = "visible", "hidden"
#: Names an obstacle shows; the count of the rest follows.
SHOWN = 3


def names_by_dir(files) -> dict[str, set[str]]:
    """The base names of ``files`` by the directory they lie in: the names :func:`foreign` takes as trib's
    (``committed``: a table's files; :func:`settle`'s ``old``: those a restate removed)."""
    out: dict[str, set[str]] = {}
    for f in files:
        d, _, name = f.path.rpartition("/")
        out.setdefault(d, set()).add(name)
    return out


def foreign(name: str, committed: Collection[str] = ()) -> str | None:
    """Whose entry ``name`` of a partition directory is, as a restate replacing the directory treats it.

    None: trib's own, moved aside with the old files: one of ``committed`` (the names of the files the
    table commits in that directory, where the caller knows them), a data file by its writers' names
    (an uncommitted one is an orphan for ``trib clean``), a staged copy, a restate's marker (which says
    which restate holds the partition, so never carried). Else another tool's: :data:`VISIBLE` (Hive and
    Spark read it: the partition is not restated) or :data:`HIDDEN` (a marker or sidecar, carried into
    the new partition). The check before the run, the carry-over and the move back after the swap all
    ask here, so they never disagree.
    """
    if name in committed or WRITTEN_NAME.match(name) or STAGED_NAME.match(name) or is_marker_name(name) \
            or is_staging_name(name):
        return None
    return HIDDEN if name[:1] in "._" else VISIBLE


@dataclass(frozen=True)
class Obstacle:
    """Why partition ``directory`` cannot be restated now: a symbolic link on its way (``link``), or
    entries of other tools a swap would hide (``names``: directories end in ``/``)."""

    directory: str
    link: str | None = None
    names: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.link == self.directory:
            return f"{self.directory} is a symbolic link"
        if self.link is not None:
            return f"{self.directory} lies under the symbolic link {self.link}"
        more = f" and {len(self.names) - SHOWN} more" if len(self.names) > SHOWN else ""
        return f"{self.directory} ({', '.join(self.names[:SHOWN])}{more})"


def obstacle(storage, directory: str, committed: Collection[str] = ()) -> Obstacle | None:
    """What keeps partition ``directory`` from being restated, or None (see the module docstring);
    ``committed``: :func:`foreign`'s.

    A hidden entry trib cannot carry over (a symbolic link, a name that is not UTF-8) counts as a
    visible one: nothing of another tool's is ever left behind silently.
    """
    parts = directory.split("/")
    ways = ["/".join(parts[:i + 1]) for i in range(len(parts))]
    links = storage.links(ways)
    if links:
        return Obstacle(directory, link=next(w for w in ways if w in links))
    names = sorted(name + ("/" if is_dir else "") for name, is_dir, odd in _entries(storage, directory)
                   if foreign(name, committed) == VISIBLE or (foreign(name, committed) == HIDDEN and odd))
    return Obstacle(directory, names=tuple(names)) if names else None


def _entries(storage, directory: str) -> list[tuple[str, bool, bool]]:
    """``(name, is a directory, odd)`` of ``directory``'s entries; odd: not to be copied or listed into (a
    symbolic link, a pipe or socket, a name that is not UTF-8)."""
    infos, unlisted = storage.list_infos(directory, recursive=False)
    rels = [storage._rel(i.path) for i in infos]
    linked = storage.links([r for r, i in zip(rels, infos) if i.type != ENTRY_DIR])
    out = [(posixpath.basename(r), i.type == ENTRY_DIR, r in linked or i.type not in (ENTRY_FILE, ENTRY_DIR))
           for r, i in zip(rels, infos)]
    return out + [(posixpath.basename(u.path), u.is_dir, True) for u in unlisted]


def carry_over(storage, directory: str, staging: str) -> list[str]:
    """Link or copy another tool's hidden entries of ``directory`` into ``staging`` (a directory file by
    file); returns the paths made, for the caller to make durable before the swap."""
    made = []
    for name, is_dir, odd in _entries(storage, directory):
        if odd or foreign(name) != HIDDEN:
            continue
        top = posixpath.join(directory, name)
        for src in [f.path for f in storage.list(top)] if is_dir else [top]:
            dst = posixpath.join(staging, posixpath.relpath(src, directory))
            try:
                storage.copy(src, dst)
            except StorageError:
                if storage.exists(src):
                    raise
                continue  # removed by its tool meanwhile: nothing to carry
            made.append(dst)
    return made


def settle(storage, directory: str, aside: str, old: Collection[str] | None = None) -> list[str]:
    """After the swap: another tool's entries that the old partition (now ``aside``) holds go back into
    ``directory``. One that appeared after the carry-over is moved back; the original of a carried copy
    replaces it (it may have changed since the copy), so the set-aside directory keeps trib's files only,
    for ``trib clean``. ``old``: the names of the files the restate removed there (its commit's); without
    them (a reader finishing a swap from the files alone) only hidden entries go back, never a file that
    may be an old one of the partition. Idempotent; returns the paths moved back."""
    moved = []
    for name, is_dir, odd in _entries(storage, aside):
        src, dst = posixpath.join(aside, name), posixpath.join(directory, name)
        kind = foreign(name, old or ())
        if kind is None or (old is None and kind == VISIBLE) or (odd and storage.exists(dst)):
            continue  # trib's, or a link whose name the partition has again: never renamed over
        if is_dir and not odd and storage.exists(dst):  # carried file by file: its originals go back the same way
            for f in storage.list(src):
                if _move_back(storage, f.path, posixpath.join(dst, posixpath.relpath(f.path, src))):
                    moved.append(f.path)
            infos, _ = storage.list_infos(src)
            for d in sorted((storage._rel(i.path) for i in infos if i.type == ENTRY_DIR), reverse=True):
                storage.remove_empty_dir(d)
            storage.remove_empty_dir(src)
        elif _move_back(storage, src, dst):
            moved.append(src)
    return moved


def _move_back(storage, src: str, dst: str) -> bool:
    try:
        storage.rename(src, dst)
    except StorageError:
        if storage.exists(src):
            raise
        return False  # moved back by another process finishing the same swap
    if storage.exists(src):  # a hard link of ``dst`` (its carried copy): renaming one name of a file over another does nothing
        storage.delete(src)
    return True


def logical_path(path: str) -> str:
    """``path`` with a staging directory named as the partition it stages (or set aside): a file a reader
    is handed from there is judged by the name it has in the table (visible, its partition)."""
    parent, _, name = path.rpartition("/")
    grand, _, leaf = parent.rpartition("/")
    if not is_staging_name(leaf):
        return path
    return posixpath.join(grand, leaf[1:leaf.index(STAGING_INFIX)], name)


def logical_dir(path: str) -> str:
    """The partition directory a file lies in, by its name in the table (:func:`logical_path`)."""
    return posixpath.dirname(logical_path(path))


def prepare(storage, staging: str) -> str:
    """Make ``staging`` with its marker; returns the marker's path, for the caller to make durable with the files."""
    storage.makedirs(staging)
    path = posixpath.join(staging, marker(staging))
    storage.write(path, b"")
    return path


def swap(table, directory: str, staging: str, old: Collection[str] | None = None) -> bool:
    """Swap ``staging`` in as ``directory``, unless it was already; True if this call swapped it. Other tools'
    hidden entries are carried over before, and theirs that the old partition still holds moved back after
    (``old``: :func:`settle`'s).

    The marker under neither name means a later restate of the partition was swapped in since
    (its staging directory now holds this one's content, marker included): nothing left to do. With
    no later restate's marker in the partition either, the committed restate's files are gone: a
    verification failure, never silently skipped.
    """
    st = table.storage
    done = posixpath.join(directory, marker(staging))
    if st.file_exists(done):
        settle(st, directory, staging, old)  # a run that stopped right after the swap
        return False
    if not st.file_exists(posixpath.join(staging, marker(staging))):
        if st.file_exists(done):  # swapped between the two looks
            return False
        if any(is_marker_name(f.path.rpartition("/")[2]) for f in st.list(directory, recursive=False)):
            return False  # superseded: a later restate holds the partition
        raise VerificationError(f"restated partition {st.uri}/{directory}: neither it nor its staging directory "
                                f"{staging} holds the restate's marker {marker(staging)}; run `trib verify`")
    st.sync_many(carry_over(st, directory, staging))
    crash_point("restate.before_swap")
    swapped = st.exchange_dirs(staging, directory, unless=done)
    crash_point("restate.after_swap")
    settle(st, directory, staging, old)
    return swapped


def finish_restate(table, commit: Commit) -> list[str]:
    """After a restate commit: swap each restated partition in (idempotent); returns the directories swapped.
    A moved restate (:attr:`Restatement.moved`) has nothing to swap: its files stay where they were written."""
    old = names_by_dir(commit.removed)
    return [r.directory for r in commit.restated
            if not r.moved and swap(table, r.directory, r.staging, old.get(r.directory, set()))]


def restaged(files: Sequence[FileEntry]) -> dict[tuple[str, str], list[FileEntry]]:
    """The files among ``files`` staged in a restate's staging directory, by (directory, staging).

    Such a file reaches its final name only with its whole partition (:func:`swap`), never alone:
    the rename protocol's staged files sit beside their final name, a restate's in a sibling directory.
    """
    out: dict[tuple[str, str], list[FileEntry]] = {}
    for f in files:
        if f.staged and posixpath.dirname(f.staged) != posixpath.dirname(f.path) \
                and is_staging_name(posixpath.basename(posixpath.dirname(f.staged))):
            out.setdefault((posixpath.dirname(f.path), posixpath.dirname(f.staged)), []).append(f)
    return out
