"""Tables over foreign data: which files the manifest tracks, and which a listing does.

A trib table's directory may also hold files other tools write (Flume, rsync,
Flink): that is how a directory is adopted, with ``trib table create`` over it
for its stored layout (``partitions sync``). The table's ``tracking`` property
(table.json) says how readers find each kind:

* ``manifest``: the log only. Visible files it does not list are *untracked*.
* ``listing``: a listing only. Commits in the log are untracked.
* ``both``: trib-written files by the log, every other file by listing.

Under ``listing`` and ``both`` the split is by *name* (:func:`is_written`),
never by asking the log: each file is then classified the same way by every
run, whatever was committed when, so no file can come both ways. A trib-named
file that a listing sees is committed (the manifest delivers it, in a later plan
if it was committed after the plan read the log) or an orphan (``trib clean``'s
business); a listing never delivers it. A file another writer commits under a
non-trib name into a ``both`` table is delivered by listing, like any foreign file.

Untracked data is never a silent "0 files" (:func:`check_untracked`), and a run
that would deliver a manifest-tracked table's answer while leaving untracked
files of its scope behind fails (:func:`refuse_untracked`), unless its caller
opted out: exit 0 must never mean "data left behind". So a run that can fail
lists its whole scope, whatever its answer holds (:func:`checks_completely`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, TypeVar

from tributary_read.errors import InvalidLayoutError, UntrackedDataError
from tributary_read.table.layout import Layout
from tributary_read.read.listing import Listing, scan
from tributary_read.read.partition_filter import PartitionFilter
from tributary_read.read.visibility import is_hidden_name
from tributary_read.read.window import MAX_MS, MIN_MS, TimeWindow
from tributary_read.io.storage import Storage
from tributary_read.table.names import WRITTEN_NAME

#: Directories of a non-empty manifest answer listed for untracked files by a run that only warns.
PROBE_DIRS = 32
EXAMPLES = 3

_P = TypeVar("_P")


def is_written(path: str) -> bool:
    """Whether a file's name is one trib's writers produce (data, dead letter or staged)."""
    name = path.rpartition("/")[2]
    return name[:1] in ("p", "d", ".") and WRITTEN_NAME.match(name) is not None


def foreign(files: Iterable[_P]) -> list[_P]:
    """The files (anything with a ``path``) not named like trib's writers name theirs."""
    return [f for f in files if not is_written(f.path)]  # type: ignore[attr-defined]


def written(files: Iterable[_P]) -> list[_P]:
    return [f for f in files if is_written(f.path)]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Untracked:
    """Data a table holds that this answer does not return, and how to get it.

    ``unit`` is ``files`` (visible files the log does not list, found by a
    listing of ``scope``) or ``commits`` (log versions a listing-only read skips).
    """

    count: int
    unit: str
    scope: str
    examples: tuple[str, ...]
    fix: str

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "unit": self.unit, "scope": self.scope, "examples": list(self.examples),
                "fix": self.fix}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Untracked:
        return cls(int(d["count"]), str(d["unit"]), str(d["scope"]), tuple(d.get("examples") or ()), str(d["fix"]))

    def message(self) -> str:
        if self.unit == "commits":
            what = f"the table's log holds {self.count} commits of trib-written files"
        else:
            eg = f" (e.g. {self.examples[0]})" if self.examples else ""
            what = f"{self.count} files in the {self.scope} are not tracked by the table's manifest{eg}"
        return f"warning: {what} and were not returned; {self.fix}"

    def refusal(self) -> str:
        """The one-line error of a run that would leave these files unread (:func:`refuse_untracked`)."""
        eg = f" (e.g. {self.examples[0]})" if self.examples else ""
        return (f"{self.count} files in the {self.scope} are not tracked by the table's manifest{eg} and this "
                f"run would leave them unread; {self.fix}, or pass {ALLOW_WORDS} to read the manifest only")


