"""Durable consumers: every file delivered exactly once across scheduled runs.

A consumer is a name plus numbered files under ``ROOT/_tributary/consumers/NAME/``
(or ``STATE_DIR/NAME/`` when the table is read-only)::

    state-<20 digits>.json   committed states; the highest number is current
    plan-<20 digits>.json    the pending plan built on that state version

:meth:`Consumer.plan` persists the next batch with create-if-absent keyed to
the current state version, so until it is acked every call returns the same
plan id and files (a failed run retries idempotently; concurrent callers get
one plan). :meth:`Consumer.ack` creates ``state-<n+1>.json`` the same way: of
two concurrent acks exactly one wins, and a crash leaves the old state or the
new one, never half of either.

On manifest-tracked tables the state is the last delivered table version. On
plain directories (and listing-tracked tables) it is a ledger (see
docs/reading.md): per partition directory the delivered files' (size, mtime,
valid length) while the partition is inside the lookback horizon, then a
constant-size digest ("seal") naming the segment of those files once it falls
out, so what a plan reads is bounded by the horizon while late arrivals in old
partitions are still delivered exactly (or hold that partition back). A
table tracked ``both`` (tributary_read.tracking) keeps both in one state:
trib-written files by version, the others by ledger. Each mode is a strategy
(tributary_read.read.consumer_tracking); this module is the model around them:
the numbered files (tributary_read.table.docstore), plan, ack, reset and show.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any, Mapping

from tributary_read.read.consumer_state import (
    _NAME,
    _PLAN_ID,
    CONSUMER_MODES,
    CONSUMERS_DIR,
    DEFAULT_FULL_SCAN_EVERY_MS,
    DEFAULT_LOOKBACK_MS,
    KEEP_STATES,
    AckResult,
    ConsumerState,
    InitialPosition,
    Plan,
    check_name,
    is_index,
    max_files_of,
    reset_command,
)
from tributary_read.errors import (
    BeyondHorizonError,
    ChangedFileError,
    ConsumerStateCorruptError,
    InvalidInputError,
    ManifestCorruptError,
    NoSuchConsumerError,
    NoSuchPlanError,
    PendingPlanError,
    StalePlanError,
    StorageError,
    UnsupportedFormatVersionError,
)
from tributary_read.read.consumer_moves import Moves, ResetResult, ResetTarget
from tributary_read.read.consumer_tracking import (COMPLETE_CHECK, ConsumerTracking, ManifestTracking,
                                                   PlanOptions, tracking_for)
from tributary_read.read.tracking import checks_completely, refuse_untracked
from tributary_read.read.ledger_store import LedgerStore, referenced
from tributary_read.read.listing import Progress
from tributary_read.read.resolve import Source
from tributary_read.io.storage import Storage, open_storage
from tributary_read.table.config import Tracking
from tributary_read.table.docstore import DocumentSeries, DocumentStore
from tributary_read.table.log import COMPACTED_MARKER, RESTATED_MARKER
from tributary_read.table.renames import replaced_path
from tributary_read.table.restate_swap import in_staging

__all__ = ["AckResult", "Consumer", "ConsumerState", "Plan", "ResetResult", "ResetTarget", "check_name", "list_consumers",
           "CONSUMER_MODES", "CONSUMERS_DIR", "DEFAULT_LOOKBACK_MS", "DEFAULT_FULL_SCAN_EVERY_MS"]
#: Changed files an exit-15 line names one by one (more are counted).
SHOWN = 10


# -- the consumer ---------------------------------------------------------------
class Consumer(Moves):
    """A named, durable reader of one table.

    Args:
        source: the table (a Source, Table or root URI).
        name: the consumer's name.
        state_dir: where to keep state instead of ``ROOT/_tributary/consumers``
            (for read-only tables); the consumer lives in ``STATE_DIR/NAME/``.
    """

    def __init__(self, source: Source, name: str, state_dir: str | None = None,
                 options: Mapping[str, str] | None = None):
        self.source = Source.of(source, options)
        self.name = check_name(name)
        self.external = bool(state_dir)
        if state_dir:
            self.storage: Storage = open_storage(state_dir, options)
            self.prefix = name
        else:
            self.storage = self.source.storage
            self.prefix = f"{CONSUMERS_DIR}/{name}"
        #: ``state-<n>.json`` and ``plan-<n>.json`` share the consumer's directory.
        self._states = DocumentStore(self.storage, DocumentSeries(self.prefix, "state-"))
        self._plans = DocumentStore(self.storage, DocumentSeries(self.prefix, "plan-"))
        #: The ledger's segments (a listing consumer's files, per partition directory).
        self._ledgers = LedgerStore(self.storage, self.prefix,
                                    lambda where, e: ConsumerStateCorruptError(f"corrupt consumer ledger segment "
                                                                              f"{where}: {e}"))

    @property
    def location(self) -> str:
        return f"{self.storage.uri}/{self.prefix}"

    # -- files ---------------------------------------------------------------
    def _store(self, kind: str) -> DocumentStore:
        return self._states if kind == "state" else self._plans

    def _versions(self) -> tuple[list[int], list[int]]:
        names = self._states.names()  # one listing for both series
        return self._states.numbers(names), self._plans.numbers(names)

    def exists(self) -> bool:
        states, plans = self._versions()
        return bool(states or plans)

    def _load(self, kind: str, v: int) -> dict | None:
        try:
            return self._store(kind).read(v)
        except UnsupportedFormatVersionError:
            raise
        except ManifestCorruptError as e:
            raise ConsumerStateCorruptError(f"{e}; to start over: {self.reset_command('to-earliest')}") from None

    def _corrupt(self, kind: str, v: int, e: Exception) -> ConsumerStateCorruptError:
        return ConsumerStateCorruptError(
            f"corrupt consumer {kind} {self._store(kind).uri(v)}: {e}; "
            f"to start over: {self.reset_command('to-earliest')}")

    def reset_command(self, target: str) -> str:
        """The exact reset line for this consumer (its table, name and state directory)."""
        return reset_command(self.source.uri, self.name, target, self.storage.uri if self.external else None)

    def _read_state(self, v: int) -> ConsumerState | None:
        d = self._load("state", v)
        if d is None:
            return None
        try:
            st = ConsumerState.from_json(d)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise self._corrupt("state", v, e) from None
        if st.version != v or st.consumer != self.name:
            raise self._corrupt("state", v, ValueError(f"says consumer {st.consumer!r} version {st.version}"))
        if is_index(st.ledger):
            try:
                st = replace(st, ledger=self._ledgers.load(st.ledger))
            except ValueError as e:
                raise self._corrupt("state", v, e) from None
        st = replace(st, sealed=self._ledgers.seals(st.sealed))  # each seal's files, read only when it changed
        if self.external and st.table != self.source.uri:
            raise InvalidInputError(
                f"consumer {self.name!r} in {self.storage.uri} belongs to table {st.table}, not {self.source.uri}")
        return st

    def _read_plan(self, base: int) -> Plan | None:
        d = self._load("plan", base)
        if d is None:
            return None
        try:
            p = Plan.from_json(d)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise self._corrupt("plan", base, e) from None
        if p.base_version != base or not _PLAN_ID.match(p.plan_id):
            raise self._corrupt("plan", base, ValueError("plan id or base version does not match its file name"))
        return p

    def current(self) -> ConsumerState | None:
        """The current state, or None before the first ack."""
        for _ in range(3):
            states, _ = self._versions()
            if not states:
                return None
            st = self._read_state(states[-1])
            if st is not None:
                return st  # else: pruned between listing and reading; look again
        raise StorageError(f"consumer state under {self.location} keeps changing; retry")

    def _create(self, kind: str, v: int, doc: dict) -> bool:
        try:
            return self._store(kind).create(v, doc)
        except StorageError as e:
            if self.external:
                raise
            raise StorageError(f"{e} (for a read-only table keep consumer state elsewhere: a state directory)",
                               state_dir="a state directory") from None

    def _create_state(self, v: int, state: ConsumerState) -> bool:
        """Commit a state: its ledger's new segments first, then the state naming them (the commit point)."""
        doc = state.to_json()
        doc["ledger"] = self._ledgers.save(state.ledger)
        doc["sealed"] = self._ledgers.save_seals(state.sealed)
        return self._create("state", v, doc)

    def _prune(self, current: int) -> None:
        names = self._states.names()
        try:
            self._states.prune(KEEP_STATES, current, names)
            self._plans.prune(KEEP_STATES, current, names)
            for name in names:  # skips of plans as old as the pruned states (skip-<base>-<n>.json)
                if name.startswith("skip-") and name[5:25].isdigit() and int(name[5:25]) <= current - KEEP_STATES:
                    self.storage.delete(f"{self.prefix}/{name}")
            used: set[str] = set()
            for n in self._states.numbers():
                doc = self._states.read(n) or {}
                used |= referenced(doc.get("ledger") or {}) | referenced(doc.get("sealed") or {})
            self._ledgers.prune(used, int(time.time() * 1000))
        except (StorageError, ManifestCorruptError):
            pass  # old files only cost space; the next ack tries again

    # -- planning ------------------------------------------------------------
    def pending(self) -> Plan | None:
        st = self.current()
        return self._read_plan(st.version if st else 0)

    def plan(self, *, mode: str = "auto", lookback_ms: int | None = None, min_age_ms: int | None = None,
             full_scan: bool = False, now_ms: int | None = None, progress: Progress | None = None,
             parallel: int | None = None, full_scan_every_ms: int | None = None,
             allow_untracked: bool = False, owner: Mapping[str, str] | None = None,
             initial_position: InitialPosition | str | int | None = None,
             allow_beyond_horizon: bool = False, allow_changed: bool = False,
             max_files: int | str | None = None) -> Plan:
        """The next batch, without moving the consumer; the same plan until acked.

        Args:
            mode: ``auto`` (what the table's tracking says; a plain directory
                is listed), ``manifest``, ``listing`` (``mtime`` is an alias) or
                ``both``; fixed when the consumer is first acked, except that a
                manifest consumer follows its table to ``both`` (the fix for
                untracked files: ``trib table set ROOT --tracking both``).
            lookback_ms: listing consumers: partitions whose period ended longer
                ago are beyond the horizon (default: the stored value, else 7 days).
            min_age_ms: listing consumers: leave files modified more recently
                than this for a later run (they may still be written; default
                DEFAULT_MIN_AGE_MS, a minute; 0 = deliver every file listed).
            full_scan: list every directory, even unchanged ones, to catch files
                rewritten in place (which leave their directory's mtime alone).
            now_ms: the clock, for simulations; defaults to the wall clock.
            full_scan_every_ms: listing consumers: make a plan a full scan when
                the last acked one is this old (default: the stored value, else
                24 h; 0 = only when asked). Stored at the ack.
            allow_untracked: on a manifest-tracked table, deliver the plan even
                though files other tools wrote are left out (they are reported
                in the plan's ``untracked``); without it such a plan fails with
                ``UntrackedDataError`` (exit 13) and is not saved.
            owner: ``{"job": ..., "output": ...}``, the job this batch is for (the
                ETL gives it). Recorded at the first ack; a later plan for a job
                writing another output is refused (InvalidInputError), so two
                jobs never split one consumer's input between them.
            initial_position: the first plan only (before the first ack; later
                ones ignore it): ``earliest`` (the default) delivers every file
                that exists, ``latest`` takes them all as delivered, an instant
                takes the partitions that ended before it as delivered. Recorded
                in the state.
            allow_beyond_horizon: a partition sealed with a digest only (by
                an older trib) that changed in a way the digest cannot tell
                apart is acknowledged: its files are reported in
                ``beyond_horizon``, not delivered. Without it the partition is
                held back (``held``); the rest of the plan is delivered.
            allow_changed: listing consumers: a delivered file that changed
                in a way no byte range delivers (it shrank, was rewritten or
                removed, a Parquet file or compressed stream grew) is reported
                in the plan's ``conflicts`` and taken as it is; without it its
                partition is held back, inside the lookback or past it
                (``held``: the rest is delivered; the ack's result names it,
                and the CLI's ack exits 17). A file that only grew is
                delivered as a range either way.
            max_files: at most this many files in the plan (default
                DEFAULT_MAX_FILES; 0 or ``off``: no cap), whole partitions
                (commits) oldest first; the rest stays pending, reported as the
                plan's ``backlog`` (tributary_read.read.backlog).
        """
        if lookback_ms is not None and lookback_ms <= 0:
            raise InvalidInputError("the lookback must be positive", lookback="the lookback")
        if min_age_ms is not None and min_age_ms < 0:
            raise InvalidInputError("the minimum age must not be negative", min_age="the minimum age")
        if full_scan_every_ms is not None and full_scan_every_ms < 0:
            raise InvalidInputError("the full-scan interval must not be negative (0 = off)",
                                    full_scan_every="the full-scan interval")
        opts = PlanOptions(mode, lookback_ms, min_age_ms, full_scan, full_scan_every_ms, progress, parallel,
                           allow_untracked, InitialPosition.of(initial_position, self._zone()), allow_beyond_horizon,
                           allow_changed, max_files_of(max_files))
        state = self.current()
        base = state.version if state else 0
        self._check_owner(state.owner if state else None, owner)
        pending = self._read_plan(base)
        if pending is not None:
            self._check_owner(pending.delta.get("owner"), owner)
            return self._refuse(self._relocate(self._check_pending(pending, opts)), opts)
        plan = self._refuse(self._compute(state, opts, now_ms), opts)
        if owner is not None:
            plan = replace(plan, delta={**plan.delta, "owner": dict(owner)})
        for _ in range(20):
            if self._create("plan", base, plan.to_json()):
                return plan
            winner = self._read_plan(base)
            if winner is not None:  # a concurrent caller planned first: theirs is the plan
                self._check_owner(winner.delta.get("owner"), owner)
                return self._refuse(self._relocate(self._check_pending(winner, opts)), opts)
            time.sleep(0.01)  # an S3 conditional PUT lost to one in flight
        raise StorageError(f"cannot create a plan under {self.location}; retry")

    def preview(self, *, now_ms: int | None = None, progress: Progress | None = None,
                parallel: int | None = None) -> Plan:
        """What a plan made now would deliver: every file the consumer has not acked. Writes nothing.

        Monitoring asks how far behind a listing consumer is, and only a listing can tell; a
        :meth:`plan` would persist the answer as the consumer's pending plan (the same plan until
        acked), so a scrape would change what the next run reads. This computes the same plan from
        the acked state (a pending plan's files are in it too), uncapped, and keeps it. The plan's
        own refusals (untracked files, changed files, changes beyond the horizon) are not raised:
        their files count as pending.
        """
        opts = PlanOptions(progress=progress, parallel=parallel, allow_untracked=True, allow_beyond_horizon=True,
                           allow_changed=True, max_files=0)
        return self._compute(self.current(), opts, now_ms)

    def _relocate(self, p: Plan) -> Plan:
        """A pending plan, handed out again, names its files where they are now.

        A compaction may have replaced some since the plan was made, and set them
        aside (tributary_read/table/renames.py): the plan's records are the same,
        its paths not. ``trib clean`` keeps them while the plan is pending.
        """
        table = self.source.table
        if table is None or not p.files or not (table.storage.exists(COMPACTED_MARKER)
                                                or table.storage.exists(RESTATED_MARKER)):
            return p  # a table that never compacted nor restated: no state to read
        # set aside by a compaction, or by a restate's swap (a plan made before the restate landed)
        aside = {path: replaced_path(path) if r.restated is None else in_staging(r.restated, path)
                 for path, r in table.log.state().removed.items() if r.by is not None or r.restated is not None}
        moved = [f for f in p.files if f.path in aside]
        if not moved:
            return p
        found = table.storage.stat_many([aside[f.path] for f in moved])
        where = {f.path: aside[f.path] for f, info in zip(moved, found) if info is not None}
        return replace(p, files=tuple(replace(f, path=where.get(f.path, f.path)) for f in p.files))

    def _refuse(self, p: Plan, opts: PlanOptions) -> Plan:
        """``p``, unless it leaves a manifest table's untracked files behind (tracking.refuse_untracked).

        A pending plan is checked again: one made with the opt-out is not
        delivered by a run without it, and its check, which only probed the
        partitions it touches, is first redone over the whole table (a plan
        saved before the complete check existed counts as probed).
        """
        table = self.source.table
        if (p.mode == Tracking.MANIFEST and COMPLETE_CHECK not in p.stats
                and checks_completely(table, allow=opts.allow_untracked)):
            p = ManifestTracking(self.source, self.name).checked(p, opts)
        refuse_untracked(table, p.fileset().untracked, allow=opts.allow_untracked)
        if p.beyond_horizon and not opts.allow_beyond_horizon:
            raise self._beyond(p)
        if p.conflicts and not opts.allow_changed:
            # Only a plan made with the opt-out has conflicts (without it their partitions are held back):
            # every changed file in the one line (up to SHOWN), so one look sees them all.
            shown = "; ".join(f"{c.path} {c.reason}" for c in p.conflicts[:SHOWN])
            more = f"; and {len(p.conflicts) - SHOWN} more" if len(p.conflicts) > SHOWN else ""
            raise ChangedFileError(
                f"consumer {self.name!r}: pending plan {p.plan_id} takes changed files as they are, without "
                f"delivering them ({shown}{more}); it was made with the changed-file opt-out: run with it to "
                "deliver that plan, or drop it (the next plan holds their partitions back and delivers the rest): "
                f"{self.reset_command('discard-plan')}",
                allow_changed="the changed-file opt-out")
        return p

    def _zone(self):
        """The table's zone, which a time without an offset (an initial position) may have meant."""
        return self.source.layout.tz if self.source.layout is not None else None

    def _check_owner(self, recorded: Mapping[str, str] | None, owner: Mapping[str, str] | None) -> None:
        """Refuse a job writing another output than the one this consumer serves (they would split the input)."""
        if recorded is None or owner is None or recorded.get("output") == owner.get("output"):
            return
        raise InvalidInputError(
            f"consumer {self.name!r} serves job {recorded.get('job')!r} writing {recorded.get('output')}, not job "
            f"{owner.get('job')!r} writing {owner.get('output')}: the two would split its input; give this input "
            "a consumer of its own", consumer="a consumer of its own")

    def _beyond(self, p: Plan) -> BeyondHorizonError:
        """The one line for a pending plan made with the beyond-horizon opt-out, handed to a run without it.

        Only such a plan has files in ``beyond_horizon``: without the opt-out a
        sealed partition that changed in a way that cannot be told is held back
        (the rest is delivered, PartitionsHeldError at the ack), not refused.
        """
        parts = sorted({b.path.rpartition("/")[0] for b in p.beyond_horizon})
        more = f" (and {len(parts) - 1} more)" if len(parts) > 1 else ""
        return BeyondHorizonError(
            f"consumer {self.name!r}: pending plan {p.plan_id} takes partition {parts[0]}{more} as delivered "
            f"without delivering its changed files ({p.beyond_horizon[0].reason}); it was made with "
            "allow_beyond_horizon=True: run with it to deliver that plan, or drop it (the next plan holds the "
            f"partition back and delivers the rest): {self.reset_command('discard-plan')}",
            allow_beyond_horizon="allow_beyond_horizon=True")

    def _check_pending(self, p: Plan, opts: PlanOptions) -> Plan:
        wanted = _consumer_mode(opts.asked)
        diffs = [f"mode {p.mode}"] if wanted is not None and wanted != p.mode else []
        diffs += tracking_for(p.mode, self.source, self.name).differences(p, opts)
        made = p.delta.get("initial_position")
        if opts.initial_position is not None and made is not None and made != opts.initial_position.to_json():
            diffs.append(f"initial position {InitialPosition.from_json(made)}")
        if diffs:
            raise PendingPlanError(
                f"consumer {self.name!r} has pending plan {p.plan_id} made with {', '.join(diffs)}; "
                f"ack it, or drop it with: {self.reset_command('discard-plan')}")
        return p

    def _mode(self, state: ConsumerState | None, mode: str) -> str:
        wanted = _consumer_mode(mode)
        have = state.mode if state else None
        table = self.source.table
        if wanted is not None and have is not None and wanted != have:
            what = {"manifest": "versions", "listing": "a listing ledger",
                    "both": "versions and a listing ledger"}[have]
            raise InvalidInputError(
                f"consumer {self.name!r} tracks {what} (mode {have}); drop the mode argument or use another "
                "consumer name", mode="the mode argument")
        if wanted == "both" and table is None:
            raise InvalidInputError(f"mode both needs a trib table; {self.source.uri} has no manifest log",
                                    mode="mode")
        tracking = table.config.tracking if table is not None else "listing"
        if wanted is None and have == "manifest" and tracking == "both":
            return "both"  # the table was set to track both: keep the version, start a ledger
        return wanted or have or tracking

    def _tracking(self, state: ConsumerState | None, asked: str) -> ConsumerTracking:
        return tracking_for(self._mode(state, asked), self.source, self.name)

    def _compute(self, state: ConsumerState | None, opts: PlanOptions, now_ms: int | None) -> Plan:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        plan_id = f"{state.version if state else 0}-{uuid.uuid4().hex[:12]}"
        # The initial position applies to a first plan only, and is recorded by its ack.
        pos = (opts.initial_position or InitialPosition()) if state is None else None
        plan = self._tracking(state, opts.asked).plan(state, plan_id, now, replace(opts, initial_position=pos))
        return plan if pos is None else replace(plan, delta={**plan.delta, "initial_position": pos.to_json()})

    # -- committing ----------------------------------------------------------
    def _apply(self, state: ConsumerState | None, plan: Plan, now: int, note: str | None = None) -> ConsumerState:
        base = state or ConsumerState(self.name, 0, self.source.uri, created_ms=now,
                                      initial_position=InitialPosition.from_json(plan.delta.get("initial_position")))
        new = tracking_for(plan.mode, self.source, self.name).apply(base, replace(base, mode=plan.mode), plan)
        return replace(new, version=base.version + 1, table=self.source.uri, plan_id=plan.plan_id,
                       owner=plan.delta.get("owner") or base.owner,
                       note=note, created_ms=base.created_ms or now, updated_ms=now, held=plan.held,
                       delivered_files=base.delivered_files + len(plan.files),
                       delivered_bytes=base.delivered_bytes + plan.bytes)

    def after(self, plan: Plan) -> ConsumerState:
        """The state ``plan``'s ack will commit, computed and not committed: what the consumer will have
        delivered, for a restate that recomputes partitions from it (tributary_read/read/complete.py)."""
        st = self.current()
        if (st.version if st else 0) != plan.base_version:
            raise NoSuchPlanError(f"plan {plan.plan_id} of consumer {self.name} is no longer pending")
        new = self._apply(st, plan, plan.created_ms)
        return replace(new, sealed=self._ledgers.seals(dict(new.sealed)))

    def ack(self, plan_id: str, now_ms: int | None = None) -> AckResult:
        """Commit a plan: its files count as delivered. Acking the plan twice is a no-op."""
        m = _PLAN_ID.match(plan_id or "")
        if not m:
            raise NoSuchPlanError(f"{plan_id!r} is not a plan id (they look like 3-9f1c2ab4d3e1)")
        if not self.exists():
            raise self._no_such()
        base = int(m.group(1))
        state = self.current()
        cur = state.version if state else 0
        if base < cur:
            assert state is not None  # cur > 0: a state exists
            if state.plan_id == plan_id:
                return AckResult(state, plan_id, True)
            why = state.note or (f"plan {state.plan_id} was acked" if state.plan_id else "it was reset")
            raise StalePlanError(
                f"plan {plan_id} was made at version {base} of consumer {self.name!r}, which is now at "
                f"version {cur} ({why}); get a new plan with `trib files --consumer {self.name}`")
        plan = self._read_plan(cur) if base == cur else None
        if plan is None or plan.plan_id != plan_id:
            pend = f" (the pending plan is {plan.plan_id})" if plan else ""
            raise NoSuchPlanError(f"consumer {self.name!r} has no plan {plan_id}{pend}")
        now = int(time.time() * 1000) if now_ms is None else now_ms
        new = self._apply(state, plan, now, note=f"acked plan {plan_id}")
        if self._create_state(cur + 1, new):
            self._prune(cur + 1)
            return AckResult(new, plan_id, False)
        other = self.current()
        if other is not None and other.plan_id == plan_id:
            return AckResult(other, plan_id, True)
        raise StalePlanError(f"consumer {self.name!r} moved to version {cur + 1} while acking {plan_id}; plan again")

    def acked(self, plan_id: str) -> bool | None:
        """Whether ``plan_id`` was acked: True, False (its base version moved on another way: another plan,
        a reset), or None when it cannot be told: the consumer is still at its base (it may yet be acked),
        or the state after it was pruned (``KEEP_STATES``)."""
        m = _PLAN_ID.match(plan_id or "")
        state = self.current()
        if m is None or state is None or int(m.group(1)) >= state.version:
            return None
        after = int(m.group(1)) + 1
        st = state if after == state.version else self._read_state(after)
        return None if st is None else st.plan_id == plan_id

    # -- inspection ----------------------------------------------------------
    def _no_such(self) -> NoSuchConsumerError:
        return NoSuchConsumerError(
            f"no consumer {self.name!r} at {self.location} "
            f"(start one with: trib files {self.source.uri} --consumer {self.name})")

    def show(self) -> dict:
        if not self.exists():
            raise self._no_such()
        state = self.current()
        base = state.version if state else 0
        pend = self._read_plan(base)
        out: dict[str, Any] = {"consumer": self.name, "table": self.source.uri, "location": self.location,
                               "version": base}
        if state is not None:
            out.update(state.summary())
            info = self.storage.info(self._states.path(base))
            out["state_bytes"] = info.size if info else None
        out["pending"] = None if pend is None else {
            "plan_id": pend.plan_id, "created_ms": pend.created_ms, "files": len(pend.files),
            "bytes": pend.bytes, "conflicts": len(pend.conflicts), "beyond_horizon": len(pend.beyond_horizon),
            "skipped": list(self.skipped(pend))}
        # the files ``trib consumer skip`` left out of the last acked plan: delivered, never read
        out["skipped"] = list(self.skipped(base=base - 1, plan_id=state.plan_id)) if state is not None else []
        return out


