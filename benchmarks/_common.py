"""Helpers shared by the benchmark scripts (not a test module: nothing here is timed by pytest)."""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: gitignored scratch space on the same disk as the repository
DEFAULT_WORKDIR = HERE / "out"

if str(REPO) not in sys.path:  # run as `python benchmarks/x.py` without installing
    sys.path.insert(0, str(REPO))


def machine_info() -> dict:
    import pyarrow

    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on Linux/macOS
        load = "n/a"
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": sys.version.split()[0],
        "pyarrow": pyarrow.__version__,
        "platform": platform.platform(),
        "loadavg": load,
        "git": _git_rev(),
    }


def _git_rev() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else "n/a"
    except (OSError, subprocess.SubprocessError):
        return "n/a"


def fs_type(path: str | os.PathLike) -> str:
    """File-system type of ``path`` (Linux), to show the disk is real and not tmpfs."""
    try:
        out = subprocess.run(["df", "--output=fstype", str(path)], capture_output=True, text=True,
                             timeout=10).stdout.split()
        return out[-1] if len(out) > 1 else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


class WorkDir:
    """A fresh scratch directory, removed on exit unless ``keep``."""

    def __init__(self, parent: str | os.PathLike | None = None, prefix: str = "bench-", keep: bool = False):
        parent = Path(parent) if parent else DEFAULT_WORKDIR
        parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        self.keep = keep

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc) -> None:
        if not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (p in 0..100)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(p / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def median(values: list[float]) -> float:
    return statistics.median(values)


def md_table(headers: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def iso(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def hour_dir(ms: int) -> str:
    return f"{_dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc):%Y_%m_%d/%H}"


def touch(path: str, mtime_ms: int) -> None:
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


def shown_args(argv: list[str]) -> list[str]:
    """A benchmark's command line as its results record it: without ``--json`` / ``--markdown`` and their files
    (the output files run_all.py asks for are not part of the measurement)."""
    out, skip = [], False
    for a in argv:
        if skip or a.startswith(("--json=", "--markdown=")):
            skip = False
            continue
        if a in ("--json", "--markdown"):
            skip = True
            continue
        out.append(a)
    return out


def emit(text: str, result: dict, args) -> dict:
    """Print the markdown summary, write ``--json`` / ``--markdown`` files if asked; return ``result``."""
    import json

    print(text)
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    if getattr(args, "markdown", None):
        Path(args.markdown).write_text(text + "\n")
    return result


def hive_pair(work: Path, timeout: float = 300):
    """A local metastore + HiveServer2 in ``work/hive`` for one benchmark: a context yielding their ports."""
    import contextlib

    from tributary_read.services import hive as services

    @contextlib.contextmanager
    def pair():
        hive_dir = Path(work) / "hive"
        hms_port, hs2_port = services.free_ports(2)
        print(f"starting metastore :{hms_port} + HiveServer2 :{hs2_port} in {hive_dir} ...", file=sys.stderr)
        services.start(str(hive_dir), hms_port=hms_port, hs2_port=hs2_port, timeout=timeout)
        try:
            yield hms_port, hs2_port
        finally:
            services.stop(str(hive_dir))

    return pair()


def emit_report(report: dict, print_report, args) -> None:
    """Print a report through its ``print_report``, and write ``--markdown`` / ``--json`` copies if asked."""
    import contextlib
    import io
    import json

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_report(report)
    sys.stdout.write(buf.getvalue())
    if getattr(args, "markdown", None):
        Path(args.markdown).write_text(buf.getvalue().strip() + "\n")
    if getattr(args, "json_out", None):
        Path(args.json_out).write_text(json.dumps(report, indent=2))


def timed(fn, reps: int) -> tuple[float, float, object]:
    """(median s, best s, last result) over ``reps`` calls."""
    import time

    times, result = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return median(times), min(times), result


def bench_session(master: str, app: str, **conf: str):
    """A quiet SparkSession for a benchmark (no UI, two shuffle partitions, errors only), plus ``conf``."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from tributary_read.spark.session import spark_session

    spark = spark_session(master, {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                                   "spark.sql.shuffle.partitions": "2", **conf}, app)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# -- a simulated landing zone (bench_readers.py, bench_late_data.py) ------------------------------


@dataclass(order=True)
class Event:
    """One thing that happens to a landing zone at simulated time ``t`` (``seq`` keeps the script's order)."""

    t: int
    seq: int
    kind: str = field(compare=False)  # create | rename | append | rewrite | remove
    path: str = field(compare=False)
    mtime: int = field(compare=False, default=0)
    dst: str = field(compare=False, default="")
    lines: tuple[str, ...] = field(compare=False, default=())


def _utime(p: Path, ms: int) -> None:
    os.utime(p, ns=(ms * 1_000_000, ms * 1_000_000))


def apply(root: Path, e: Event) -> None:
    """Do ``e`` to the zone under ``root``, with the mtimes the OS would have given at time ``e.t``."""
    p = root / e.path
    if e.kind == "create":
        new = [d for d in (p.parent.parent, p.parent) if not d.exists()]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(f"{x}\n" for x in e.lines))
        _utime(p, e.mtime)
        for d in {*(x.parent for x in new), *new, p.parent}:  # what the OS did at time t
            _utime(d, e.t)
    elif e.kind == "rename":
        p.rename(root / e.dst)
        _utime(p.parent, e.t)
    elif e.kind == "remove":
        p.unlink()
        _utime(p.parent, e.t)
    else:  # append / rewrite in place: the file's mtime moves, its directory's does not
        with open(p, "a" if e.kind == "append" else "r+") as f:
            if e.kind == "rewrite":
                f.truncate(0)
            f.write("".join(f"{x}\n" for x in e.lines))
        _utime(p, e.mtime)


def read_lines(root: Path, rel: str, offset: int | None = None, end: int | None = None) -> list[str]:
    """The lines of bytes ``[offset, end)`` of ``root/rel``: a planned file, or a byte range of one."""
    with open(root / rel, "rb") as f:
        f.seek(offset or 0)
        data = f.read() if end is None else f.read(end - (offset or 0))
    return data.decode().splitlines()


# -- the raw side of a fair comparison (bench_writer, bench_kafka, bench_spool, bench_compact) ------
#: Rows a raw Parquet file buffers before it writes a row group: trib's ParquetSink.ROW_GROUP.
RAW_ROW_GROUP = 65_536
#: Bytes of lines a raw text file joins before it compresses them: trib's LineSink.FLUSH_BYTES.
RAW_FLUSH_BYTES = 1 << 20


def trib_gzip_level() -> int:
    """The zlib level of trib's gzip line files, read from the library (never copied here)."""
    from tributary_read.io.sinks import GZIP_LEVEL

    return GZIP_LEVEL


def trib_commit_every() -> int:
    """``trib ingest``'s default ``--commit-every``, read from the CLI: a raw baseline of an ingest closes
    (and fsyncs) its files as often as trib commits, since every commit closes trib's files."""
    import click

    from tributary_read.cli.main import cli

    cmd = cli.get_command(click.Context(cli), "ingest")
    assert cmd is not None
    return next(int(p.default) for p in cmd.params if p.name == "commit_every")  # type: ignore[arg-type]


class RawBatches:
    """The raw side of an ingest: :class:`RawFiles` closed (and fsynced, when ``durable``) every ``every``
    records and started again under the next sequence number, as trib's files close at each commit."""

    def __init__(self, root: str | os.PathLike, fmt: str, codec: str, durable: bool, every: int):
        self.root, self.fmt, self.codec, self.durable, self.every = root, fmt, codec, durable, every
        self.files = RawFiles(root, fmt, codec, durable, 1)
        self.n = 0
        self.closed = 0  # files closed so far
        self.fsyncs = 0

    def counted(self, k: int = 1) -> None:
        """``k`` more records written; at a batch's end, close its files and start the next batch."""
        self.n += k
        if self.every and self.n >= self.every:
            self._roll()

    def _roll(self) -> None:
        self.closed += self.files.close()
        self.fsyncs += self.files.fsyncs
        self.files = RawFiles(self.root, self.fmt, self.codec, self.durable, self.files.seq + 1)
        self.n = 0

    def close(self) -> int:
        self._roll()
        return self.closed


def fsync_path(path: str) -> None:
    """fsync(2) a file or a directory by its path, as a plain script makes it durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RawGzip:
    """A gzip file compressed at trib's level (zlib, as trib's line sink), written in the chunks it is given."""

    def __init__(self, path: str, level: int | None = None):
        import zlib

        self.f = open(path, "wb")
        self.level = trib_gzip_level() if level is None else level
        self._z = zlib.compressobj(self.level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)

    def write(self, data: bytes) -> None:
        self.f.write(self._z.compress(data))

    def close(self) -> None:
        self.f.write(self._z.flush())
        self.f.close()


class RawFiles:
    """The raw baseline's output: one file per partition directory, as trib writes them, by a plain script.

    ``fmt`` ``jsonl``: :meth:`lines` takes joined chunks of lines, compressed by ``codec`` (gzip at trib's
    level; zstd or none through Arrow, as trib). ``parquet``: :meth:`table` buffers a partition's rows and
    writes a row group of :data:`RAW_ROW_GROUP` rows once that many are buffered, the rest at the close, as
    trib's files are laid out. ``durable``: :meth:`close` fsyncs each file, then each directory from the
    files' partitions up to ``root`` (what names them), one after the other as a plain loop does; that is
    where trib fsyncs (before its commit). Without it nothing is fsynced: the no-fsync baseline.
    """

    def __init__(self, root: str | os.PathLike, fmt: str, codec: str, durable: bool = True, seq: int = 0):
        self.root, self.fmt, self.codec, self.durable, self.seq = str(root), fmt, codec, durable, seq
        self.ext = {"gzip": ".jsonl.gz", "zstd": ".jsonl.zst"}.get(codec, ".jsonl") if fmt == "jsonl" else ".parquet"
        self._out: dict[str, object] = {}  # partition directory -> its open stream or ParquetWriter
        self._rows: dict[str, list] = {}  # parquet: partition -> buffered tables
        self._count: dict[str, int] = {}
        self._buf: dict[str, list] = {}  # jsonl: partition -> [bytes buffered, line, newline, ...]
        self._docs: dict[str, list[dict]] = {}  # parquet from decoded records: partition -> rows
        self.fsyncs = 0

    def path(self, part: str) -> str:
        return os.path.join(self.root, part, f"part-{self.seq:06d}{self.ext}")

    def _open_text(self, part: str):
        out = self._out.get(part)
        if out is None:
            p = self.path(part)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            if self.codec == "gzip":
                out = RawGzip(p)
            else:
                import pyarrow as pa

                f = pa.OSFile(p, "wb")
                out = pa.CompressedOutputStream(f, self.codec) if self.codec not in ("none", "") else f
            self._out[part] = out
        return out

    def lines(self, part: str, data: bytes) -> None:
        """A chunk of joined lines (each with its newline) into ``part``'s file."""
        self._open_text(part).write(data)

    def line(self, part: str, line: bytes) -> None:
        """One line (without its newline), buffered per file into 1 MiB chunks as trib's line sink does."""
        b = self._buf.get(part)
        if b is None:
            b = self._buf[part] = [0]
        b += (line, b"\n")
        b[0] += len(line) + 1
        if b[0] >= RAW_FLUSH_BYTES:
            self.lines(part, b"".join(b[1:]))
            self._buf[part] = [0]

    def row(self, part: str, doc: dict) -> None:
        """One decoded record into ``part``'s Parquet file (``pa.Table.from_pylist`` per row group)."""
        rows = self._docs.get(part)
        if rows is None:
            rows = self._docs[part] = []
        rows.append(doc)
        if len(rows) >= RAW_ROW_GROUP:
            self._table_of_docs(part)

    def _table_of_docs(self, part: str) -> None:
        import pyarrow as pa

        rows = self._docs.pop(part, None)
        if rows:
            w = self._out.get(part)
            self.table(part, pa.Table.from_pylist(rows, schema=w.schema if w is not None else None))

    def table(self, part: str, t) -> None:
        rows = self._rows.setdefault(part, [])
        rows.append(t)
        self._count[part] = self._count.get(part, 0) + t.num_rows
        if self._count[part] >= RAW_ROW_GROUP:
            self._write_group(part)

    def _write_group(self, part: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = self._rows.pop(part, [])
        self._count[part] = 0
        if not tables:
            return
        t = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
        w = self._out.get(part)
        if w is None:
            p = self.path(part)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            w = self._out[part] = pq.ParquetWriter(p, t.schema, compression=self.codec)
        w.write_table(t.cast(w.schema) if not t.schema.equals(w.schema) else t, row_group_size=RAW_ROW_GROUP)

    def close(self) -> int:
        """Close every file (and fsync them and their directories when ``durable``); the number of files."""
        for part, b in self._buf.items():
            if len(b) > 1:
                self.lines(part, b"".join(b[1:]))
        self._buf = {}
        if self.fmt == "parquet":
            for part in list(self._docs):
                self._table_of_docs(part)
            for part in list(self._rows):
                self._write_group(part)
        for out in self._out.values():
            out.close()
        if self.durable:
            dirs: dict[str, None] = {}
            root = os.path.abspath(self.root)
            for part in self._out:
                fsync_path(self.path(part))
                self.fsyncs += 1
                d = os.path.dirname(os.path.abspath(self.path(part)))
                while d not in dirs:
                    dirs[d] = None
                    if d == root or d == os.path.dirname(d):
                        break
                    d = os.path.dirname(d)
            for d in dirs:
                fsync_path(d)
                self.fsyncs += 1
        return len(self._out)