#: How the opt-out is named in messages; each front end puts its own spelling in its place
#: (``TributaryError.reword``: ``--allow-untracked``, ``allow_untracked = true``).
ALLOW_WORDS = "allow_untracked=True"


def refuse_untracked(table, untracked: Untracked | None, *, allow: bool) -> Untracked | None:
    """Raise :class:`UntrackedDataError` when a run on a manifest-tracked table would leave files unread.

    The one place that decides it, for every run that delivers an answer
    (resolve, consumers, and through them ETL jobs and Spark). Only the table's
    own ``manifest`` tracking refuses: ``listing`` or ``both`` tables, and an
    explicit ``mode manifest`` read of a ``both`` table, are narrow choices a
    user made, so they keep the warning. ``allow`` (the explicit opt-out) keeps
    the warning too. Returns ``untracked`` otherwise.
    """
    if untracked is None or untracked.unit != "files" or not checks_completely(table, allow=allow):
        return untracked
    raise UntrackedDataError(untracked.refusal(), allow_untracked=ALLOW_WORDS)


def checks_completely(table, *, allow: bool) -> bool:
    """Whether a manifest answer on ``table`` is checked against a listing of its whole scope.

    Exactly the runs that can be refused: a check that may fail a run must see
    every foreign file it could fail for, or exit 0 would again mean "data left
    behind" whenever the foreign file lies in a partition the answer does not
    touch. The other runs (opted out, or on a table whose tracking is a user's
    narrow choice) only warn, so they take the cheap probe of
    :func:`check_untracked`.
    """
    return not allow and table is not None and table.config.tracking == "manifest"


def _fix(uri: str, tracking: str, asked: str) -> str:
    if tracking == "both":
        return f"read in mode auto, not {asked}: the table tracks both"
    return f"to read them too: trib table set {uri} --tracking both"


def find_foreign(storage: Storage, layout: Layout, partitions: PartitionFilter | None = None,
                 window: TimeWindow | None = None) -> tuple[list[str], int]:
    """Visible files not named like trib's, and how many more lie outside the layout's directories.

    A full listing (pruned to ``partitions``, and to files modified in
    ``window``): what the create-time detection and the empty-answer check cost.
    """
    listing = scan(storage, layout, partitions=partitions, window=window)
    paths = sorted(f.path for f in listing.files if not is_written(f.path))
    outside = sum(1 for s in listing.skipped if not is_written(s.path))
    return paths, outside


def refuse_unmatched(listing: Listing, layout: Layout, uri: str, storage: Storage | None = None) -> None:
    """Refuse (InvalidLayoutError, exit 3) a listing of a plain directory in which ``layout`` fit no
    directory while files lay in directories it does not fit: the layout or ROOT is wrong, and
    "0 files" would read as "nothing new" to a scheduled job, run after run. A directory with no
    file at all, or none in the read's window, is an empty answer, not this.

    A listing pruned to a partition filter's candidate directories looked only where the layout
    points, so it cannot see what lies elsewhere: given ``storage``, the root's top level is listed
    once, and directories there that none fits the layout's first level are the same mistake.
    """
    if listing.partitions or listing.filtered_out:
        return
    if listing.unfit:
        raise InvalidLayoutError(
            f"no directory of {uri} fits {layout.directory!r}: directories there do not (e.g. {listing.unfit}); "
            "check the layout and ROOT", layout="the layout")
    if not listing.skipped:
        if storage is None or listing.strategy != "candidates":
            return
        top = sorted(d.path.rstrip("/").rpartition("/")[2] for d in storage.list_dirs(""))
        top = [n for n in top if not is_hidden_name(n)]
        if not top or any(layout.fits_top(n) for n in top):
            return
        raise InvalidLayoutError(
            f"no directory of {uri} fits {layout.directory!r}: its top-level directories do not (e.g. {top[0]}); "
            "check the layout and ROOT", layout="the layout")
    s = listing.skipped[0]
    raise InvalidLayoutError(
        f"no directory of {uri} fits {layout.directory!r}: {len(listing.skipped)} files lie in directories that "
        f"do not (e.g. {s.path}: {s.reason}); check the layout and ROOT", layout="the layout")


