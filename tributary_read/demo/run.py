"""``trib demo``: the raw log of :mod:`.mix`, an hourly job run two ways, an hourly aggregate three, and who lost what.

Each cycle replays the arrivals up to its moment (foreign files are placed and
given their mtime, ingests commit with their writer clock at the arrival time),
mounts the new partitions (``trib partitions sync``), then runs:

* **naive**: seed 002's usual job, ``sql/warehouse/hourly_naive.sql``: insert
  "the previous hour's partition" of the Hive table into the DW;
* **trib**: ``trib etl run`` with a consumer input: every file not yet
  delivered, committed exactly once, synced to Hive, acked.

and the hourly ``count(DISTINCT user)`` three ways (:mod:`.users`): the naive
script over the previous hour's partition, and two more trib jobs, one with
``[output] mode = "append"`` and one with ``mode = "restate"``, each counted
against the exact answer from every raw file at the end.

All of them run on one Spark session against the local Hive pair (``trib hive up``,
started and stopped here). The session is a classic driver in this process by
default; ``--spark connect`` makes it a Spark Connect session on a local server
started on the pair (``trib spark up``) and stopped at the end, and ``--spark
sc://HOST:PORT`` one on a running server whose catalog is the demo's pair.
Over Spark Connect everything goes through the server: the DDL, the naive SQL
with trib's UDFs (the jar added to the session), trib's job and the tallies.
The tallies read every DW table back through Hive, so they count what a Hive
user would see.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from tributary_read.demo import users
from tributary_read.demo.mix import HOUR_MS, NAIVE_LAG_MS, PATTERNS, Drop, Mix, build

LAYOUT, PARTITION = "{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"
COLUMNS = "event_time BIGINT, user_id STRING, action STRING, payload STRING"
JOB_SQL = "SELECT event_time, user_id, action, payload FROM raw\n"

Say = Callable[[str], None]


def _trib(*args: str, env: dict | None = None) -> str:
    """Run the real CLI in its own process, as a scheduler would."""
    p = subprocess.run([sys.executable, "-m", "tributary_read.cli.main", "-q", *args], capture_output=True,
                       text=True, env={**os.environ, **(env or {})})
    if p.returncode != 0:
        from tributary_read.errors import TributaryError

        raise TributaryError(f"trib {args[0]} failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    return p.stdout


class Demo:
    def __init__(self, work: Path, hours: int, hive_dir: Path, say: Say, seed: int = 2002, db: str = "trib_demo"):
        self.work, self.hours, self.hive_dir, self.say, self.db = work, hours, hive_dir, say, db
        now = int(time.time() * 1000)
        # The last cycle runs a little before now: every schedule time is in the past, as in a backfill.
        base = (now - NAIVE_LAG_MS) // HOUR_MS * HOUR_MS - (hours + 1) * HOUR_MS
        self.mix: Mix = build(hours, base, seed)
        self.raw, self.dw = work / "raw", work / "dw"
        self.users = {mode: work / f"users_{mode}" for mode in users.MODES}  # the two trib aggregates
        self.staging = work / "staging"
        self.applied = 0
        self.spark = None
        self.started_server: str | None = None  # DIR/spark, when the demo started a Connect server there

    # -- the raw table -------------------------------------------------------------------
    def create_tables(self) -> None:
        from tributary_read.table.config import Table, TableConfig
        from tributary_read.table.layout import Layout

        for d in (self.raw, self.dw, self.work / "dw_naive", self.work / "users_naive", *self.users.values(),
                  self.staging, self.work / "job"):
            shutil.rmtree(d, ignore_errors=True)
        self.staging.mkdir(parents=True)
        _trib("table", "create", str(self.raw), "--layout", LAYOUT, "--partition", PARTITION, "--format", "text",
              "--tracking", "both")
        _trib("table", "create", str(self.dw), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet")
        for root in self.users.values():  # in this process: two CLI starts fewer, the same Table.create
            Table.create(str(root), TableConfig(Layout(LAYOUT, PARTITION), format="parquet"))

    def _place(self, d: Drop, name: str, mtime_ms: int) -> None:
        """Write a foreign file as an uploader does: elsewhere, then one rename into the table."""
        tmp = self.staging / name
        tmp.write_text("".join(e.line() for e in d.events))
        os.utime(tmp, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        target = self.raw / d.directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)

    def _ingest(self, d: Drop) -> None:
        src = self.staging / f"{d.name}.log"
        src.write_text("".join(e.line() for e in d.events))
        skew = d.arrival_ms - int(time.time() * 1000)  # the writer's clock reads the arrival time
        _trib("ingest", str(self.raw), "--source", str(src), "--app-id", "demo-ingest", "--source-name", d.name,
              "--time-regex", r"^([0-9]+)\t", "--final", env={"TRIB_CLOCK_SKEW_MS": str(skew)})

    def arrive_until(self, moment_ms: int) -> int:
        """Everything that lands by ``moment_ms``; hidden uploads are written when they start."""
        n = 0
        for d in self.mix.drops:
            if d.pattern == "hidden_renamed" and d.written_ms <= moment_ms and \
                    not (self.raw / d.directory / d.name).exists() and d.arrival_ms > moment_ms:
                if not (self.raw / d.directory / f".{d.name}").exists():
                    self._place(d, f".{d.name}", d.written_ms)
        while self.applied < len(self.mix.drops) and self.mix.drops[self.applied].arrival_ms <= moment_ms:
            d = self.mix.drops[self.applied]
            if d.tracked:
                self._ingest(d)
            elif d.pattern == "hidden_renamed":
                hidden = self.raw / d.directory / f".{d.name}"
                if not hidden.exists():
                    self._place(d, hidden.name, d.written_ms)
                os.rename(hidden, self.raw / d.directory / d.name)  # a rename keeps the old mtime
            else:
                self._place(d, d.name, d.mtime_ms)
            self.applied += 1
            n += 1
        return n

    # -- Hive and Spark ----------------------------------------------------------------------
    def start_services(self):
        from tributary_read.services import hive as services

        running = all(s["alive"] for s in services.status(str(self.hive_dir)).values())
        if not running:
            self.say(f"starting the local Hive pair in {self.hive_dir} (trib hive up; a first start compiles "
                     "the launcher and creates the metastore schema)")
        hms, hs2 = services.free_ports(2)
        self.services = services.start(str(self.hive_dir), hms_port=hms, hs2_port=hs2, timeout=300)
        self.started_services = not running
        return self.services

    def stop_services(self) -> None:
        if getattr(self, "started_services", False):
            from tributary_read.services import hive as services

            self.say("stopping the local Hive pair (trib hive down)")
            services.stop(str(self.hive_dir))

    def start_spark(self, spark=None, mode: str = "classic"):
        from tributary_read.hive_udfs import registry as udfs

        if mode != "classic":  # a Spark Connect session: the jar as its artifact, a temporary function each
            if self.spark is None:  # --spark connect: a server of the demo's own, on the pair just started
                self.connect(self._start_server())
            spark = self.spark
        elif spark is None:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()  # a host's session (tests, a notebook): used as it is
        if spark is None:
            from tributary_read.spark.session import sql_session

            conf = {"spark.sql.warehouse.dir": self.services.warehouse_uri,
                    "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}
            self.say("starting Spark (local[2]) with trib's UDF jar (built from source at first use)")
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            spark = sql_session("local[2]", conf, "trib-demo", catalog=self.services.metastore_uri)
            spark.sparkContext.setLogLevel("ERROR")  # the demo's own lines tell the story
            import logging

            # pyspark logs every failed statement; the DDL step probes for tables that do not exist yet.
            logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
        else:
            udfs.register(spark)
        self.spark = spark
        return spark

    # -- Spark Connect -----------------------------------------------------------------------
    def connect(self, url: str) -> None:
        """A Spark Connect session on ``url`` for the whole demo; its server's catalog must be the demo's pair.

        Checked before the demo builds anything: the DDL, the naive job and the tallies go through the
        server's catalog, and trib's job syncs the pair's metastore, so another catalog would put the
        tables in one place and count them in another.
        """
        from tributary_read.errors import InvalidInputError, MetastoreError, TributaryError
        from tributary_read.etl.remote import check_url
        from tributary_read.services import hive as services
        from tributary_read.spark.script import quiet_statement_logs
        from tributary_read.spark.session import connect_session

        check_url(url, "--spark")
        _answers(url)
        try:
            self.spark = connect_session(url, {"spark.sql.shuffle.partitions": "2"}, "trib-demo")
            catalog = self.spark.conf.get("spark.sql.catalogImplementation", "in-memory")
            uris = self.spark.conf.get("spark.hadoop.hive.metastore.uris", None) if catalog == "hive" else None
        except TributaryError:
            raise
        except Exception as e:  # noqa: BLE001 - gRPC's errors: one line naming the server
            details = getattr(e, "details", None)  # a gRPC error's own line
            first = details() if callable(details) else (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise MetastoreError(f"cannot use the Spark Connect server {url}: {str(first)[:300]}") from None
        quiet_statement_logs()  # the DDL step probes for tables that do not exist yet
        st = services.status(str(self.hive_dir))
        pair = f"thrift://{services.HOST}:{st['hms']['port']}" if all(s["alive"] for s in st.values()) else None
        if uris is None or uris != pair:
            has = f"the catalog {uris}" if uris else "no Hive catalog"
            want = f"the demo's Hive pair ({pair}, in {self.hive_dir})" if pair else \
                f"the demo's Hive pair, which is not running in {self.hive_dir}"
            raise InvalidInputError(
                f"the Spark Connect server {url} has {has}, not {want}: start the server on that pair "
                f"(trib hive up --dir DIR, then trib spark up --hive-dir DIR) and give --hive-dir DIR, "
                "or use --spark connect")

    def _start_server(self) -> str:
        """``trib spark up`` in ``DIR/spark`` on the demo's pair; a server left there on another catalog is replaced."""
        from tributary_read.services import spark_connect as sc

        where = str(self.work / "spark")
        running = sc.load(where)
        if sc.alive(running) and running is not None and running.metastore_uri != self.services.metastore_uri:
            sc.stop(where)
        self.say(f"starting a local Spark Connect server on the Hive pair in {where} (trib spark up; a warm "
                 "driver every hour's jobs use)")
        server, already = sc.start(where, 0, hive_dir=str(self.hive_dir), timeout=300)
        self.started_server = None if already else where
        return server.remote

    def stop_spark(self) -> None:
        """End a Spark Connect session, and the server if the demo started it; a classic session is left as is."""
        from tributary_read.spark import is_connect

        if self.spark is not None and is_connect(self.spark):
            from tributary_read.spark.session import end_connect_session

            end_connect_session(self.spark)
            self.spark = None
        if self.started_server:
            from tributary_read.services import spark_connect as sc

            self.say("stopping the local Spark Connect server (trib spark down)")
            sc.stop(self.started_server)
            self.started_server = None

    def _script(self, name: str, variables: dict[str, str]) -> None:
        from tributary_read.hive.sql import WAREHOUSE_DIR
        from tributary_read.spark.script import run_script, split_statements

        text = (WAREHOUSE_DIR / name).read_text(encoding="utf-8")
        run_script(self.spark, split_statements(text), variables)

    def create_hive_tables(self) -> None:
        from tributary_read.hive.ddl import create_table, definition_for
        from tributary_read.hive.metastore import open_metastore
        from tributary_read.hive.model import TableName
        from tributary_read.hive.sql import create_database, drop_database
        from tributary_read.table.config import Table

        db = self.db
        self.spark.sql(drop_database(db))
        self.spark.sql(create_database(db))
        self._script("ods_raw_log.sql", {"ods_table": f"{db}.ods_raw_log", "ods_location": self.raw.as_uri()})
        self._script("dw_events.sql", {"dw_table": f"{db}.dw_naive",
                                       "dw_location": (self.work / "dw_naive").as_uri()})
        self._script("dw_users.sql", {"dw_table": f"{db}.dw_users_naive",
                                      "dw_location": (self.work / "users_naive").as_uri()})
        metastore = open_metastore("spark", spark=self.spark)
        create_table(metastore, definition_for(Table.load(str(self.dw)), TableName.parse(f"{db}.dw_trib"), COLUMNS))
        for mode, root in self.users.items():
            create_table(metastore, definition_for(Table.load(str(root)), TableName.parse(f"{db}.dw_users_{mode}"),
                                                   users.COLUMNS))

    def write_job(self) -> Path:
        return self._write_job("hourly", JOB_SQL, self.dw, "dw_trib", "",
                               "The hourly job, trib's way: every raw file not yet delivered, exactly once.")

    def write_users_jobs(self) -> dict[str, Path]:
        """The hourly distinct users, trib's two ways: one job per output mode, each with a consumer of its own."""
        why = {"append": "each run adds a row per hour its new files touch",
               "restate": "each run recomputes every hour its new files touch, from all of the hour's files"}
        return {mode: self._write_job(f"users_{mode}", users.SQL, root, f"dw_users_{mode}", f'mode = "{mode}"\n',
                                      f"Distinct users per hour, {mode}: {why[mode]}.")
                for mode, root in self.users.items()}

    def _write_job(self, name: str, sql: str, output: Path, hive_table: str, output_mode: str, comment: str) -> Path:
        job_dir = self.work / "job"
        job_dir.mkdir(parents=True, exist_ok=True)
        (job_dir / f"{name}.sql").write_text(sql)
        job = job_dir / f"{name}.toml"
        job.write_text(f"""# {comment}
[job]
name = "demo_{name}"
sql = "{name}.sql"
period = "1h"

[[inputs]]
table = "{self.raw}"
view = "raw"
mode = "consumer"
hive_table = "{self.db}.ods_raw_log"   # its columns, SerDe and delimiter

[output]
table = "{output}"
time_column = "event_time"
{output_mode}
[hive]
table = "{self.db}.{hive_table}"
metastore = "{self.services.metastore_uri}"
""")
        return job

    # -- the cycles --------------------------------------------------------------------------
    def cycle(self, h: int, job, users_jobs: dict) -> dict[str, Any]:
        """Hour ``h``'s cycle: the arrivals up to its run, the mount, then every job at ``end + 5 min``."""
        from tributary_read.etl.run import run_job

        mix = self.mix
        landed = self.arrive_until(mix.run_at(h))
        _trib("partitions", "sync", str(self.raw), "--hive-table", f"{self.db}.ods_raw_log",
              "--metastore", self.services.metastore_uri)
        window = {"ods_table": f"{self.db}.ods_raw_log", "timezone": "UTC", **_window(mix.run_at(h))}
        t0 = time.monotonic()
        self._script("hourly_naive.sql", {**window, "dw_table": f"{self.db}.dw_naive"})
        t1 = time.monotonic()
        report = run_job(job, mix.hour_end(h), spark=self.spark)
        t2 = time.monotonic()
        self._script("hourly_users_naive.sql", {**window, "dw_table": f"{self.db}.dw_users_naive"})
        took = {"naive": round(time.monotonic() - t2, 2)}
        for mode in users.MODES:
            t3 = time.monotonic()
            run_job(users_jobs[mode], mix.hour_end(h), spark=self.spark)
            took[mode] = round(time.monotonic() - t3, 2)
        records = sum(i.records or 0 for i in report.inputs)
        return {"hour": h, "files_landed": landed, "trib_records": records,
                "naive_s": round(t1 - t0, 2), "trib_s": round(t2 - t1, 2), "users_s": took}

    def tally(self) -> dict[str, Any]:
        expected = self.mix.events()
        out: dict[str, Any] = {"expected": len(expected)}
        for way, table in (("naive", "dw_naive"), ("trib", "dw_trib")):
            rows = self.spark.table(f"{self.db}.{table}").groupBy("payload").count().withColumnRenamed(
                "count", "n").collect()
            seen = Counter({r["payload"]: r["n"] for r in rows})
            captured = sum(1 for e in expected if e in seen)
            lost = Counter(expected[e].pattern for e in expected if e not in seen)
            by_pattern = {}
            for p in PATTERNS:
                total = sum(1 for d in expected.values() if d.pattern == p)
                if total:
                    by_pattern[p] = {"expected": total, "lost": lost.get(p, 0)}
            out[way] = {"captured": captured, "duplicates": sum(n - 1 for n in seen.values() if n > 1),
                        "lost": len(expected) - captured, "unexpected": sum(1 for e in seen if e not in expected),
                        "captured_share": captured / len(expected) if expected else 1.0,
                        "by_pattern": by_pattern}
        return out

    def tally_users(self) -> dict[str, Any]:
        """The three ways' rows per hour, read back through Hive, against the exact count over every raw file."""
        from pyspark.sql import functions as F

        def rows(df) -> dict[str, list[users.Row]]:
            out: dict[str, list[users.Row]] = {}
            for r in df.select("dt", "users", "events").collect():
                out.setdefault(r["dt"], []).append((int(r["users"]), int(r["events"])))
            return out

        exact = rows(self.spark.table(f"{self.db}.ods_raw_log").groupBy("dt").agg(
            F.count_distinct("user_id").alias("users"), F.count(F.lit(1)).alias("events")))
        return users.compare(self.mix, {dt: r[0] for dt, r in exact.items()},
                             {way: rows(self.spark.table(f"{self.db}.dw_users_{way}")) for way in users.WAYS})


