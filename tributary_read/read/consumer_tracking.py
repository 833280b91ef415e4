"""How a durable consumer finds what is new: by table version, by a listing ledger, or both.

A consumer's mode is fixed by its first ack, and each mode is one strategy
here, chosen once per call by :func:`tracking_for`; the consumer model
(:mod:`tributary_read.read.consumer`) never asks which mode it is in. A strategy
makes a plan from a state, applies an acked plan to the state, names the options
a pending plan was made with that a caller now contradicts, and resets the
consumer to a table version.

* :class:`ManifestTracking`: the state is the last delivered table version; a
  plan is the commits after it.
* :class:`ListingTracking`: the state is a ledger (tributary_read.read.ledger);
  a plan is a listing compared with it.
* :class:`BothTracking`: the two in one state, over files disjoint by name
  (tributary_read.read.tracking): trib-written files by version, others by ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Protocol

from tributary_read.errors import ConsumerStateCorruptError, InvalidInputError, LogRetentionError
from tributary_read.read.backlog import cap_manifest, merged
from tributary_read.read.consumer_state import (DEFAULT_FULL_SCAN_EVERY_MS, DEFAULT_LOOKBACK_MS, DEFAULT_MAX_FILES,
                                                DEFAULT_MIN_AGE_MS, ConsumerState, InitialPosition, Plan, Start,
                                                reset_command)
from tributary_read.read.ledger import LedgerPlanner, apply_delta
from tributary_read.read.listing import Progress
from tributary_read.read.resolve import Source, manifest_files
from tributary_read.read.tracking import check_untracked, checks_completely, written
from tributary_read.table.config import Tracking
from tributary_read.table.layout import Layout


@dataclass(frozen=True)
class PlanOptions:
    """What one ``plan`` call asks for; None means the stored value, else the default."""

    #: The mode as the caller spelled it (``auto`` ...), for the untracked-data hint.
    asked: str = "auto"
    lookback_ms: int | None = None
    min_age_ms: int | None = None
    full_scan: bool = False
    full_scan_every_ms: int | None = None
    progress: Progress | None = None
    parallel: int | None = None
    #: Deliver a manifest answer that leaves untracked files behind (a warning, not an error).
    allow_untracked: bool = False
    #: What a consumer's first plan takes as delivered already; None: not a first plan, or not asked
    #: (:meth:`Consumer._compute` puts the default, ``earliest``, on a first plan: strategies see None
    #: on every later plan).
    initial_position: InitialPosition | None = None
    #: Deliver a plan that leaves files of sealed partitions that changed inexactly behind (a warning).
    allow_beyond_horizon: bool = False
    #: Take delivered files that changed in a way no range delivers (reported in conflicts; their partition
    #: is held back otherwise).
    allow_changed: bool = False
    #: At most this many files in the plan (0: no cap; None: DEFAULT_MAX_FILES), oldest first; the rest
    #: stays pending as the plan's backlog (tributary_read.read.backlog).
    max_files: int | None = None

    @property
    def cap(self) -> int:
        return DEFAULT_MAX_FILES if self.max_files is None else self.max_files


#: In a manifest plan's stats: its untracked check listed the whole table (see ManifestTracking.checked).
COMPLETE_CHECK = "untracked_checked_all"


class ConsumerTracking(Protocol):
    """One way of tracking what a consumer has delivered."""

    mode: Tracking

    def plan(self, state: ConsumerState | None, plan_id: str, now: int, opts: PlanOptions) -> Plan:
        """The next batch after ``state`` (None: nothing delivered yet)."""

    def apply(self, base: ConsumerState, new: ConsumerState, plan: Plan) -> ConsumerState:
        """``new`` (``base`` with the bookkeeping of an ack) with ``plan``'s delta applied."""

    def differences(self, plan: Plan, opts: PlanOptions) -> list[str]:
        """What ``plan`` was made with that ``opts`` asks otherwise (a pending plan is never silently reused)."""

    def reset_to_version(self, state: ConsumerState | None, version: int, to_version: int, now: int,
                         keep: Mapping) -> ConsumerState:
        """State number ``version``: continue after table version ``to_version``."""


