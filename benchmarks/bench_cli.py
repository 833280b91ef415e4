#!/usr/bin/env python
"""The command line as a scheduler sees it: start-up, one day, one hour, a consumer run.

All in one run, each case against its baseline, on local disk
(``benchmarks/out``; generation is not timed, the page cache is warm):

a. start-up: ``trib --version`` (the installed console script and
   ``python -m tributary_read.cli.main``) against a bare ``python -c pass`` of
   the same interpreter;
b. ``trib files ROOT --partitions <one day>`` (path list and ``--json``)
   against ``find`` on that day's directory;
c. a whole-table one-hour mtime window (``--start/--end``) against
   ``find ROOT -type f -newermt A ! -newermt B``;
d. a durable listing consumer's hourly run, plan plus ack, as two processes
   (``trib files --consumer`` then ``trib consumer ack``) against the same two
   library calls in a warm process: the difference is start-up's share.

The table is what a production hourly table holds: ``--days`` (30) x 24
hourly directories ``{yyyy}_{MM}_{dd}/{HH}`` x ``--per-hour`` (140) files =
100,800 files, one day = 3,360 files. Process figures are the median (and best)
of ``--reps`` runs, trib and its baseline alternating so both see the same load.

Which ``trib``: by default the one a user gets, the wheel built from this
working tree (offline, ``--no-build-isolation``) and installed with
``pip --python`` into a fresh venv (``--without-pip``) whose dependencies are
this venv's, added as a plain path. A development checkout's editable install
puts a finder on ``sys.meta_path`` at site import, in every interpreter of its
venv, ``python -c pass`` included (it imports pathlib, re, urllib.parse, ...),
so its ratios are not a user's. ``--editable`` measures this venv's own
console script instead; start-up shows both either way.

    .venv/bin/python benchmarks/bench_cli.py            # full size (~1-3 min)
    .venv/bin/python benchmarks/bench_cli.py --quick    # small smoke run

Older code in the same harness: copy this file into the older checkout's
``benchmarks/`` and run it there with ``--trib-module cli.main`` (before git 03c82a8
the CLI was the top-level package ``cli``) and ``PYTHONPATH`` set to that checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sysconfig
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, WorkDir, emit, fs_type, hour_dir, iso, machine_info, md_table, median, touch  # noqa: E402

H = 3_600_000
DIRECTORY = "{yyyy}_{MM}_{dd}/{HH}"
PY = sys.executable
TRIB_MODULE = [PY, "-m", "tributary_read.cli.main"]
GOALS = {"startup": 2.0, "day": 5.0, "hour": 1.5}
#: the figures before the goals were set (same harness; start-up's: the editable install's, see --editable)
BEFORE = {"startup": "2.4-2.7x", "day": "79x", "hour": "2.0-2.7x"}


def add_hour(root: Path, t: int, per_hour: int, tag: str) -> None:
    """One hourly directory: files at hour start + 60 s * i + 30 s (wrapping), dir mtime = hour end."""
    d = root / hour_dir(t)
    d.mkdir(parents=True, exist_ok=True)
    for i in range(per_hour):
        touch(str(d / f"part-{tag}-{i:04d}.log"), t + (60 * i + 30) * 1000 % H)
    os.utime(d, ns=((t + H) * 1_000_000,) * 2)


def make_tree(root: Path, end: int, hours: int, per_hour: int) -> None:
    for h in range(hours):
        add_hour(root, end - (hours - h) * H, per_hour, f"{h:05d}")


def trib_script() -> list[str] | None:
    """The installed console script next to this interpreter (what a scheduler runs)."""
    p = Path(PY).with_name("trib")
    return [str(p)] if p.exists() else None


#: not copied into the wheel's build tree (tests/test_wheel.py builds the same way)
_SKIP = {".venv", ".git", "build", "__pycache__", ".trib", ".pytest_cache", ".mypy_cache", "out"}


def wheel_install(work: Path) -> tuple[str, list[str]]:
    """(python, [trib]) of a fresh venv holding the wheel built from this tree, as a user installs it.

    The venv sees this venv's dependencies through a ``deps.pth`` path line: a
    path added that way is searched, but its ``.pth`` files (the editable
    install's finder among them) are not run.
    """
    src, dist, venv = work / "wheel-src", work / "wheel-dist", work / "wheel-venv"

    def ignore(d: str, names: list[str]) -> list[str]:
        return [n for n in names if n in _SKIP or n.endswith(".egg-info")]

    shutil.copytree(REPO, src, ignore=ignore)
    subprocess.run([PY, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)],
                   check=True, capture_output=True, text=True)
    (whl,) = dist.glob("tributary_read-*.whl")
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True)
    paths = sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(paths["purelib"], "deps.pth").write_text("".join(f"{d}\n" for d in deps))
    python = str(Path(paths["scripts"]) / "python")
    subprocess.run([PY, "-m", "pip", "--python", python, "install", "--no-deps", "-q", str(whl)],
                   check=True, capture_output=True, text=True)
    trib = Path(paths["scripts"]) / "trib"
    if not trib.exists():
        raise RuntimeError(f"the wheel installed no console script at {trib}")
    return python, [str(trib)]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd: list[str], env: dict, cwd: Path = REPO) -> tuple[float, float, str]:
    """(wall s, CPU s of the process: user + system, all threads, stdout)."""
    c0 = _children_cpu()
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    dt = time.perf_counter() - t0
    cpu = _children_cpu() - c0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {out.returncode}): {out.stderr[:500]}")
    return dt, cpu, out.stdout


def alternate(cmds: dict[str, list[str]], reps: int, env: dict, cwd: Path = REPO) -> dict[str, dict]:
    """Run every command once per round, ``reps`` rounds after one untimed warm-up round."""
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    outs: dict[str, str] = {}
    for r in range(reps + 1):
        for k, cmd in cmds.items():
            dt, cpu, outs[k] = run(cmd, env, cwd)
            if r:
                times[k].append(dt)
                cpus[k].append(cpu)
    return {k: {"median_s": median(v), "best_s": min(v), "cpu_median_s": median(cpus[k]), "runs_s": v,
                "stdout": outs[k]} for k, v in times.items()}


def lines(stdout: str) -> int:
    return len(stdout.splitlines())


def window_in_process(root: Path, lo: int, hi: int, reps: int) -> dict:
    """The whole-table window as one library call in this (warm) process: the listing alone, no start-up."""
    from tributary_read.read.resolve import Source, mtime_files, plain_layout
    from tributary_read.read.window import TimeWindow

    layout = plain_layout(DIRECTORY, None, "UTC")
    walls, cpus, n = [], [], 0
    for r in range(reps + 1):
        c0, t0 = time.process_time(), time.perf_counter()
        n = len(mtime_files(Source.open(str(root), layout=layout), TimeWindow(lo, hi)).files)
        if r:
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    return {"median_s": median(walls), "best_s": min(walls), "cpu_median_s": median(cpus), "files": n}


def consumer_runs(root: Path, end: int, per_hour: int, reps: int, env: dict, trib: list[str],
                  cwd: Path = REPO) -> dict:
    """Hourly runs of one listing consumer, alternating two processes and two library calls.

    Each run first adds the next hour's directory (``per_hour`` new files), so
    every run delivers exactly that hour, whichever way it is made.
    """
    from tributary_read.read.consumer import Consumer
    from tributary_read.read.resolve import Source, plain_layout

    name = "bench"
    layout = plain_layout(DIRECTORY, None, "UTC")
    first = Consumer(Source.open(str(root), layout=layout), name)
    t0 = time.perf_counter()
    p = first.plan(lookback_ms=48 * H, max_files="off")  # the whole history in one plan: it is over the default cap
    first.ack(p.plan_id)
    first_s = time.perf_counter() - t0
    proc, lib, plan_proc, ack_proc, proc_cpu, lib_cpu = [], [], [], [], [], []
    for k in range(2 * reps):
        t = end + k * H
        add_hour(root, t, per_hour, f"new{k:03d}")
        if k % 2 == 0:
            dt1, cpu1, out = run([*trib, "files", str(root), "--layout", DIRECTORY, "--consumer", name, "--json",
                            "-q"], env, cwd)
            doc = json.loads(out)
            got, plan_id = len(doc["files"]), doc.get("plan_id") or doc["plan"]["plan_id"]
            dt2, cpu2, _ = run([*trib, "consumer", "ack", str(root), name, plan_id], env, cwd)
            proc.append(dt1 + dt2)
            proc_cpu.append(cpu1 + cpu2)
            plan_proc.append(dt1)
            ack_proc.append(dt2)
        else:
            c0 = time.process_time()
            t0 = time.perf_counter()
            c = Consumer(Source.open(str(root), layout=layout), name)
            p = c.plan()
            c.ack(p.plan_id)
            lib.append(time.perf_counter() - t0)
            lib_cpu.append(time.process_time() - c0)
            got = len(p.files)
        if got != per_hour:
            raise RuntimeError(f"consumer run {k} delivered {got} files, expected {per_hour}")
    return {"first_plan_ack_s": first_s, "process_median_s": median(proc), "process_best_s": min(proc),
            "plan_process_median_s": median(plan_proc), "ack_process_median_s": median(ack_proc),
            "library_median_s": median(lib), "library_best_s": min(lib), "process_cpu_median_s": median(proc_cpu),
            "library_cpu_median_s": median(lib_cpu), "runs": reps}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=30, help="days of hourly directories (30)")
    ap.add_argument("--per-hour", type=int, default=140, help="files per hourly directory (140)")
    ap.add_argument("--reps", type=int, default=9, help="timed repetitions per case (9)")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true", help="keep the generated tree")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--trib-module", help="run trib as `python -m MODULE` only (e.g. cli.main with PYTHONPATH "
                                          "set to an older checkout, to measure it in the same harness)")
    ap.add_argument("--editable", action="store_true",
                    help="measure this venv's own (editable) trib, not the wheel in a fresh venv")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.days, args.per_hour, args.reps = 3, 20, 3
    if args.days < 3:  # the one-day case lists a whole calendar day, two days before the newest hour
        ap.error("--days must be at least 3")
    reps = args.reps
    r: dict = {"machine": machine_info(), "args": vars(args)}
    # The newest hour ends a few hours before now, so the consumer's new hours are not in the future.
    end = (int(time.time() * 1000) // H - 2 * reps - 2) * H
    hours = args.days * 24
    n = hours * args.per_hour
    with WorkDir(args.dir, prefix="bench-cli-", keep=args.keep) as work:
        py = PY
        trib_module = [PY, "-m", args.trib_module] if args.trib_module else TRIB_MODULE
        script = None if args.trib_module else trib_script()
        dev = {"python": PY, "script": script, "module": trib_module}
        if not (args.trib_module or args.editable):
            py, script = wheel_install(work)
            trib_module = [py, "-m", "tributary_read.cli.main"]
        trib = script or trib_module
        # `python -m` puts the working directory first on sys.path: the checkout's would shadow the wheel.
        cwd = REPO if py == PY else work
        # Bytecode caches on, as an installed package has them (pip compiles at install); the
        # warm-up round fills them, in the scratch directory, whatever PYTHONDONTWRITEBYTECODE says.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "TRIB_CONFIG")}
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        r["fs"] = fs_type(work)
        root = work / "table"
        t0 = time.perf_counter()
        make_tree(root, end, hours, args.per_hour)
        r["generation_s"] = time.perf_counter() - t0

        # a. start-up
        startup = {"python -c pass": [py, "-c", "pass"], "python -m ... --version": [*trib_module, "--version"],
                   "python -c 'import click'": [py, "-c", "import click"]}
        if script:
            startup["trib --version"] = [*script, "--version"]
        if py != PY:  # the development venv's, for comparison
            startup["dev: python -c pass"] = [PY, "-c", "pass"]
            if dev["script"]:
                startup["dev: trib --version"] = [*dev["script"], "--version"]
        a = alternate(startup, reps, env, cwd)

        # b. one day by partition range; c. one hour by mtime over the whole table
        day_t = end - 2 * 24 * H  # a whole day, two days before the end
        day = hour_dir(day_t)[:10]
        dt = day.replace("_", "")
        parts = f"dt>={dt}00,dt<={dt}23"
        lo, hi = end - 30 * H, end - 29 * H - 1  # [lo, hi] both inclusive: one hour of mtimes
        # find's -newermt bounds are (A, B]; all mtimes fall on :30 s, so (lo - 1 s, hi] is [lo, hi] here.
        cases = {
            "find day": ["find", str(root / day), "-type", "f"],
            "trib day": [*trib, "files", str(root), "--layout", DIRECTORY, "--partitions", parts, "-q"],
            "trib day --json": [*trib, "files", str(root), "--layout", DIRECTORY, "--partitions", parts, "--json",
                                "-q"],
            "find hour": ["find", str(root), "-type", "f", "-newermt", iso(lo - 1000) + "Z", "!", "-newermt",
                          iso(hi) + "Z"],
            "trib hour": [*trib, "files", str(root), "--layout", DIRECTORY, "--start", str(lo), "--end", str(hi),
                          "-q"],
        }
        bc = alternate(cases, reps, env, cwd)
        n_day = 24 * args.per_hour
        n_hour = args.per_hour
        for k, want in (("find day", n_day), ("trib day", n_day), ("find hour", n_hour), ("trib hour", n_hour)):
            if lines(bc[k]["stdout"]) != want:
                raise RuntimeError(f"{k} returned {lines(bc[k]['stdout'])} files, expected {want}")
        if len(json.loads(bc["trib day --json"]["stdout"])["files"]) != n_day:
            raise RuntimeError("trib day --json returned the wrong number of files")
        if sorted(bc["trib hour"]["stdout"].split()) != sorted(
                os.path.relpath(p, root) for p in bc["find hour"]["stdout"].split()):
            raise RuntimeError("trib and find disagree on the one-hour window")

        lib_hour = window_in_process(root, lo, hi, reps)
        if lib_hour["files"] != n_hour:
            raise RuntimeError(f"the library's window returned {lib_hour['files']} files, expected {n_hour}")

        # d. a consumer's hourly run
        d = consumer_runs(root, end, args.per_hour, reps, env, trib, cwd)

    r["loadavg_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for group in (a, bc):
        for v in group.values():
            v.pop("stdout")
    r.update({"files": n, "day_files": n_day, "hour_files": n_hour, "startup": a, "listing": bc, "consumer": d,
              "hour_in_process": lib_hour,
              "trib_command": "trib (console script)" if script else f"python -m {trib_module[2]}",
              "install": "editable (this venv)" if py == PY else "wheel, fresh venv"})

    ms = lambda s: f"{s * 1000:,.1f}"  # noqa: E731

    def goal(key: str, ratio: float) -> str:
        return f"<= {GOALS[key]:g}x ({BEFORE[key]} before): " + ("met" if ratio <= GOALS[key] else "**MISSED**")

    def row(case: str, label: str, v: dict, files, base: dict | None, key: str | None = None) -> list:
        ratio = v["median_s"] / base["median_s"] if base else 1.0
        cpu_ratio = v["cpu_median_s"] / base["cpu_median_s"] if base else 1.0
        return [case, label, ms(v["median_s"]), ms(v["best_s"]), ms(v["cpu_median_s"]), files, f"{ratio:.2f}x",
                f"{cpu_ratio:.2f}x", goal(key, ratio) if key else ""]

    pc = a["python -c pass"]
    rows = [row("a", "`python -c pass`", pc, "", None)]
    if "trib --version" in a:
        rows.append(row("a", "`trib --version` (console script)", a["trib --version"], "", pc, "startup"))
    rows.append(row("a", f"`python -m {trib_module[2]} --version`", a["python -m ... --version"], "", pc,
                    "startup"))
    rows.append(row("a", "`python -c 'import click'` (the floor of any click command line)",
                    a["python -c 'import click'"], "", pc))
    if "dev: python -c pass" in a:
        dpc = a["dev: python -c pass"]
        rows.append(row("a", "dev venv (editable install): `python -c pass`", dpc, "", pc))
        if "dev: trib --version" in a:
            rows.append(row("a", "dev venv: `trib --version` (ratio to its own `python -c pass`)",
                            a["dev: trib --version"], "", dpc))
    fd, fh = bc["find day"], bc["find hour"]
    rows += [
        row("b", f"`find DAY -type f` ({day})", fd, f"{n_day:,}", None),
        row("b", f"`trib files --partitions '{parts}'`", bc["trib day"], f"{n_day:,}", fd, "day"),
        row("b", "same, `--json` (size, mtime, partition per file)", bc["trib day --json"], f"{n_day:,}", fd, "day"),
        row("c", "`find ROOT -type f -newermt A ! -newermt B`", fh, n_hour, None),
        row("c", "`trib files --start A --end B` (whole table)", bc["trib hour"], n_hour, fh, "hour"),
        row("c", "same window, one library call in a warm process (the listing alone)", lib_hour, n_hour, fh),
        ["d", "consumer plan + ack, library calls in a warm process", ms(d["library_median_s"]),
         ms(d["library_best_s"]), ms(d["library_cpu_median_s"]), n_hour, "1.00x", "1.00x", ""],
        ["d", "consumer plan + ack, two `trib` processes", ms(d["process_median_s"]), ms(d["process_best_s"]),
         ms(d["process_cpu_median_s"]), n_hour, f"{d['process_median_s'] / d['library_median_s']:.1f}x",
         f"{d['process_cpu_median_s'] / d['library_cpu_median_s']:.1f}x",
         f"plan {ms(d['plan_process_median_s'])} ms + ack {ms(d['ack_process_median_s'])} ms"],
    ]
    m = r["machine"]
    md = [f"## Command line: start-up, one day, one hour, a consumer run ({n:,} files in {hours:,} hourly "
          f"directories, {r['fs']})", "",
          f"{args.days} days x 24 hourly directories `{DIRECTORY}` x {args.per_hour} files; one day = {n_day:,} "
          f"files, one hour = {n_hour}. Every row is a whole process except the library row; median (best) of "
          f"{reps} runs, trib and its baseline alternating, warm page cache and bytecode caches; trib = "
          f"{r['trib_command']}, {r['install']}; `python` is the same venv's interpreter. CPU ms = user + system time of the process (all threads), which a loaded "
          f"machine inflates less than wall time. Load average before: {m['loadavg']}; after: "
          f"{r['loadavg_after']}.", "",
          md_table(["", "case", "median ms", "best ms", "CPU ms", "files", "ratio", "CPU ratio", "goal"], rows), ""]
    floor = pc["median_s"] / fd["median_s"]
    md += [f"The interpreter alone (`python -c pass`) takes {floor:.1f}x `find` on one day's directory, "
           f"{pc['median_s'] / fh['median_s']:.2f}x the whole-table `find -newermt`; "
           f"`trib --version` {a.get('trib --version', a['python -m ... --version'])['median_s'] / fd['median_s']:.1f}x "
           "the day's `find`.", ""]
    text = "\n".join(md)
    return emit(text, r, args)


if __name__ == "__main__":
    main()