def _consumer_mode(mode: str) -> str | None:
    if mode in (None, "auto"):
        return None
    if mode in ("listing", "mtime"):
        return "listing"
    if mode in ("manifest", "both"):
        return mode
    raise InvalidInputError(f"unknown consumer mode {mode!r}; choose auto, manifest, mtime or both")


def consumers_of(source: Source | str, state_dir: str | None = None,
                 options: Mapping[str, str] | None = None) -> list[Consumer]:
    """The consumers of ``source`` (in ``state_dir`` if given) by name: one listing, nothing read yet."""
    src = Source.of(source, options)
    storage = open_storage(state_dir, options) if state_dir else src.storage
    base = "" if state_dir else CONSUMERS_DIR
    names = sorted(d.path.rsplit("/", 1)[-1] for d in storage.list_dirs(base))
    return [Consumer(src, n, state_dir, options) for n in names if _NAME.match(n)]


def list_consumers(source: Source | str, state_dir: str | None = None,
                   options: Mapping[str, str] | None = None) -> list[dict]:
    """Every consumer of ``source`` (in ``state_dir`` if given), with a summary or the error reading it."""
    out = []
    for c in consumers_of(source, state_dir, options):
        name = c.name
        try:
            out.append(c.show())
        except NoSuchConsumerError:
            continue
        except (ConsumerStateCorruptError, InvalidInputError) as e:
            out.append({"consumer": name, "location": c.location, "error": str(e)})
    return out


def pending_files(source: Source | str, options: Mapping[str, str] | None = None) -> frozenset[str] | None:
    """The paths the pending plans of the table's consumers name, or None when one cannot be read.

    ``trib clean`` keeps those of them a compaction replaced: the plan was
    handed out and its reader may still be reading them. A consumer whose state
    cannot be read might name any file, hence None. Consumers kept in another
    ``state_dir`` are not seen (docs/compaction.md).
    """
    src = Source.of(source, options)
    out: set[str] = set()
    for d in src.storage.list_dirs(CONSUMERS_DIR):
        name = d.path.rsplit("/", 1)[-1]
        if not _NAME.match(name):
            continue
        try:
            plan = Consumer(src, name, None, options).pending()
        except (ConsumerStateCorruptError, InvalidInputError):
            return None
        if plan is not None:
            out.update(f.path for f in plan.files)
    return frozenset(out)

