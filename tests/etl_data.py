"""A raw hourly source with late arrivals of every pattern, and the oracle of the ETL's output.

Another tool writes a plain ``yyyy_MM_dd/HH`` directory of jsonl files (``id``
unique, ``ts`` the event time in epoch ms). Time is simulated: schedule time
``k`` is ``T0 + (k+1) h + 5 min`` and reads hour ``k``; each event (a file
landing, a rename) is applied to disk once the schedule passes it, with its
file's and directory's mtimes set to the simulated clock (what the OS does with
the real one), so nothing sleeps. T0 lies a day or two behind the real clock,
inside a listing consumer's 7-day lookback.

The late-arrival patterns (``RawFile.pattern``):

* ``normal``: lands within its hour, into its hour's directory;
* ``late_dir``: lands hours late into an old hour's directory, fresh mtime;
* ``old_mtime``: lands hours late with an mtime older than the run before it
  (``rsync -t``, S3 multipart): an mtime window that already ran misses it;
* ``late_rename``: written under a hidden in-progress name (a run lists the
  directory while it is hidden), renamed into place hours later, keeping its
  old mtime;
* and inside normal files, ``early`` records: their event time belongs to an
  earlier hour than their directory, so their output partition is not the
  directory's.

The oracle: for every record, (id, the output partition of its event time).
"""

from __future__ import annotations

import functools
import json
import os
import textwrap
import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tributary_read.table.layout import Layout

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
LAY = Layout(LAYOUT, PARTITION)
H = 3_600_000
MIN = 60_000
#: The patterns of RawFile.pattern; the last three are late arrivals.
PATTERNS = ("normal", "late_dir", "old_mtime", "late_rename")
LATE_PATTERNS = PATTERNS[1:]


def hour_dir(ms: int) -> str:
    return LAY.for_time(ms).path


def dt_of(ms: int) -> str:
    """The output partition value (``dt``) of an event time."""
    return _dt_of_hour(ms - ms % H)


@functools.lru_cache(maxsize=None)
def _dt_of_hour(hour_ms: int) -> str:
    # LAY is UTC: every instant of an hour has its hour's dt. Oracles ask for millions of
    # records a test, and a Layout lookup per record made the kill trials' checks quadratic.
    return LAY.for_time(hour_ms).values["dt"]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Record:
    id: int
    ts: int
    early: bool = False  # its event time is in an earlier hour than its file's directory

    @property
    def dt(self) -> str:
        return dt_of(self.ts)

    def line(self) -> str:
        # json.dumps's bytes for two ints and this string, at a fifth of its cost: a kill test's source
        # writes 100,000 lines a trial.
        return f'{{"id": {self.id:d}, "ts": {self.ts:d}, "msg": "event {self.id:d}"}}\n'


@dataclass(frozen=True)
class RawFile:
    """One file of the raw source, at its final (visible) name."""

    path: str  # root-relative final name
    pattern: str
    records: tuple[Record, ...]
    arrival_ms: int  # when its final name appears
    mtime_ms: int
    hidden: str | None = None  # late_rename: the in-progress name it was written under
    written_ms: int | None = None  # late_rename: when the hidden file was written

    @property
    def directory(self) -> str:
        return self.path.rsplit("/", 1)[0]

    @property
    def hour_start(self) -> int:
        return LAY.parse(self.directory).start_ms

    def data(self) -> bytes:
        return "".join(r.line() for r in self.records).encode()


@dataclass(order=True)
class _Event:
    t: int
    seq: int
    kind: str = field(compare=False)  # "create" | "rename"
    file: RawFile = field(compare=False)


def _utime(p: Path, ms: int) -> None:
    os.utime(p, ns=(ms * 1_000_000, ms * 1_000_000))