class ManifestTracking:
    """The last delivered table version; a plan holds the commits after it."""

    mode = Tracking.MANIFEST

    def __init__(self, source: Source, name: str):
        self.source = source
        self.name = name

    def part(self, state: ConsumerState | None, plan_id: str, now: int,
             initial: InitialPosition | None = None, max_files: int = 0) -> Plan:
        """The commits after the state's version, without the untracked-data check.

        A first plan at ``latest`` starts after the latest version; at a time it
        covers every version but leaves out files whose partition ended before it.
        """
        table = self.source.table
        if table is None:
            raise InvalidInputError(f"{self.source.uri} has no manifest log; use a listing consumer")
        latest = table.log.latest_version()
        since = state.manifest_version if state else 0
        if initial is not None and initial.start is Start.LATEST:
            since = latest
        if since > latest:
            raise ConsumerStateCorruptError(
                f"consumer {self.name!r} is at table version {since} but {table.uri} ends at {latest} "
                f"(was the table recreated?); to start over: "
                f"{reset_command(self.source.uri, self.name, 'to-earliest')}")
        try:
            fs = manifest_files(table, since, latest, restated=set())  # the reader decides (selection.select)
        except LogRetentionError as e:
            raise LogRetentionError(
                f"consumer {self.name!r} is at table version {since}, further behind than the log keeps ({e}); "
                f"to skip what it missed: {reset_command(self.source.uri, self.name, 'to-latest')}; "
                f"to deliver the whole table again: {reset_command(self.source.uri, self.name, 'to-earliest')}"
                ) from None
        fs, left = cap_manifest(table, since, fs, max_files)
        until = fs.plan["until_version"]
        files, baseline = fs.files, None
        if initial is not None and initial.start is Start.TIME:
            lay = table.layout
            taken = [f for f in files if (p := lay.try_parse(f.path.rpartition("/")[0])) and initial.takes(p.end_ms)]
            if taken:
                gone = {f.path for f in taken}
                files = tuple(f for f in files if f.path not in gone)
                baseline = {"directories": len({f.path.rpartition("/")[0] for f in taken}), "files": len(taken),
                            "bytes": sum(f.size for f in taken)}
        return Plan(plan_id, self.name, state.version if state else 0, self.mode, self.source.uri, now,
                    files, skipped=fs.skipped, baseline=baseline, versions=(since, until),
                    stats={"backlog": left, **_restated(fs)}, delta={"manifest_version": until})

    def plan(self, state: ConsumerState | None, plan_id: str, now: int, opts: PlanOptions) -> Plan:
        return self.checked(self.part(state, plan_id, now, opts.initial_position, opts.cap), opts)

    def checked(self, p: Plan, opts: PlanOptions) -> Plan:
        """``p`` with what it leaves untracked in its stats, and whether every file of the table was looked at.

        The scope is the whole table, not the files modified after the
        consumer's version: each foreign file is one the consumer will never
        deliver, whatever its mtime. A check that only probed (made with
        ``allow_untracked``) is marked so, for :meth:`Consumer._refuse` to
        redo it completely before a run without the opt-out reuses the plan.
        """
        table = self.source.table
        untracked = check_untracked(table, p.files, tracking="manifest", asked=opts.asked,
                                    allow=opts.allow_untracked)
        stats: dict[str, Any] = {"untracked": untracked.to_json()} if untracked else {}
        if "backlog" in p.stats:
            stats["backlog"] = p.stats["backlog"]
        stats.update(_restated(p))
        if checks_completely(table, allow=opts.allow_untracked):
            stats[COMPLETE_CHECK] = True
        return replace(p, stats=stats)

    def apply(self, base: ConsumerState, new: ConsumerState, plan: Plan) -> ConsumerState:
        return replace(new, manifest_version=int(plan.delta["manifest_version"]))

    def differences(self, plan: Plan, opts: PlanOptions) -> list[str]:
        return []  # a version range has no options to contradict

    def reset_to_version(self, state: ConsumerState | None, version: int, to_version: int, now: int,
                         keep: Mapping) -> ConsumerState:
        _check_version(self.source, to_version)
        return ConsumerState(self.name, version, self.source.uri, mode=self.mode, manifest_version=to_version,
                             updated_ms=now, note=f"reset to version {to_version}", **keep)


