"""A consumer's first run delivers what exists, and past the lookback horizon a change is delivered
exactly (the seal keeps the partition's files), or holds its partition back (exit 17 at the ack).

Everything goes through the CLI on real files. A consumer used to take every file in a partition older
than the 7-day lookback as delivered on its first plan (silently, exit 0), and to report late files in
sealed partitions without delivering them (a warning, exit 0).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest
from conftest import invoke_trib, run_trib
from etl_data import consumer_job_text
from helpers import make_source, one_line_error, put

from tributary_read.table.config import Table

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
H = 3_600_000
NOW = int(datetime.now(timezone.utc).timestamp() * 1000)
HISTORY = "2024_01_01/02"  # far past the 7-day lookback
H2024 = 1_704_074_400_000  # 2024-01-01T02:00:00Z


def today() -> str:
    return f"{datetime.fromtimestamp((NOW - H) / 1000, timezone.utc):%Y_%m_%d/%H}"


def cli(*args: str, code: int = 0):
    p = invoke_trib(*args)
    assert p.returncode == code, (args, p.returncode, p.stdout, p.stderr)
    return p


def plan(root, *args: str) -> dict:
    return json.loads(cli("files", str(root), "--consumer", "c", "--json", *args).stdout)


def ack(root, doc: dict) -> None:
    cli("consumer", "ack", str(root), "c", doc["plan_id"])


def paths(doc: dict) -> list[str]:
    return sorted(f["path"] for f in doc["files"])


def history_and_today(tmp_path, table: bool = True):
    """The issue's table: history in 2024_01_01/02 and a file in today's hour, adopted as a trib table
    (tracked ``both``: other tools wrote it) or left a plain directory."""
    root = tmp_path / "raw"
    put(root, f"{HISTORY}/old.log", H2024 + 60_000)
    put(root, f"{today()}/new.log", NOW - 30 * 60_000)
    if table:
        p = cli("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION)
        assert "tracking both" in p.stdout
    return root


# -- item 1: the first run ------------------------------------------------------------------------------
@pytest.mark.unit
def test_a_new_consumer_delivers_history_and_today(tmp_path):
    root = history_and_today(tmp_path)
    p = cli("files", str(root), "--consumer", "c")
    assert p.stdout.split() == [f"{HISTORY}/old.log", f"{today()}/new.log"]
    assert "taken as already delivered" not in p.stderr
    doc = plan(root)
    assert doc["baseline"] is None and doc["beyond_horizon"] == []
    ack(root, doc)
    assert paths(plan(root)) == []
    show = json.loads(cli("consumer", "show", str(root), "c", "--json").stdout)
    assert show["initial_position"] == "earliest" and show["delivered_files"] == 2
    assert HISTORY in json.loads((root / "_tributary/consumers/c/state-00000000000000000001.json").read_text())[
        "sealed"]  # delivered past the horizon, sealed at once: the ledger stays bounded
    assert "first run  earliest (delivered every file that existed)" in cli("consumer", "show", str(root), "c").stdout


@pytest.mark.unit
def test_initial_position_latest_delivers_nothing_then_only_new_files(tmp_path):
    root = history_and_today(tmp_path)
    doc = plan(root, "--initial-position", "latest")
    assert paths(doc) == [] and doc["baseline"]["files"] == 2
    p = cli("files", str(root), "--consumer", "c", "--initial-position", "latest")
    assert "first plan: 2 files in 2 partitions were taken as already delivered" in p.stderr
    # The same pending plan: asking for another first position is refused, not silently answered.
    one_line_error(invoke_trib("files", str(root), "--consumer", "c", "--initial-position", "earliest"), 5,
                   "made with initial position latest")
    ack(root, doc)
    put(root, f"{today()}/newer.log", NOW - 10 * 60_000)
    put(root, f"{HISTORY}/late.log", NOW - 10 * 60_000)  # newer than the seal: exactly new
    doc = plan(root, "--initial-position", "latest")  # a later plan: the option no longer applies
    assert paths(doc) == [f"{HISTORY}/late.log", f"{today()}/newer.log"]
    show = cli("consumer", "show", str(root), "c").stdout
    assert "first run  latest (took every file that existed as delivered)" in show


@pytest.mark.unit
def test_initial_position_time_takes_partitions_that_ended_before_it(tmp_path):
    root = history_and_today(tmp_path)
    put(root, "2024_07_01/00/mid.log", NOW - 40 * 24 * H)
    doc = plan(root, "--initial-position", "2024-06-01T00:00Z")
    assert paths(doc) == ["2024_07_01/00/mid.log", f"{today()}/new.log"]
    assert doc["baseline"] == {"directories": 1, "files": 1, "bytes": 2}
    ack(root, doc)
    show = json.loads(cli("consumer", "show", str(root), "c", "--json").stdout)
    assert show["initial_position"] == 1_717_200_000_000  # 2024-06-01T00:00Z
    assert "2024-06-01T00:00:00+00:00 (took partitions that ended before it" in \
        cli("consumer", "show", str(root), "c").stdout


@pytest.mark.unit
@pytest.mark.parametrize("args,code,words", [
    (["--consumer", "c", "--initial-position", "2024-06-01T00:00"], 3,
     ["--initial-position 2024-06-01T00:00 has no UTC offset"]),
    (["--consumer", "c", "--initial-position", "yesterday"], 3, ["unparsable --initial-position", "earliest, latest"]),
    (["--initial-position", "latest"], 3, ["--initial-position goes with --consumer"]),
    (["--allow-beyond-horizon"], 3, ["goes with --consumer"]),
])
def test_a_bad_initial_position_is_one_line(tmp_path, args, code, words):
    root = history_and_today(tmp_path)
    one_line_error(invoke_trib("files", str(root), *args), code, *words)
    assert not (root / "_tributary/consumers/c").exists()


@pytest.mark.unit
def test_manifest_consumer_latest_and_time(tmp_path):
    """On a manifest-tracked table: latest starts after the latest version; a time covers every version but
    leaves out files whose partition ended before it."""
    root = tmp_path / "t"
    cli("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--tracking", "manifest")
    src = make_source(tmp_path / "s.jsonl", 60, hours=3)  # 2020-06-24T01..03
    cli("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts")
    files = sorted(Table.load(str(root)).log.state().files)
    assert {f.rsplit("/", 1)[0] for f in files} == {"2020_06_24/01", "2020_06_24/02", "2020_06_24/03"}
    doc = plan(root, "--initial-position", "latest")
    assert paths(doc) == [] and doc["since_version"] == doc["until_version"] == 1
    ack(root, doc)
    make_source(tmp_path / "s2.jsonl", 5, seed=9, hours=1)
    cli("ingest", str(root), "--source", str(tmp_path / "s2.jsonl"), "--app-id", "b", "--time-field", "ts")
    later = plan(root)
    assert paths(later) and set(paths(later)).isdisjoint(files)
    doc = json.loads(cli("files", str(root), "--consumer", "d", "--json", "--initial-position",
                         "2020-06-24T03:00:00Z").stdout)
    # 01 and 02 ended by 03:00 (01 holds both ingests' files): taken as delivered; 03 is delivered.
    assert {p.rsplit("/", 1)[0] for p in paths(doc)} == {"2020_06_24/03"}
    assert doc["until_version"] == Table.load(str(root)).log.latest_version()
    assert doc["baseline"]["directories"] == 2, doc["baseline"]


# -- item 3: beyond the horizon -------------------------------------------------------------------------
@pytest.mark.unit
def test_beyond_the_horizon_changes_are_delivered_exactly_or_held_and_replayed(tmp_path):
    root = tmp_path / "logs"
    put(root, f"{HISTORY}/a.log", H2024 + 1)
    lay = ("--layout", LAYOUT)
    first = plan(root, *lay)
    assert paths(first) == [f"{HISTORY}/a.log"]
    ack(root, first)
    state = lambda: json.loads(max((root / "_tributary/consumers/c").glob("state-*.json")).read_text())  # noqa: E731
    seal = state()["sealed"][HISTORY]
    # A late file newer than the seal: exactly new, delivered, and the seal moves on at the ack.
    put(root, f"{HISTORY}/b.log", NOW - 5 * 60_000)
    doc = plan(root)
    assert paths(doc) == [f"{HISTORY}/b.log"] and doc["beyond_horizon"] == []
    ack(root, doc)
    assert state()["sealed"][HISTORY]["count"] == 2 and state()["sealed"][HISTORY] != seal
    assert paths(plan(root, "--full-scan")) == []  # once
    ack(root, plan(root, "--full-scan"))
    put(root, f"{HISTORY}/c.log", NOW - 60_000)  # a second late file: delivered too, once
    doc = plan(root)
    assert paths(doc) == [f"{HISTORY}/c.log"]
    ack(root, doc)
    assert paths(plan(root, "--full-scan")) == []
    ack(root, plan(root, "--full-scan"))
    # A partition never seen, past the horizon, after the first run: exactly what it holds is new.
    put(root, "2024_02_01/00/x.log", NOW - 60_000)
    doc = plan(root)
    assert paths(doc) == ["2024_02_01/00/x.log"]
    ack(root, doc)

    # A sealed file that grew, its mtime set back: its new lines are a range, as inside the horizon.
    with open(root / HISTORY / "a.log", "ab") as f:
        f.write(b"more\n")
    os.utime(root / HISTORY / "a.log", ns=((H2024 + 1) * 1_000_000,) * 2)
    doc = plan(root)
    assert [(f["path"], f["offset"]) for f in doc["files"]] == [(f"{HISTORY}/a.log", 2)] and doc["held"] == []
    ack(root, doc)

    # A sealed file removed: the partition is held back (the rest goes on), the ack exits 17 naming it.
    (root / HISTORY / "b.log").unlink()
    put(root, f"{HISTORY}/d.log", H2024 + 5)
    doc = plan(root)
    assert paths(doc) == [] and [h["path"] for h in doc["held"]] == [HISTORY]
    line = one_line_error(invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"]), 17,
                          f"{HISTORY} (b.log was removed after it was delivered)",
                          f"trib consumer replay file://{root} c --partition {HISTORY} --execute")
    assert "--redeliver" not in line
    before = state()["version"]
    p = cli("consumer", "replay", str(root), "c", "--partition", HISTORY)
    assert "b.log removed after it was delivered: taken as it is now" in p.stdout and "add --execute" in p.stderr
    assert state()["version"] == before
    cli("consumer", "replay", str(root), "c", "--partition", HISTORY, "--execute")
    doc = plan(root)
    assert paths(doc) == [f"{HISTORY}/d.log"] and doc["held"] == []  # the file never delivered, nothing again
    ack(root, doc)
    assert HISTORY in state()["sealed"] and paths(plan(root, "--full-scan")) == []
    ack(root, plan(root, "--full-scan"))
    one_line_error(invoke_trib("consumer", "replay", str(root), "c", "--partition", "2030_01_01/00"), 3,
                   "has delivered nothing of partition '2030_01_01/00'")

    # Delivering it again is asked for by name, and its preview counts what that repeats.
    p = cli("consumer", "replay", str(root), "c", "--partition", HISTORY, "--redeliver")
    assert "repeating 3 files (11 bytes) already delivered" in p.stdout, p.stdout
    cli("consumer", "replay", str(root), "c", "--partition", HISTORY, "--redeliver", "--execute")
    assert paths(plan(root)) == [f"{HISTORY}/{n}.log" for n in "acd"]


def test_an_etl_consumer_input_over_a_changed_sealed_partition_delivers_the_rest_and_exits_17(tmp_path, spark):
    """A rewritten file in one sealed partition holds that partition only: the run reads the rest,
    commits, acks, and exits 17 naming it (it used to exit 14 and commit nothing, every run)."""
    root, out = tmp_path / "raw", tmp_path / "events"
    put(root, f"{HISTORY}/a.jsonl", H2024 + 1, b'{"id": 1, "ts": 1704074400000}\n')
    cli("table", "create", str(out), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet")
    cli("files", str(root), "--layout", LAYOUT, "--consumer", "c")
    ack(root, plan(root))
    put(root, f"{HISTORY}/a.jsonl", H2024 + 1, b'{"id": 1, "ts": 1704074400000, "x": 2}\n')  # rewritten
    put(root, "2024_01_01/03/b.jsonl", H2024 - 7 * 86_400_000, b'{"id": 2, "ts": 1704078000000}\n')  # old mtime
    (tmp_path / "etl.sql").write_text("SELECT id, ts FROM raw\n")
    (tmp_path / "job.toml").write_text(_job("consumer = \"c\"\n"))
    p = invoke_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time", "2024-01-01T05:00:00Z", "-q",
                    "--json", cwd=tmp_path)
    line = one_line_error(p, 17, "input raw: consumer 'c'", f"{HISTORY} (a.jsonl grew after it was delivered",
                          f"--partition {HISTORY} --execute")
    assert "allow_beyond_horizon" not in line
    doc = json.loads(p.stdout)
    assert doc["output"]["records"] == 1 and doc["acked"][0]["held"] and doc["inputs"][0]["files"] == 1
    import pyarrow.parquet as pq

    table = Table.load(str(out))
    assert [i for f in table.log.state().files for i in pq.read_table(str(out / f)).column("id").to_pylist()] == [2]
    show = json.loads(cli("consumer", "show", str(root), "c", "--json").stdout)
    assert show["pending"] is None and [h["path"] for h in show["held"]] == [HISTORY]  # acked, still held


def _job(extra: str) -> str:
    return consumer_job_text("first", extra, spark=True)


def test_an_etl_consumer_input_delivers_partitions_older_than_the_lookback_on_its_first_run(tmp_path, spark):
    """Issue 32, Why 2: it used to report "read: skipped, no input files" and commit an empty hour."""
    root, out = tmp_path / "raw", tmp_path / "events"
    put(root, f"{HISTORY}/a.jsonl", H2024 + 1, b'{"id": 1, "ts": 1704074400000}\n{"id": 2, "ts": 1704074460000}\n')
    put(root, "2024_01_02/07/b.jsonl", H2024 + 29 * H, b'{"id": 3, "ts": 1704178800000}\n')
    cli("table", "create", str(out), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet")
    (tmp_path / "etl.sql").write_text("SELECT id, ts FROM raw\n")
    (tmp_path / "job.toml").write_text(_job(""))
    # In this process, on the shared session (a Spark start per test costs ~10-40 s on CI).
    p = invoke_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time", "2026-01-01T05:00:00Z", "--json",
                    cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    (inp,) = doc["inputs"]
    assert inp["files"] == 2 and doc["output"]["records"] == 3
    import pyarrow.parquet as pq

    table = Table.load(str(out))
    ids = sorted(i for f in table.log.state().files for i in pq.read_table(str(out / f)).column("id").to_pylist())
    assert ids == [1, 2, 3]


@pytest.mark.unit
@pytest.mark.parametrize("extra,words", [
    ('initial_position = "yesterday"\n', ["inputs[0].initial_position: unparsable initial position 'yesterday'",
                                          "earliest, latest"]),
    ('initial_position = "2024-06-01T00:00"\n', ["inputs[0].initial_position", "has no UTC offset"]),
    ('allow_beyond_horizon = "yes"\n', ["inputs[0].allow_beyond_horizon must be true or false"]),
])
def test_the_job_keys_are_checked_as_the_job_loads(tmp_path, extra, words):
    cli("table", "create", str(tmp_path / "events"), "--layout", LAYOUT, "--partition", PARTITION)
    (tmp_path / "raw").mkdir()
    (tmp_path / "etl.sql").write_text("SELECT id, ts FROM raw\n")
    (tmp_path / "job.toml").write_text(_job(extra))
    one_line_error(invoke_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time", "2024-01-01T05:00:00Z",
                               "--dry-run"), 3, *words)


@pytest.mark.unit
def test_a_consumer_created_before_initial_positions_keeps_its_baseline(tmp_path):
    """A state written before this change has no ``initial_position``: it loads, and show says it kept its
    baseline (nothing it took as delivered is delivered again)."""
    root = history_and_today(tmp_path, table=False)
    ack(root, plan(root, "--layout", LAYOUT))
    state = root / "_tributary/consumers/c/state-00000000000000000001.json"
    doc = json.loads(state.read_text())
    del doc["initial_position"]
    state.write_text(json.dumps(doc))
    show = json.loads(cli("consumer", "show", str(root), "c", "--json").stdout)
    assert show["initial_position"] is None
    assert "first run  baseline (created before initial positions" in cli("consumer", "show", str(root), "c").stdout
    assert paths(plan(root)) == []


def test_replay_says_what_it_redelivers_and_a_version_tracking_consumer_is_refused(tmp_path):
    """One word, one meaning: replay forgets a partition's *listed* files. A both consumer's next plan
    redelivers the files other tools wrote there (trib's own are tracked by version); a manifest consumer
    has nothing listed, and is told how to read the partition again instead of 'delivered nothing'."""
    from helpers import LAYOUT, PARTITION

    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    src = make_source(tmp_path / "s.jsonl", 20, hours=1)
    invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    d = next(p for p in root.rglob("part-*")).parent
    (d / "foreign.jsonl").write_text('{"id": 1}\n')
    os.utime(d / "foreign.jsonl", (0, 0))  # old enough for the consumer's minimum age
    part = str(d.relative_to(root))
    for name, mode in (("b", "both"), ("m", "manifest")):
        p = json.loads(invoke_trib("files", str(root), "--consumer", name, "--mode", mode, "--json",
                                   check=True).stdout)
        invoke_trib("consumer", "ack", str(root), name, p["plan_id"], check=True)
    r = json.loads(invoke_trib("consumer", "replay", str(root), "b", "--partition", part, "--redeliver", "--json",
                               check=True).stdout)
    assert "every file other tools wrote there" in r["effect"] and r["repeats"] == {"files": 1, "bytes": 10}
    refused = one_line_error(invoke_trib("consumer", "replay", str(root), "m", "--partition", part), 3,
                             "tracks table versions", "trib files ROOT --partitions")
    assert "delivered nothing" not in refused