def _probe(storage: Storage, dirs: Sequence[str], window: TimeWindow | None = None) -> list[str]:
    out = []
    for d in dirs:
        for f in storage.list(d, recursive=False):
            name = f.path.rpartition("/")[2]
            if not is_hidden_name(name) and not is_written(f.path) and (window is None or f.mtime_ms in window):
                out.append(f.path)
    return sorted(out)


def version_span(table, since: int, until: int) -> TimeWindow | None:
    """The times a version range's commits cover: after commit ``since``, up to commit ``until`` (None: all).

    A range open at the top (up to the latest version) covers everything
    written since, as the next commit would.
    """
    latest = table.log.latest_version()
    lo = table.log.read_commit(since) if since > 0 else None
    hi = table.log.read_commit(until) if 0 < until < latest else None
    if lo is None and hi is None:
        return None
    start = lo.timestamp_ms + 1 if lo is not None else MIN_MS
    return TimeWindow(start, max(start, hi.timestamp_ms) if hi is not None else MAX_MS)


def check_untracked(table, answer: Sequence, *, tracking: str, asked: str = "auto",
                    partitions: PartitionFilter | None = None, window: TimeWindow | None = None,
                    versions: tuple[int, int] | None = None, allow: bool = False) -> Untracked | None:
    """What a ``tracking``-only answer on ``table`` leaves out, or None.

    Callers pass what they read; the read's *scope* is decided here:
    ``partitions`` and, for a commit-time ``window`` or a version range
    ``versions`` = (since, until), only files modified in that window or after
    commit ``since`` (:func:`version_span`). Such a read would have returned a
    file only if it had been committed then, and a file is committed when it is
    written; files modified elsewhen are another read's business, so they
    neither warn nor fail this one. A file copied in with its old mtime kept
    (``rsync -t``, ``cp -p``) therefore escapes a window's check. A consumer
    passes neither: its reads together cover the whole table, every foreign file
    of which it would leave behind for good, whatever its mtime.

    How much to list: a run that can be refused (:func:`checks_completely`)
    lists its whole scope, empty answer or not, so no foreign file of the scope
    escapes it; that costs one listing of the scope per run, the same as one
    mtime read. A run that only warns (``allow``, or a table not tracked
    ``manifest``) lists the scope only for an empty answer (never a silent
    "0 files"), and otherwise just the partition directories the answer touches
    (at most :data:`PROBE_DIRS`): fast, and narrow. A listing answer costs a
    few existence checks of the log. Paths the log lists (committed or expired)
    are never counted.
    """
    uri = table.uri
    fix = _fix(uri, table.config.tracking, asked)
    if tracking == "listing":
        latest = table.log.latest_version()
        return Untracked(latest, "commits", "log", (), fix) if latest else None
    span = "window" if window is not None else "version range"
    if window is None and versions is not None:
        window = version_span(table, *versions)
    if answer and not checks_completely(table, allow=allow):
        dirs = sorted({f.path.rpartition("/")[0] for f in answer if "/" in f.path})[:PROBE_DIRS]
        found, scope = _probe(table.storage, dirs, window), "partitions of the answer"
    else:  # outside the layout: never readable
        found, _ = find_foreign(table.storage, table.layout, partitions, window)
        scope = "requested partitions" if partitions is not None else "table"
    if window is not None:
        scope += f" modified in the read's {span}"
    if found:  # rare: only now is the log read whole, for files committed under foreign names
        state = table.log.state()
        known = set(state.files) | set(getattr(state, "removed", {}) or {})
        found = [p for p in found if p not in known]
    if not found:
        return None
    return Untracked(len(found), "files", scope, tuple(found[:EXAMPLES]), fix)
