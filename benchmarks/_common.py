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