class ListingTracking:
    """A ledger of delivered files per partition directory; a plan compares a listing with it."""

    mode = Tracking.LISTING

    def __init__(self, source: Source, name: str):
        self.source = source
        self.name = name

    def part(self, state: ConsumerState | None, plan_id: str, now: int, opts: PlanOptions) -> Plan:
        """The listing compared with the ledger, without the untracked-data check.

        On a trib table only foreign files are listed: trib-written ones are
        the manifest's (delivered by ``both``, reported untracked otherwise).
        """
        table = self.source.table
        lookback = opts.lookback_ms if opts.lookback_ms is not None else (
            state.lookback_ms if state else DEFAULT_LOOKBACK_MS)
        layout = self._layout(state)
        every = opts.full_scan_every_ms if opts.full_scan_every_ms is not None else (
            state.full_scan_every_ms if state else DEFAULT_FULL_SCAN_EVERY_MS)
        periodic = every > 0 and now - (state.last_full_scan_ms if state else 0) >= every
        why = ("requested" if opts.full_scan else "first" if not (state and (state.ledger or state.sealed))
               else "periodic" if periodic else None)  # an empty ledger has no directory to skip
        pos = opts.initial_position
        min_age = DEFAULT_MIN_AGE_MS if opts.min_age_ms is None else opts.min_age_ms
        line_based = table.config.data_format.spec.line_based if table is not None else None
        diff = LedgerPlanner(self.source.storage, state.ledger if state else {}, state.sealed if state else {},
                             layout, lookback, min_age, now, foreign_only=table is not None, line_based=line_based,
                             takes=None if pos is None or pos.start is Start.EARLIEST else pos.takes,
                             max_files=opts.cap, allow_changed=opts.allow_changed,
                             allow_beyond=opts.allow_beyond_horizon).plan(why is not None, opts.progress, opts.parallel)
        delta = {**diff.delta, "full_scan": why is not None, "full_scan_every_ms": every}
        stats = {**diff.stats, "full_scan": why}
        return Plan(plan_id, self.name, state.version if state else 0, self.mode, self.source.uri, now,
                    diff.files, lookback, min_age, diff.conflicts, diff.beyond_horizon,
                    diff.skipped, diff.deferred, diff.baseline, None, stats, delta, diff.held)

    def plan(self, state: ConsumerState | None, plan_id: str, now: int, opts: PlanOptions) -> Plan:
        p = self.part(state, plan_id, now, opts)
        table = self.source.table
        untracked = check_untracked(table, p.files, tracking="listing", asked=opts.asked) if table is not None else None
        return replace(p, stats={**p.stats, "untracked": untracked.to_json()}) if untracked else p

    def _layout(self, state: ConsumerState | None) -> Layout:
        stored = Layout(**state.layout) if state and state.layout else None
        lay = self.source.layout
        if lay is not None and stored is not None and lay != stored:
            raise InvalidInputError(
                f"consumer {self.name!r} was created with layout {stored.directory!r} -> {stored.partition!r} "
                f"({stored.timezone}); this call passes {lay.directory!r} -> {lay.partition!r} ({lay.timezone})")
        lay = lay or stored
        if lay is None:
            raise InvalidInputError(
                "a listing consumer needs a layout: give the layout and partition spec, or create the table "
                "with `trib table create`", layout="the layout and partition spec")
        return lay

    def apply(self, base: ConsumerState, new: ConsumerState, plan: Plan) -> ConsumerState:
        d = plan.delta
        ledger, sealed = apply_delta(base.ledger, base.sealed, d)
        lookback = plan.lookback_ms if plan.lookback_ms is not None else base.lookback_ms
        new = replace(new, ledger=ledger, sealed=sealed, lookback_ms=lookback, layout=d.get("layout"))
        if "full_scan_every_ms" in d:  # absent in plans made before periodic full scans
            new = replace(new, full_scan_every_ms=int(d["full_scan_every_ms"]),
                          last_full_scan_ms=plan.created_ms if d.get("full_scan") else base.last_full_scan_ms)
        return new

    def differences(self, plan: Plan, opts: PlanOptions) -> list[str]:
        diffs = []
        if opts.lookback_ms is not None and opts.lookback_ms != plan.lookback_ms:
            diffs.append(f"lookback {plan.lookback_ms} ms")
        if opts.min_age_ms is not None and opts.min_age_ms != plan.min_age_ms:
            diffs.append(f"minimum age {plan.min_age_ms} ms")
        every = plan.delta.get("full_scan_every_ms")
        if opts.full_scan_every_ms is not None and every is not None and opts.full_scan_every_ms != every:
            diffs.append(f"full-scan interval {every} ms")
        # Held partitions are the plan's answer to changes this run asks to take: acked, it would exit 17.
        took = [h for h in plan.held if (opts.allow_changed if h.exact else opts.allow_beyond_horizon)]
        if took:
            diffs.append(f"{len(took)} partition{'s' * (len(took) != 1)} held back (made without the opt-out to "
                         "take changed files)")
        return diffs

    def reset_to_version(self, state: ConsumerState | None, version: int, to_version: int, now: int,
                         keep: Mapping) -> ConsumerState:
        raise InvalidInputError("a version to reset to applies to manifest and both consumers only",
                                to_version="a version to reset to")