class RawSource:
    """The generator: call :meth:`advance` before each schedule time's run.

    Args:
        root: the raw directory (created).
        cycles: how many schedule times (hours) the simulation runs.
        seed: the random seed (file times and late delays).
        late_each: how many files of each late pattern.
        start_hours_ago: T0 this many whole hours before the real clock's hour.
        per_file: records per file.
        early: every third hour's first file also carries a record of two hours earlier (False: each
            hour's records stay in that hour, so each run writes only its own hour's partition).
    """

    def __init__(self, root: Path, cycles: int, *, seed: int = 10, late_each: int = 4,
                 start_hours_ago: int | None = None, per_file: int = 2, early: bool = True):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.cycles = cycles
        now = int(datetime.now(timezone.utc).timestamp() * 1000)
        self.t0 = now - now % H - (start_hours_ago or cycles + 12) * H
        self.files: list[RawFile] = []
        self._events: list[_Event] = []
        self._next_id = 0
        self._applied = -1  # the last schedule index applied
        rng = random.Random(seed)
        self._build(rng, late_each, per_file, early)
        self._events.sort()

    # -- schedule ---------------------------------------------------------------------
    def schedule(self, k: int) -> int:
        """Schedule time ``k`` (epoch ms): five minutes past the end of hour ``k``."""
        return self.t0 + (k + 1) * H + 5 * MIN

    def schedule_iso(self, k: int) -> str:
        return iso(self.schedule(k))

    def hour(self, k: int) -> int:
        """Start of the hour schedule time ``k`` reads (its window)."""
        return self.t0 + k * H

    # -- building ---------------------------------------------------------------------
    def _records(self, rng: random.Random, n: int, lo: int, hi: int) -> list[Record]:
        out = []
        for _ in range(n):
            out.append(Record(self._next_id, rng.randrange(lo, hi)))
            self._next_id += 1
        return out

    def _add(self, f: RawFile) -> None:
        self.files.append(f)
        if f.hidden:
            self._events.append(_Event(f.written_ms, len(self._events), "create", f))
            self._events.append(_Event(f.arrival_ms, len(self._events), "rename", f))
        else:
            self._events.append(_Event(f.arrival_ms, len(self._events), "create", f))

    def _build(self, rng: random.Random, late_each: int, per_file: int, early: bool) -> None:
        t0, n = self.t0, self.cycles
        for h in range(n):
            for j in range(2):
                # Within its hour, clear of the 5 minutes the run waits past it.
                t = t0 + h * H + rng.randrange(6 * MIN, H - 6 * MIN)
                recs = self._records(rng, per_file, t0 + h * H, t)
                if early and j == 0 and h >= 3 and h % 3 == 0:
                    # An event from two hours earlier, delivered with this hour's file.
                    e = self._records(rng, 1, t0 + (h - 2) * H, t0 + (h - 1) * H)[0]
                    recs.append(Record(e.id, e.ts, early=True))
                self._add(RawFile(f"{hour_dir(t)}/normal-{h}-{j}.jsonl", "normal", tuple(recs), t, t))
        # The late patterns: event hours spread over [1, n-5], each file landing 1.5-4 hours
        # after its hour ended, and always before the last schedule time.
        last = t0 + (n - 1) * H + 50 * MIN
        hours = [1 + (i * 5 + p * 3) % max(1, n - 5) for p in range(3) for i in range(late_each)]
        k = 0
        for pattern in LATE_PATTERNS:
            for i in range(late_each):
                eh = hours[k]
                k += 1
                lo = t0 + eh * H
                e = lo + rng.randrange(10 * MIN, H - 10 * MIN)  # when it was written (its event hour)
                a = min(last, lo + H + rng.randrange(int(1.5 * H), 4 * H))  # when its final name appears
                recs = tuple(self._records(rng, per_file, lo, e))
                d = hour_dir(lo)
                if pattern == "late_dir":
                    self._add(RawFile(f"{d}/late-{i}.jsonl", pattern, recs, a, a))
                elif pattern == "old_mtime":
                    self._add(RawFile(f"{d}/rsync-{i}.jsonl", pattern, recs, a, e))
                else:
                    self._add(RawFile(f"{d}/renamed-{i}.jsonl", pattern, recs, a, e,
                                      hidden=f"{d}/.renamed-{i}.jsonl.inprogress", written_ms=e))

    # -- running ----------------------------------------------------------------------
    def advance(self, k: int) -> list[RawFile]:
        """Apply every event up to schedule time ``k``; return the files that became visible.

        Call with k = 0, 1, 2... in order (a repeated ``k`` applies nothing).
        """
        if k <= self._applied:
            return []
        s = self.schedule(k)
        new: list[RawFile] = []
        while self._events and self._events[0].t <= s:
            ev = self._events.pop(0)
            f = ev.file
            final = self.root / f.path
            if ev.kind == "create":
                p = self.root / (f.hidden or f.path)
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(f.data())
                _utime(p, f.mtime_ms)
                if f.hidden is None:
                    new.append(f)
            else:
                (self.root / f.hidden).rename(final)  # a rename keeps the file's mtime
                new.append(f)
            _utime(final.parent, ev.t)
        self._applied = k
        return new

    def hidden_now(self) -> list[str]:
        """In-progress names on disk now (written, not yet renamed)."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob(".*.inprogress"))

    # -- the oracle -------------------------------------------------------------------
    def visible_by(self, k: int) -> list[RawFile]:
        """Files whose final name exists at schedule time ``k``."""
        s = self.schedule(k)
        return [f for f in self.files if f.arrival_ms <= s]

    def arrived_in(self, k: int) -> list[RawFile]:
        """Files that became visible after schedule time ``k-1`` and by ``k``: what run ``k`` must read."""
        lo = self.schedule(k - 1) if k > 0 else -1
        return [f for f in self.files if lo < f.arrival_ms <= self.schedule(k)]

    def expected_rows(self, k: int | None = None) -> set[tuple[int, str]]:
        """(id, dt of its event time) of every record visible by schedule time ``k`` (default: the last)."""
        k = self.cycles - 1 if k is None else k
        return {(r.id, r.dt) for f in self.visible_by(k) for r in f.records}

    def rows_of(self, k: int, dts: set[str]) -> set[tuple[int, str]]:
        """:meth:`expected_rows` of ``k`` in the partitions ``dts`` only: a check per trial that
        does not grow with the table (a scan of every record per call made the kill trials' checks
        quadratic: 1.8M records a call in test_hidden_uncommitted)."""
        s = self.schedule(k)
        return {(i, dt) for dt in dts for arrival, i in self._by_dt.get(dt, ()) if arrival <= s}

    @functools.cached_property
    def _by_dt(self) -> dict[str, list[tuple[int, int]]]:
        """dt -> (arrival of its file, id) of every record: the files are fixed when the source is built."""
        out: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for f in self.files:
            for r in f.records:
                out[r.dt].append((f.arrival_ms, r.id))
        return dict(out)

    def expected_counts(self, k: int | None = None) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for _, dt in self.expected_rows(k):
            out[dt] += 1
        return dict(out)

    def late_in(self, k: int) -> set[str]:
        """Run ``k``'s late inputs: files in a directory whose hour ended before run ``k``'s hour.

        A "read the last hour's directory" job never sees them. Every
        ``late_dir``, ``old_mtime`` and ``late_rename`` file is one; the
        ``old_mtime`` and ``late_rename`` ones also carry an mtime older than
        the previous run (:meth:`old_mtime_in`), which an mtime window misses.
        """
        return {f.path for f in self.arrived_in(k) if f.hour_start < self.hour(k)}

    def old_mtime_in(self, k: int) -> set[str]:
        """Run ``k``'s inputs modified before the previous run's schedule time."""
        if k == 0:
            return set()
        return {f.path for f in self.arrived_in(k) if f.mtime_ms <= self.schedule(k - 1)}

    def partition_dirs_touched(self, k: int) -> set[str]:
        """Output partition directories (``2024_01_01/05``) run ``k`` writes into."""
        return {hour_dir(r.ts) for f in self.arrived_in(k) for r in f.records}

    def by_pattern(self, pattern: str) -> list[RawFile]:
        return [f for f in self.files if f.pattern == pattern]

    def early_records(self) -> list[Record]:
        return [r for f in self.files for r in f.records if r.early]


# -- the job around it -------------------------------------------------------------------
SQL = "SELECT id, ts, msg FROM raw\n"
#: The raw records' columns: given, so that Spark infers nothing and a quiet hour (no new file) still has columns.
SCHEMA = "id BIGINT, ts BIGINT, msg STRING"


#: ``write_job(spark_master=CLASSIC)``: the job runs its own classic driver whatever the environment says.
CLASSIC = "local[2]"


def spark_section(master: str | None = None) -> str:
    """A job's ``[spark]`` section: none of a driver's settings on the suite's warm server (``$TRIB_SPARK_REMOTE``,
    set by the ``warm_spark`` fixture) unless ``master`` asks for a classic driver; else ``master`` or ``CLASSIC``."""
    if master is None and os.environ.get("TRIB_SPARK_REMOTE"):
        return '[spark]\nconf = { "spark.sql.shuffle.partitions" = "2" }\n'
    return (f'[spark]\nmaster = "{master or CLASSIC}"\n'
            'conf = { "spark.sql.shuffle.partitions" = "2", "spark.ui.enabled" = "false" }\n')


def write_job(directory: Path, *, name: str, raw: Path | str, out: Path | str, hive_table: str | None = None,
              metastore: str | None = None, consumer: str | None = None, spark_master: str | None = None,
              sql: str = SQL, schema: str | None = SCHEMA, output_mode: str | None = None) -> Path:
    """A job file (and its SQL file) reading ``raw`` as a consumer and writing ``out``; returns its path.

    Without ``spark_master`` the job names no driver when the test runs on the suite's warm server (the
    ``warm_spark`` fixture sets ``$TRIB_SPARK_REMOTE``), so its runs are thin clients of that server; else
    it runs a classic ``local[2]`` driver, as every job did before the server existed.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.sql").write_text(sql)
    lines = [
        "[job]",
        f'name = "{name}"',
        f'sql = "{name}.sql"',
        "",
        "[[inputs]]",
        f'table = "{raw}"',
        'view = "raw"',
        'mode = "consumer"',
        f'layout = "{LAYOUT}"',
        'format = "jsonl"',
        f'consumer = "{consumer or name}"',
    ]
    if schema:
        lines.append(f'schema = "{schema}"')
    lines += ["", "[output]", f'table = "{out}"', 'time_column = "ts"']
    if output_mode:
        lines.append(f'mode = "{output_mode}"')
    if hive_table:
        lines += ["", "[hive]", f'table = "{hive_table}"', f'metastore = "{metastore}"']
    lines += ["", spark_section(spark_master)]
    path = directory / f"{name}.toml"
    path.write_text("\n".join(lines))
    return path