def _answers(url: str) -> None:
    """One line at once when nothing listens at ``url`` (pyspark's client retries for minutes first)."""
    import socket

    from tributary_read.errors import MetastoreError

    hostport = url[len("sc://"):].split("/", 1)[0]
    host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "15002")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except (OSError, ValueError) as e:
        raise MetastoreError(f"nothing answers at the Spark Connect server {url} ({e}): start one with "
                             "trib spark up, or use --spark connect") from None


def _window(moment_ms: int) -> dict[str, str]:
    """The naive job's variables: the hour that ended ``NAIVE_LAG_MS`` before it runs."""
    from tributary_read.spark.script import window_variables

    return window_variables(moment_ms, HOUR_MS, NAIVE_LAG_MS)


#: ``--spark``: a classic driver in this process, or a local Spark Connect server the demo starts on its pair.
SPARK_MODES = ("classic", "connect")


def run_demo(work: str | Path, hours: int = 24, *, hive_dir: str | Path | None = None, spark=None,
             say: Say = lambda _m: None, seed: int = 2002, spark_mode: str = "classic") -> dict[str, Any]:
    """Build the raw table, run ``hours`` cycles both ways, tally, write the lateness report.

    ``spark_mode``: ``classic`` (``spark``, else this process's active session, else a new driver),
    ``connect`` (a local Spark Connect server started on the demo's Hive pair, stopped at the end),
    or ``sc://HOST:PORT`` (a running server whose catalog is the pair in ``hive_dir``; refused
    before anything is built otherwise).
    """
    from tributary_read.etl.job import Job
    from tributary_read.report.html import render
    from tributary_read.report.lateness import lateness

    t_start = time.monotonic()
    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    demo = Demo(work, hours, Path(hive_dir).resolve() if hive_dir else work / "hive", say, seed)
    if spark_mode not in SPARK_MODES and not spark_mode.startswith("sc://"):
        from tributary_read.errors import InvalidInputError

        raise InvalidInputError(f"--spark {spark_mode}: give classic, connect, or a Spark Connect server's "
                                "sc://HOST:PORT")
    if spark_mode.startswith("sc://"):
        from tributary_read.secret import redacted_url

        if redacted_url(spark_mode) != spark_mode:  # never echoed: the URL is the secret's carrier
            from tributary_read.errors import InvalidInputError

            raise InvalidInputError("--spark: the Spark Connect URL carries a secret (a token), which never goes "
                                    "on a command line; the demo uses a local server without one")
    try:
        if spark_mode not in SPARK_MODES:
            demo.connect(spark_mode)  # a running server: checked before anything is built
        say(f"raw log: {len(demo.mix.drops)} files, {len(demo.mix.events())} events over {hours} hours "
            f"(seed {seed}), in {demo.raw}")
        demo.create_tables()
        demo.start_services()
        demo.start_spark(spark, spark_mode)
        demo.create_hive_tables()
        job = Job.load(demo.write_job())
        users_jobs = {mode: Job.load(p) for mode, p in demo.write_users_jobs().items()}
        cycles = []
        for h in range(hours):
            c = demo.cycle(h, job, users_jobs)
            cycles.append(c)
            say(f"hour {h + 1:>2}/{hours}: {c['files_landed']:>2} files landed; naive {c['naive_s']:.1f}s, "
                f"trib {c['trib_s']:.1f}s ({c['trib_records']} records); distinct users: "
                + ", ".join(f"{way} {s:.1f}s" for way, s in c["users_s"].items()))
        result = demo.tally()
        result["users"] = demo.tally_users()
    finally:
        try:
            demo.stop_spark()
        finally:
            demo.stop_services()
    report_path = work / "lateness.html"
    rep = lateness(str(demo.raw), lags_ms=[NAIVE_LAG_MS])
    tmp = report_path.with_name(report_path.name + ".tmp")
    tmp.write_text(render(rep, f"Lateness of the demo's raw log ({hours} hours)"), encoding="utf-8")
    tmp.replace(report_path)
    result.update({
        "hours": hours, "seed": seed, "raw_table": str(demo.raw), "dw_table": str(demo.dw),
        "report": str(report_path), "lateness": {k: v for k, v in rep.to_json().items() if k != "partitions"},
        "files": len(demo.mix.drops), "cycles": cycles, "seconds": round(time.monotonic() - t_start, 1),
        "spark": spark_mode,
    })
    return result