class BothTracking:
    """Versions for trib-written files and a ledger for the others, moved together by one ack.

    A plan is a manifest plan and a ledger plan in one: the files of each side
    (disjoint by name) and one delta, so the ack moves the version and the
    ledger together in one state file.
    """

    mode = Tracking.BOTH

    def __init__(self, source: Source, name: str):
        self.manifest = ManifestTracking(source, name)
        self.listing = ListingTracking(source, name)

    def plan(self, state: ConsumerState | None, plan_id: str, now: int, opts: PlanOptions) -> Plan:
        # first: its errors (log retention) come before a listing
        # Each part is capped at max_files: a plan holds at most that many of each kind.
        m = self.manifest.part(state, plan_id, now, opts.initial_position, opts.cap)
        lst = self.listing.part(state, plan_id, now, opts)
        baseline = _merged(m.baseline, lst.baseline)
        left = merged(m.stats.get("backlog"), lst.stats.get("backlog"),
                      self.manifest.source.table.layout if self.manifest.source.table else None)
        return replace(lst, mode=self.mode, baseline=baseline, stats={**lst.stats, "backlog": left, **_restated(m)},
                       files=tuple(sorted((*written(m.files), *lst.files), key=lambda f: f.path)),
                       skipped=tuple(sorted((*m.skipped, *lst.skipped), key=lambda s: s.path)),
                       versions=m.versions, delta={**lst.delta, "manifest_version": m.delta["manifest_version"]})

    def apply(self, base: ConsumerState, new: ConsumerState, plan: Plan) -> ConsumerState:
        return self.listing.apply(base, self.manifest.apply(base, new, plan), plan)

    def differences(self, plan: Plan, opts: PlanOptions) -> list[str]:
        return self.listing.differences(plan, opts)

    def reset_to_version(self, state: ConsumerState | None, version: int, to_version: int, now: int,
                         keep: Mapping) -> ConsumerState:
        if state is None:
            return self.manifest.reset_to_version(state, version, to_version, now, keep)
        _check_version(self.manifest.source, to_version)
        # The ledger of foreign files stays as it is.
        return replace(state, version=version, manifest_version=to_version, plan_id=None, updated_ms=now,
                       note=f"reset to version {to_version}")


_STRATEGIES: dict[Tracking, Callable[[Source, str], ConsumerTracking]] = {
    Tracking.MANIFEST: ManifestTracking, Tracking.LISTING: ListingTracking, Tracking.BOTH: BothTracking}


def _restated(x) -> dict:
    """The ``restated`` stat of a manifest answer or plan (the partitions restates in its range recomputed)."""
    return {"restated": x.stats["restated"]} if x.stats.get("restated") else {}


def tracking_for(mode: Tracking | str, source: Source, name: str) -> ConsumerTracking:
    """The strategy of a consumer mode (``manifest``, ``listing`` or ``both``)."""
    return _STRATEGIES[Tracking(mode)](source, name)


def _merged(a: Mapping | None, b: Mapping | None) -> Mapping | None:
    """Two baselines (what a first plan took as delivered) as one."""
    if a is None or b is None:
        return a or b
    return {k: a.get(k, 0) + b.get(k, 0) for k in ("directories", "files", "bytes")}


def _check_version(source: Source, to_version: int) -> None:
    assert source.table is not None  # reset() refuses a version for a plain directory
    latest = source.table.log.latest_version()
    if not 0 <= to_version <= latest:
        raise InvalidInputError(f"the version to reset to must be between 0 and the latest version {latest}",
                                to_version="the version to reset to")


def judge_partition(source: Source, state: ConsumerState, name: str, d: str, now: int):
    """Partition directory ``d`` listed now and judged against ``state``'s ledger, changes acknowledged.

    For ``trib consumer replay``: returns the planner (its ledger and seals),
    the partition, what is listed there, and the judgement
    (tributary_read.read.ledger.LedgerPlanner.judge; None when the directory is
    gone). One directory is listed, not the table.
    """
    from tributary_read.read.listing import scan
    from tributary_read.read.partition_filter import Condition, PartitionFilter

    layout = ListingTracking(source, name)._layout(state)
    part = layout.parse(d)
    pf = PartitionFilter(tuple(Condition(k, "=", v) for k, v in part.values.items()))
    listing = scan(source.storage, layout, partitions=pf)
    table = source.table
    planner = LedgerPlanner(source.storage, state.ledger, state.sealed, layout, state.lookback_ms, 0, now,
                            foreign_only=table is not None,
                            line_based=table.config.data_format.spec.line_based if table is not None else None,
                            allow_changed=True)
    planner.listed = now
    files = [f for f in listing.files if f.directory == d]
    if d not in listing.leaves and not files:
        return planner, part, files, None
    mine = [x for x in listing.skipped if x.path.rpartition("/")[0] == d]
    return planner, part, files, planner.judge(d, part, None, files, mine)



def plan_layout(plan: Plan) -> Layout:
    """The layout a listing plan parsed its files' partitions with (it records it for its ack): a reader
    that needs the partition keys in their order asks the plan, not the paths."""
    if plan.mode == Tracking.MANIFEST or not plan.delta.get("layout"):
        raise InvalidInputError(f"plan {plan.plan_id} of consumer {plan.consumer!r} lists no directory layout")
    return Layout(**plan.delta["layout"])