def create_output_table(root: Path | str, fmt: str = "parquet") -> None:
    """The output trib table, as a user creates it beforehand (``trib table create``)."""
    from tributary_read.table.config import Table, TableConfig

    Table.create(str(root), TableConfig(LAY, format=fmt))


class Hs2:
    """Queries through HiveServer2, each on a new session.

    A scheduler's downstream query opens its own session. The Spark Thrift
    Server caches a table's file listing per session: a session left open
    across runs keeps seeing a refreshed partition's old files (new sessions see
    the new ones at once), so a long-lived cursor would test that cache, not
    the sync.
    """

    def __init__(self, services):
        self.services = services

    def query(self, sql: str, fetch: bool = True) -> list[tuple]:
        from conftest import hs2_connect

        conn = hs2_connect(self.services)
        try:
            cur = conn.cursor()
            cur.execute(sql)
            return cur.fetchall() if fetch else []
        finally:
            conn.close()

    def execute(self, sql: str) -> None:
        self.query(sql, fetch=False)

    def beeline(self, sql: str, columns: int) -> list[list[str]]:
        """The rows of ``sql`` (``columns`` wide) as Hive's own JDBC shell prints them: the pyspark
        wheel's ``bin/beeline``.

        A JVM per call (seconds): the kill trials count through it once per test,
        and through :meth:`query` every trial. beeline -f also prints a bare "null"
        per empty operation log it polls, at times with no line break before the
        next row ("null500001"), so each row is wrapped in markers and read by them.
        """
        import re
        import subprocess
        import tempfile
        from pathlib import Path

        import pyspark

        home = Path(pyspark.__file__).parent
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONF_DIR", "HIVE_CONF_DIR")}
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:  # -e would echo its prompt into the rows
            cols = ", ".join(f"CAST(`c{i}` AS STRING)" for i in range(columns))
            script.write(f"SELECT concat_ws('|', '<<', {cols}, '>>') FROM ({sql}) AS q(" +
                         ", ".join(f"c{i}" for i in range(columns)) + ");\n")
            script.flush()
            p = subprocess.run([str(home / "bin" / "beeline"), "-u",
                                f"jdbc:hive2://127.0.0.1:{self.services.hs2_port}", "-n", "trib", "--silent=true",
                                "--showHeader=false", "--outputformat=csv2", "-f", script.name],
                               capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                               env={**env, "SPARK_HOME": str(home)})
        assert p.returncode == 0, f"beeline exit {p.returncode}: {p.stderr[-2000:]}"
        return [m.split("|")[1:-1] for m in re.findall(r"<<\|.*?\|>>", p.stdout)]

    def rows(self, name: str, fmt: str = "parquet") -> list[tuple[int, str]]:
        """(id, dt) of every row Hive reads."""
        col = "id" if fmt == "parquet" else "CAST(get_json_object(line, '$.id') AS BIGINT)"
        return [(int(i), str(dt)) for i, dt in self.query(f"SELECT {col}, dt FROM {name}")]

    def counts(self, name: str) -> dict[str, int]:
        """Rows per partition (``dt`` value)."""
        return {str(dt): int(c) for dt, c in self.query(f"SELECT dt, count(*) FROM {name} GROUP BY dt")}


