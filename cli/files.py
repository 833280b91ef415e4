"""``trib files``: print the exact file set a run should read."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from datetime import timezone as dt_timezone

import click

from tributary_read.errors import InvalidInputError
from tributary_read.read.fileset import ReadMode
from tributary_read.read.resolve import Source, plain_layout
from tributary_read.read.selection import ReadRequest, select
from tributary_read.read.window import TimeWindow, WindowForm

from .context import TribState, emit, json_option, parse_duration_ms, pass_state


class ListingProgress:
    """``listing ROOT: 120/4200 directories 3.1s`` on stderr, drawn only once a listing passes ``delay``.

    A ticker thread redraws it, because a single recursive listing reports no
    progress of its own until it is done.
    """

    def __init__(self, label: str, stream=None, delay: float = 1.0, interval: float = 0.2):
        self.label = label
        self.stream = stream or sys.stderr
        self.delay = delay
        self.interval = interval
        self.t0 = time.monotonic()
        self.done, self.total = 0, None
        self.shown = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()

    def __call__(self, done: int, total: int | None) -> None:
        self.done, self.total = done, total

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            if time.monotonic() - self.t0 >= self.delay:
                self._draw()

    def _draw(self) -> None:
        with self._lock:
            secs = time.monotonic() - self.t0
            count = f"{self.done}/{self.total} directories " if self.total else ""
            self.stream.write(f"\rlisting {self.label}: {count}{secs:.1f}s ")
            self.stream.flush()
            self.shown = True

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        with self._lock:
            if self.shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()


@contextmanager
def listing_progress(state: TribState, label: str, quiet: bool = False):
    """Yield a progress callback, or None when stderr is not a TTY or ``--quiet`` was given."""
    if quiet or not state.progress_enabled():
        yield None
        return
    bar = ListingProgress(label)
    try:
        yield bar
    finally:
        bar.close()


def open_source(state: TribState, root: str, layout: str | None, partition: str | None,
                tz: str | None) -> tuple[Source, dict]:
    """The table or plain directory named by ROOT (an alias from trib.toml works too)."""
    if (partition or tz) and not layout:
        raise InvalidInputError("--partition and --timezone describe a --layout; give --layout too")
    lay = plain_layout(layout, partition, tz or "UTC") if layout else None
    uri, options = state.resolve(root)
    return Source.open(uri, options, lay), options


@click.command()
@click.argument("root")
@click.option("--mode", type=click.Choice(ReadMode.values()), default=ReadMode.AUTO.value, show_default=True,
              help="manifest: committed files; mtime: files by modification time; both: committed trib files + "
                   "other tools' files by mtime; auto: as the table's tracking says, mtime for a plain directory.")
@click.option("--since-version", type=int, help="Manifest: exclusive lower bound on commit versions (default 0).")
@click.option("--until-version", type=int, help="Manifest: inclusive upper bound (default: latest).")
@click.option("--start", help="Window start, inclusive: ISO-8601 with an offset, or epoch ms.")
@click.option("--end", help="Window end, inclusive: ISO-8601 with an offset, or epoch ms.")
@click.option("--schedule-time", help="Derive the window of the run scheduled at this time (ISO-8601 with an "
                                      "offset, or epoch ms): the whole --period before it, minus --lag.")
@click.option("--period", help="Window length with --schedule-time, e.g. 1h or 1d.")
@click.option("--lag", help="The window ends by the schedule time's period start minus this, e.g. 10m.")
@click.option("--window-form", type=click.Choice(WindowForm.values()),
              help="With --schedule-time: aligned (default) = the last whole --period ending by T - lag; "
                   "sliding = [T - lag - window, T - lag) (docs/reading.md).")
@click.option("--window", help="The sliding form's length (default: --period).")
@click.option("--partitions", help="Partition range to list, e.g. 'dt>=2020061701,dt<=2020062401'.")
@click.option("--layout", help="Plain directory: its template, e.g. '{yyyy}_{MM}_{dd}/{HH}'.")
@click.option("--partition", "partition_spec", help="Plain directory: partition spec (default dt=<all tokens>).")
@click.option("--timezone", help="Plain directory: zone of the directory times (default UTC).")
@click.option("--consumer", help="Next batch of this durable consumer (nothing moves until `trib consumer ack`).")
@click.option("--lookback", help="Listing consumer horizon by partition time (default: stored, else 7d).")
@click.option("--min-age", help="Listing consumer: leave files modified within this long for a later run "
                                "(default 1m: they may be mid-write; 0s delivers every file listed).")
@click.option("--full-scan", is_flag=True, help="Listing consumer: list unchanged directories too (catches in-place rewrites).")
@click.option("--full-scan-every", help="Listing consumer: make a run a full scan when the last one is this old "
                                        "(stored; default 24h; 0 or off = only with --full-scan).")
@click.option("--initial-position", help="A new consumer's first plan only: earliest (default) delivers every file "
                                         "that exists; latest takes them all as delivered; a time (ISO-8601 with "
                                         "an offset, or epoch ms) takes partitions that ended before it as delivered.")
@click.option("--allow-beyond-horizon", is_flag=True,
              help="Listing consumer: acknowledge a partition an older trib sealed with a digest only that changed in "
                   "a way it cannot tell apart (its files are a warning, not delivered); without it that partition "
                   "is held back and the ack exits 17.")
@click.option("--max-files", help="Consumer: at most N files in this plan, whole partitions (commits) oldest "
                                  "first, at least one; the rest stays pending and is reported as the backlog "
                                  "(default 100000; 0 or off = no cap).")
@click.option("--state-dir", help="Keep consumer state in DIR/NAME instead of ROOT/_tributary/consumers (read-only tables).")
@click.option("--parallel", type=int, help="Concurrent directory listings (default: 16 remote, 1 local; raise it for NFS).")
@click.option("--uri/--relative", "as_uri", default=False, help="Print full URIs instead of ROOT-relative paths (--json: add a `uri` per file).")
@click.option("-0", "--null", "null", is_flag=True,
              help="End each path with NUL instead of a newline (for names with newlines; xargs -0).")
@click.option("--allow-untracked", is_flag=True,
              help="Manifest-tracked table: print the manifest's files even if files other tools wrote in this "
                   "read's scope are left out, looking for them only in the answer's partitions (fast, narrow; "
                   "a warning); without it the read lists its whole scope and exits 13 if any is there.")
@click.option("--allow-changed", is_flag=True,
              help="Listing consumer: a delivered file that shrank, was rewritten or removed (or a Parquet file "
                   "or compressed stream that grew) is reported in conflicts and taken as it is; without it "
                   "its partition is held back, the rest delivered, and the ack exits 17. A file that only grew "
                   "is delivered as a byte range either way.")
@click.option("--all", "all_files", is_flag=True,
              help="Every file of ROOT, on purpose. Without a consumer, window, version or partition bound, a "
                   "read is refused: it would return every file on every run.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@json_option
@pass_state
def files(state: TribState, root, mode, since_version, until_version, start, end, schedule_time, period, lag,
          window_form, window, partitions, layout, partition_spec, timezone, consumer, lookback, min_age, full_scan,
          full_scan_every, initial_position, allow_beyond_horizon, max_files, state_dir, parallel, as_uri, null, allow_untracked,
          allow_changed, all_files, quiet, as_json) -> None:
    """Print the exact files of ROOT for this run, one per line.

    \b
    Windows are closed intervals [start, end] in ms, both ends inclusive.
    Hidden and in-progress files, _SUCCESS and _tributary/ are never listed.
    """
    if null and as_json:
        raise InvalidInputError("-0/--null is for the path list; --json already quotes every path")
    every_ms = None if full_scan_every is None else (
        0 if full_scan_every.strip().lower() in ("off", "never") else parse_duration_ms(full_scan_every,
                                                                                          "--full-scan-every"))
    src, options = open_source(state, root, layout, partition_spec, timezone)
    tz = src.layout.tz if src.layout else dt_timezone.utc
    window = TimeWindow.for_schedule(
        start, end, schedule_time=schedule_time, tz=tz,
        period_ms=parse_duration_ms(period, "--period") if period is not None else None,
        lag_ms=parse_duration_ms(lag, "--lag") if lag is not None else None,
        form=window_form, window_ms=parse_duration_ms(window, "--window") if window is not None else None)
    request = ReadRequest(
        mode=mode, consumer=consumer, state_dir=state_dir, window=window, since_version=since_version,
        until_version=until_version, partitions=partitions,
        lookback_ms=parse_duration_ms(lookback, "--lookback") if lookback is not None else None,
        min_age_ms=parse_duration_ms(min_age, "--min-age") if min_age is not None else None,
        full_scan=full_scan, full_scan_every_ms=every_ms, parallel=parallel, allow_untracked=allow_untracked,
        all_files=all_files, initial_position=initial_position, allow_beyond_horizon=allow_beyond_horizon,
        allow_changed=allow_changed, max_files=max_files)
    with listing_progress(state, src.uri, quiet) as progress:
        chosen = select(src, request, options=options, progress=progress)
    fs, plan = chosen.fileset, chosen.plan

    def human():
        end = "\0" if null else "\n"
        lines = [(fs.uri(f) if as_uri else f.path) + end for f in fs.files]
        for i in range(0, len(lines), 10_000):  # click.echo flushes on every call: one write per 10,000 paths
            click.echo("".join(lines[i : i + 10_000]), nl=False)
        _notes(fs, plan, root, state_dir)
    if not as_json:  # the path list needs no document
        human()
        return
    doc = fs.to_json()
    if as_uri:  # JSON keeps ROOT-relative paths (the stable contract) and adds the full URI
        for f, d in zip(fs.files, doc["files"]):
            d["uri"] = fs.uri(f)
    emit(as_json, doc, human)
    if plan is not None and plan.held:  # the ack exits 17: a scheduled job's log says why beforehand
        click.echo(f"trib: {_held_partitions(plan)}", err=True)
    if as_json and fs.untracked is not None:  # a scheduled job logs stderr: untracked data is never silent
        click.echo(f"trib: {fs.untracked.message()}", err=True)
    if as_json and plan is not None and plan.conflicts:  # acknowledged with --allow-changed: still said
        click.echo(f"trib: {_changed(plan)}", err=True)
    if as_json and plan is not None and plan.deferred:  # "files": [] alone would read as nothing new
        click.echo(f"trib: {_held(plan)}", err=True)


def _held(plan) -> str:
    from tributary_read.read.min_age import note

    return note(plan.deferred, plan.min_age_ms)


def _changed(plan) -> str:
    c = plan.conflicts[0]
    return (f"warning: {len(plan.conflicts)} delivered files changed since and are not delivered again "
            f"(--allow-changed; e.g. {c.path}: {c.reason}); see --json")


def _notes(fs, plan, root: str, state_dir: str | None) -> None:
    """One stderr line per thing a person should know; stdout stays a clean file list."""
    def warn(msg: str) -> None:
        click.echo(f"trib: {msg}", err=True)

    if fs.skipped:
        s = fs.skipped[0]
        warn(f"warning: {len(fs.skipped)} files not returned (e.g. {s.path}: {s.reason}); see --json")
    if fs.untracked is not None:
        warn(fs.untracked.message())
    if plan is None:
        return
    ranged = [f for f in fs.files if f.offset is not None]
    if ranged:  # a path list cannot say which bytes: a reader of whole files would read delivered bytes again
        warn(f"warning: {len(ranged)} files grew after delivery and are byte ranges (e.g. {ranged[0].path} from "
             f"byte {ranged[0].offset} to {ranged[0].valid_length}): read only [offset, valid_length), see --json")
    if plan.conflicts:
        warn(_changed(plan))
    if plan.beyond_horizon:
        warn(f"warning: {len(plan.beyond_horizon)} files of partitions that changed beyond the lookback horizon "
             f"are not delivered (--allow-beyond-horizon; e.g. {plan.beyond_horizon[0].path}); see --json")
    if plan.deferred:
        warn(_held(plan))
    if plan.stats.get("held_files"):
        warn(f"{plan.stats['held_bytes']} bytes at the end of {plan.stats['held_files']} growing files wait for "
             "their last line (gzip member) to be complete: it is still being written")
    if plan.held:
        warn(_held_partitions(plan))
    left = plan.stats.get("backlog")
    if left and left["files"]:
        warn(f"backlog: {left['files']} files ({left['bytes']} bytes) in {left['partitions']} partitions from "
             f"{left['oldest_partition']} left for the next runs (--max-files)")
    if plan.baseline:
        b = plan.baseline
        warn(f"first plan: {b['files']} files in {b['directories']} partitions were taken as already delivered "
             "(--initial-position)")
    extra = f" --state-dir {state_dir}" if state_dir else ""
    warn(f"plan {plan.plan_id}: {len(plan.files)} files; after processing run: "
         f"trib consumer ack {root} {plan.consumer} {plan.plan_id}{extra}")


def _held_partitions(plan) -> str:
    named = "; ".join(f"{h.path} ({', '.join(h.changes)})" for h in plan.held)
    n = len(plan.held)
    return (f"warning: {n} partition{'s' * (n != 1)} held back, the rest is in the plan: {named}; "
            "the ack exits 17 naming them (see --json: held)")
