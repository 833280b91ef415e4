"""Verify a table against its log, and clean up what no commit references.

:func:`require_consistent` is the one gate of every command that deletes
(``clean``, ``expire``, log retention): it runs ``verify``'s checks and
refuses on any problem, because what a delete may take is judged from the log,
and a log that is not whole may be hiding the commit that names a file.

Only files whose names trib's writers produce are ever called orphans or
deleted: a table created over a directory that other tools also write to must
never lose their data to ``clean``. Everything else unreferenced is reported
as untracked and left alone.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from tributary_read.errors import VerificationError
from tributary_read.table.log import META_DIR
from tributary_read.table.logcheck import check_log
from tributary_read.io.storage import STAGED_NAME, FileInfo, Unlisted
from tributary_read.table.config import Table
from tributary_read.table.manifest import DEAD_LETTER_DIR
from tributary_read.table.names import WRITTEN_NAME
from tributary_read.table.renames import removal_locations
from tributary_read.table.restate_swap import is_marker_name, is_staging_name

#: ``_tributary/`` is trib's namespace: the table's own files (table.json, its
#: pinned placement, the log, its checkpoint pointer) and one directory per kind
#: of state the layers above keep there (consumers, Hive sync state, ETL locks:
#: their names are theirs, not this module's). Neither data nor orphans: reporting a consumer's
#: plan as "untracked data" would be a wrong answer. A stray file directly under
#: ``_tributary/`` is reported. The dead-letter directory is the exception: its
#: files are data, committed like any other, so an unreferenced one is an orphan.
_METADATA = re.compile(
    rf"^{META_DIR}/(table\.json|placement\.json|_last_checkpoint|compacted|restated|log/[0-9]{{20}}(\.checkpoint)?\.json"
    rf"|(?!{DEAD_LETTER_DIR[len(META_DIR) + 1:]}/|log/)[^/]+/.+)$")


@dataclass(frozen=True)
class Problem:
    path: str
    problem: str  # missing | size_mismatch | pending_roll_forward | replaced_in_place
    expected_size: int
    actual_size: int | None = None
    detail: str = ""  # log problems (log_gap, checkpoint_mismatch, …): what is wrong

    def to_json(self) -> dict:
        return self.__dict__.copy()

    def describe(self) -> str:
        if self.detail:
            return f"{self.problem}: {self.path}: {self.detail}"
        return f"{self.problem}: {self.path} (expected {self.expected_size} bytes, found {self.actual_size})"


@dataclass(frozen=True)
class VerifyReport:
    version: int
    committed_files: int
    problems: list[Problem] = field(default_factory=list)
    orphans: list[FileInfo] = field(default_factory=list)
    untracked: list[FileInfo] = field(default_factory=list)
    #: Symbolic links and undecodable names: reported, never followed or deleted.
    unlisted: list[Unlisted] = field(default_factory=list)
    #: Files an expire commit removed whose bytes wait for the grace period (not orphans).
    removed: list[FileInfo] = field(default_factory=list)
    #: The partition commit's markers (``_SUCCESS``): trib wrote them, no commit lists them.
    markers: list[FileInfo] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "version": self.version,
            "committed_files": self.committed_files,
            "problems": [p.to_json() for p in self.problems],
            "orphans": [{"path": o.path, "size": o.size, "mtime_ms": o.mtime_ms} for o in self.orphans],
            "untracked": [{"path": o.path, "size": o.size, "mtime_ms": o.mtime_ms} for o in self.untracked],
            "unlisted": [u.to_json() for u in self.unlisted],
            "removed": [{"path": o.path, "size": o.size, "mtime_ms": o.mtime_ms} for o in self.removed],
            "markers": len(self.markers),
        }


def size_problem(path: str, size: int, found: FileInfo | None) -> Problem | None:
    """The one comparison of a committed file with its manifest entry (``verify``, and every read before
    Spark reads: tributary_read.read.sizes): ``missing`` or ``size_mismatch``, None when it matches.

    A committed file's size never changes (compaction writes a new file), so any other size means its
    bytes are not the ones the commit listed: truncated, or rewritten by something outside trib.
    """
    if found is None or found.is_dir:
        return Problem(path, "missing", size)
    if found.size != size:
        return Problem(path, "size_mismatch", size, found.size)
    return None


def _is_trib_written(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return bool(WRITTEN_NAME.match(name) or STAGED_NAME.match(name))


def verify(table: Table, marker: str | None = None) -> VerifyReport:
    """Check every committed file exists with its recorded size; list the rest.

    The listing is taken before the state is read, so a file committed in
    between is seen as referenced rather than as an orphan. ``marker``: the name
    of the partition commit's marker (its owner, tributary_read.hive.commit, says
    which), counted as trib's own rather than as another tool's file.
    """
    files, unlisted = table.storage.walk()
    listed = {f.path: f for f in files}
    state = table.log.state()  # a corrupt commit readers reach raises (exit 6), for every caller alike
    logcheck = check_log(table.log)  # listed after the files: it sees every commit they can belong to
    problems = [Problem(p.path, p.problem, 0, None, p.detail) for p in logcheck.problems]
    referenced: set[str] = set(logcheck.referenced)
    for entry in state.files.values():
        referenced.add(entry.path)
        if entry.staged:
            referenced.add(entry.staged)
        got = listed.get(entry.path)
        if got is None:
            staged = listed.get(entry.staged) if entry.staged else None
            if staged is not None and staged.size == entry.size:
                problems.append(Problem(entry.path, "pending_roll_forward", entry.size, staged.size,
                                        "a compacted file: `trib compact` (or any trib read) finishes it"
                                        if entry.sources else ""))
            else:
                problems.append(Problem(entry.path, "missing", entry.size))
        elif (wrong := size_problem(entry.path, entry.size, got)) is not None:
            problems.append(wrong)
    orphans: list[FileInfo] = []
    untracked: list[FileInfo] = []
    removed: list[FileInfo] = []
    markers: list[FileInfo] = []
    gone = {p for r in state.removed.values() for p in removal_locations(r)}
    for r in state.removed.values():
        if r.by is not None and r.entry.path in listed and r.entry.path not in referenced:
            # A compaction committed, then stopped before setting it aside: directory readers count it twice.
            problems.append(Problem(r.entry.path, "replaced_in_place", r.entry.size, listed[r.entry.path].size,
                                    f"compacted into {r.by} at version {r.version} but still in its partition"))
    for path, f in sorted(listed.items()):
        if path in referenced or _METADATA.match(path):
            continue
        if path in gone:
            removed.append(f)  # deleted by `trib clean`/`trib expire` once past the grace
            continue
        if marker is not None and path.rpartition("/")[2] == marker or is_marker_name(path.rpartition("/")[2]):
            markers.append(f)
            continue
        (orphans if _is_trib_written(path) else untracked).append(f)
    return VerifyReport(state.version, len(state.files), problems, orphans, untracked, unlisted, removed, markers)


def require_consistent(table: Table, command: str) -> VerifyReport:
    """``verify``'s report, or VerificationError (exit 9) naming the first problem; nothing is deleted then.

    Every command that deletes data or log files calls this first (or is
    handed the report its caller got from it): a gap, a misnamed commit or a
    checkpoint that disagrees means the log may not say what it references.
    """
    report = verify(table)
    if not report.ok:
        first = report.problems[0]
        more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        hint = (f"run `trib recover {table.uri} --app-id ID` to finish the renames"
                if first.problem == "pending_roll_forward" and not first.detail else
                f"run `trib compact {table.uri}` to finish the compaction"
                if first.problem in ("replaced_in_place", "pending_roll_forward")
                else f"see `trib verify {table.uri}`")
        raise VerificationError(f"{command} refused, nothing deleted: {first.describe()}{more}; {hint}")
    return report


def clean(table: Table, older_than_ms: int, dry_run: bool = False, *,
          checked: VerifyReport | None = None) -> list[FileInfo]:
    """Delete orphans older than the grace period; never a committed or foreign file.

    The grace period protects writers that are still running: their files are
    orphans only until their next commit lands. ``checked``: the report of
    :func:`require_consistent` this run already has (else it is made here).
    """
    if older_than_ms < 0:
        raise ValueError("grace period must be >= 0")
    cutoff = int(time.time() * 1000) - older_than_ms
    report = checked if checked is not None else require_consistent(table, "clean")
    victims = [o for o in report.orphans if o.mtime_ms <= cutoff]
    # A restate's marker is trib's own (never an orphan by name): one in a staging directory goes with
    # it once that directory is abandoned; one in a partition's own directory says which restate it holds.
    victims += [m for m in report.markers if m.mtime_ms <= cutoff and _staging_dir(m.path)
                and is_marker_name(m.path.rpartition("/")[2])]
    if not dry_run:
        # Re-read the state just before deleting: a commit may have landed since.
        state = table.log.state()
        live = set(state.files) | {f.staged for f in state.files.values() if f.staged}
        live |= check_log(table.log).referenced  # any commit file on storage, reachable or not
        # a staging directory a committed file is staged in, or a removed one set aside in: not abandoned
        used = {f.staged.rpartition("/")[0] for f in state.files.values() if f.staged}
        used |= {r.restated for r in state.removed.values() if r.restated}
        used |= set(state.locations.values())  # where a moved restate left a partition: its live directory
        victims = [v for v in victims if v.path not in live and _staging_dir(v.path) not in used]
        for v in victims:
            table.storage.delete(v.path)
        for d in sorted({d for v in victims if (d := _staging_dir(v.path))}):
            table.storage.remove_empty_dir(d)  # the staging directory, once its marker and orphans are gone
    return victims


def _staging_dir(path: str) -> str | None:
    """The restate staging directory ``path`` lies in (its parent, by name), or None."""
    d = path.rpartition("/")[0]
    return d if is_staging_name(d.rpartition("/")[2]) else None