def create_hive_table(hs2: Hs2, name: str, root: Path | str, fmt: str = "parquet") -> None:
    """The output's EXTERNAL Hive table; the job's ``[hive]`` step adds and refreshes its partitions.

    Parquet holds the columns; a text format is read as one ``line`` column (no
    JSON SerDe on the test's Thrift server), which is enough to count and to
    pick ids out with ``get_json_object``.
    """
    cols = "id BIGINT, ts BIGINT, msg STRING" if fmt == "parquet" else "line STRING"
    stored = "PARQUET" if fmt == "parquet" else "TEXTFILE"
    hs2.execute(f"CREATE EXTERNAL TABLE {name} ({cols}) PARTITIONED BY (dt STRING) "
                f"STORED AS {stored} LOCATION 'file://{Path(root).resolve()}'")


def output_rows(root: Path | str, dts: set[str] | None = None) -> list[tuple[int, str, str]]:
    """(id, dt of the row's ts, dt of the directory it sits in) of every row of the output's committed files
    (of the partitions ``dts`` only, if given).

    Read through the manifest (what trib says is committed) with pyarrow or as
    jsonl; a file listed twice or a row written twice shows up as a duplicate.
    """
    import io

    from tributary_read.read.resolve import manifest_files
    from tributary_read.table.config import Table

    t = Table.load(str(root))
    fs = manifest_files(t, 0)
    out = []
    for f in fs.files:
        part = LAY.parse(f.path.rsplit("/", 1)[0]).values["dt"]
        if dts is not None and part not in dts:
            continue
        data = t.storage.read(f.path)
        assert len(data) == f.size, f"{f.path}: {len(data)} bytes, committed {f.size}"
        if f.path.endswith(".parquet"):
            import pyarrow.parquet as pq

            tab = pq.read_table(io.BytesIO(data), columns=["id", "ts"]).to_pydict()
            rows = zip(tab["id"], tab["ts"])
        else:
            recs = [json.loads(x) for x in data.decode().splitlines() if x]
            rows = ((r["id"], r["ts"]) for r in recs)
        for i, ts in rows:
            out.append((int(i), dt_of(_ms(ts)), part))
    return out


