"""Cross-check the manifest log against what is on storage (``verify``, ``clean``).

Readers find the latest version by probing forward from the checkpoint hint,
and read a checkpoint instead of the commits it folds. Both are shortcuts that
trust the log to be well formed. This module lists the log directory instead,
and reports what the shortcuts would hide: commit files past the first missing
version (probing stops at the gap and never sees them), gaps that no checkpoint
covers, and checkpoints that disagree with the commits they fold. It also
collects every path that *any* commit file on storage adds (and no later expire
commit removes), whatever the file's name, so ``clean`` never deletes a file a
commit names, reachable or not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tributary_read.errors import ManifestCorruptError, SettingsDriftError, StorageError
from tributary_read.io.storage import STAGED_NAME
from tributary_read.table.log import CHECKPOINTS, COMMITS, LOG_DIR, ManifestLog, checkpoint_path, commit_path
from tributary_read.table.state import TableState
from tributary_read.table.manifest import Commit


@dataclass(frozen=True)
class LogProblem:
    path: str  # the log file concerned, relative to ROOT
    problem: str  # log_gap | unreachable_commits | checkpoint_mismatch | corrupt_log_file | misnamed_commit
    detail: str


@dataclass(frozen=True)
class LogCheck:
    latest: int  # what readers find by probing
    commits: tuple[int, ...]  # versions of the commit files on storage
    checkpoints: tuple[int, ...]
    problems: tuple[LogProblem, ...] = ()
    #: Every path (and staged name) that a readable commit or checkpoint adds and
    #: no later expire commit removes, whether readers can reach that commit or not.
    referenced: frozenset[str] = field(default_factory=frozenset)


def _canonical(doc: dict) -> dict:
    """A checkpoint document with its lists in a fixed order (they come from dicts)."""
    return {k: sorted(json.dumps(x, sort_keys=True) for x in v) if isinstance(v, list) else v
            for k, v in doc.items()}


def _as_known_to(st: TableState, cp: TableState) -> dict:
    """``st``'s document without the apps' ``high`` where ``cp`` has none: a
    checkpoint written before trib kept it is not wrong for lacking it."""
    doc = st.to_json()
    for app, s in cp.apps.items():
        if s.high is None and app in doc["apps"]:
            doc["apps"][app].pop("high", None)
    known = [[p, v] for p, v in st.added.items() if p in cp.added]  # nor for lacking versions it did not keep
    doc.pop("added", None)
    if known:
        doc["added"] = known
    if cp.settings is None:  # nor for lacking the settings an older trib did not record
        doc.pop("settings", None)
    return doc


def check_log(log: ManifestLog) -> LogCheck:
    """List the log and compare it with what readers would conclude from it.

    Listing the log directory sees what probing from the checkpoint hint cannot
    (commits past a gap); ``verify`` and ``clean`` call it. It is a function of
    this module rather than a ManifestLog method so that log.py never imports
    its own checker (no import cycle).
    """
    names = [f.path.rsplit("/", 1)[-1] for f in log.storage.list(LOG_DIR, recursive=False)]
    commits = COMMITS.numbers(names)
    checkpoints = CHECKPOINTS.numbers(names)
    latest = log.latest_version()
    problems: list[LogProblem] = []
    referenced: set[str] = set()
    # Files of commits readers cannot place: kept whatever an expire commit says.
    stray: set[str] = set()
    for name in names:
        if COMMITS.number(name) is None and CHECKPOINTS.number(name) is None:
            _misnamed(log, f"{LOG_DIR}/{name}", problems, stray)

    # Gaps: a missing version is fine only below a checkpoint (log retention
    # removes commits a checkpoint has folded); anywhere else it loses commits.
    prev = 0
    for v in commits:
        if v > prev + 1 and not any(c >= v - 1 for c in checkpoints):
            problems.append(LogProblem(commit_path(prev + 1), "log_gap",
                                       f"versions {prev + 1}..{v - 1} are missing, but commit {v} exists"))
        prev = v
    beyond = [v for v in commits if v > latest]
    if beyond:
        problems.append(LogProblem(commit_path(beyond[0]), "unreachable_commits",
                                   f"{len(beyond)} commit files ({beyond[0]}..{beyond[-1]}) lie beyond version "
                                   f"{latest}, where readers stop; their files are never read"))
    for c in checkpoints:
        if c > (commits[-1] if commits else 0):
            problems.append(LogProblem(checkpoint_path(c), "checkpoint_mismatch",
                                       f"checkpoint {c} is newer than the newest commit"))

    # Fold every commit, re-seeding from a checkpoint after a missing one, and
    # compare the checkpoints readers start from (the newest, the hint's) with
    # the fold of the commits before them. Older ones are not read: with a
    # checkpoint every commit, reading them all costs O(versions x files).
    present, cps = set(commits), set(checkpoints)
    compare = {c for c in (checkpoints[-1] if checkpoints else 0, log.last_checkpoint()) if c in cps}
    st: TableState | None = TableState(0) if 1 in present else None
    for v in commits:
        if st is None or st.version != v - 1:
            st = _read_checkpoint(log, v - 1, problems, referenced) if v - 1 in cps else None
        commit = _read_commit(log, v, problems, stray)
        if commit is None:
            st = None
            continue
        for f in commit.files:
            referenced.add(f.path)
            if f.staged:
                referenced.add(f.staged)
        for f in getattr(commit, "removed", ()):  # a later expire commit takes them out again
            referenced.discard(f.path)
            if f.staged:
                referenced.discard(f.staged)
        if st is not None:
            st = st.apply(commit)
        if v in compare:
            cp = _read_checkpoint(log, v, problems, referenced)
            if st is not None and cp is not None and _canonical(cp.to_json()) != _canonical(_as_known_to(st, cp)):
                problems.append(LogProblem(checkpoint_path(v), "checkpoint_mismatch",
                                           f"checkpoint {v} disagrees with the commits it folds"))
    return LogCheck(latest, tuple(commits), tuple(checkpoints), tuple(problems), frozenset(referenced | stray))


def _read_commit(log: ManifestLog, v: int, problems: list[LogProblem], referenced: set[str]) -> Commit | None:
    try:
        return log.read_commit(v)
    except SettingsDriftError:
        raise  # table.json is wrong, not this commit: refused as a whole, never reported per file
    except (ManifestCorruptError, StorageError) as e:
        problems.append(LogProblem(commit_path(v), "corrupt_log_file", str(e)))
        # A commit under another version's name (a rename, a copy) still names its files.
        _reference(_decode(log, commit_path(v)), referenced)
        return None


def _misnamed(log: ManifestLog, path: str, problems: list[LogProblem], referenced: set[str]) -> None:
    """A file in the log directory named like no commit: a commit under it is reported, its files kept.

    Readers never see it (they find commits by name), so it is a problem, and
    a renamed commit's files must not become orphans. The staged copy of a
    create (``STAGED_NAME``) is not one: a writer killed between publishing
    and discarding it leaves it behind, and its version then holds it or
    another writer's commit. Its files are kept all the same (a writer may
    still be publishing it); the copy itself is an orphan for ``clean``.
    """
    commit = _decode(log, path)
    if commit is None:
        return
    _reference(commit, referenced)
    if not STAGED_NAME.match(path.rsplit("/", 1)[-1]):
        problems.append(LogProblem(path, "misnamed_commit",
                                   f"holds commit {commit.version}, but only {commit_path(commit.version)} "
                                   "is read as one"))


def _decode(log: ManifestLog, path: str) -> Commit | None:
    try:
        return Commit.decode(log.storage.read(path), log.storage.uri_for(path))
    except (ManifestCorruptError, StorageError, OSError):
        return None


def _reference(commit: Commit | None, referenced: set[str]) -> None:
    for f in commit.files if commit is not None else ():
        referenced.add(f.path)
        if f.staged:
            referenced.add(f.staged)


def _read_checkpoint(log: ManifestLog, v: int, problems: list[LogProblem], referenced: set[str]) -> TableState | None:
    try:
        cp = log._read_checkpoint(v)
    except SettingsDriftError:
        raise
    except (ManifestCorruptError, StorageError) as e:
        problems.append(LogProblem(checkpoint_path(v), "corrupt_log_file", str(e)))
        return None
    for f in cp.files.values():
        referenced.add(f.path)
        if f.staged:
            referenced.add(f.staged)
    return cp