def _ms(ts) -> int:
    """Epoch ms from a long (ms) or a timestamp the writer kept as a datetime."""
    if isinstance(ts, datetime):
        return int(ts.replace(tzinfo=ts.tzinfo or timezone.utc).timestamp() * 1000)
    return int(ts)


def assert_exactly_once(rows: list[tuple[int, str, str]], expected: set[tuple[int, str]]) -> None:
    """Each expected id once, in the directory of its event time, nothing else."""
    from collections import Counter

    counts = Counter(i for i, _, _ in rows)
    dup = sorted(i for i, c in counts.items() if c > 1)
    want = {i for i, _ in expected}
    missing = sorted(want - set(counts))
    extra = sorted(set(counts) - want)
    assert not dup, f"{len(dup)} ids written more than once, e.g. {dup[:5]}"
    assert not missing, f"{len(missing)} ids missing, e.g. {missing[:5]}"
    assert not extra, f"{len(extra)} unexpected ids, e.g. {extra[:5]}"
    wrong = [(i, dt, d) for i, dt, d in rows if dt != d]
    assert not wrong, f"{len(wrong)} rows outside the partition of their event time, e.g. {wrong[:3]}"
    assert {(i, dt) for i, dt, _ in rows} == expected


def table_job_text(name: str, output_extra: str = "", tail: str = "") -> str:
    """A job file reading the trib table ``raw`` as a consumer with ``q.sql`` into ``events``.

    ``output_extra`` goes into ``[output]``; ``tail`` (more tables) after it.
    """
    return textwrap.dedent(f"""\
        [job]
        name = "{name}"
        sql = "q.sql"
        [[inputs]]
        table = "raw"
        view = "raw"
        mode = "consumer"
        [output]
        table = "events"
        time_column = "ts"
        """) + output_extra + textwrap.dedent(tail)


def consumer_job_text(name: str, extra: str = "", *, spark: bool = False) -> str:
    """A job file reading jsonl ``raw`` (a plain hourly directory) as a consumer into ``events``.

    ``extra`` goes into the input's table; ``spark`` adds a small local session for runs that really run.
    """
    text = textwrap.dedent(f"""\
        [job]
        name = "{name}"
        sql = "etl.sql"

        [[inputs]]
        table = "raw"
        view = "raw"
        mode = "consumer"
        layout = "{{yyyy}}_{{MM}}_{{dd}}/{{HH}}"
        format = "jsonl"
        schema = "id BIGINT, ts BIGINT"
        """) + extra + textwrap.dedent("""
        [output]
        table = "events"
        time_column = "ts"
        """)
    if spark:
        text += "\n" + spark_section()
    return text

