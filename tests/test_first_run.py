"""Issue 32, items 1 and 3: a consumer's first run delivers what exists, and past the lookback horizon a
change is delivered when it can be told exactly and refused (exit 14) when it cannot.

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
def test_beyond_the_horizon_exact_changes_are_delivered_others_refused_replayed_or_allowed(tmp_path):
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

    # A sealed file resized: which files are new cannot be told. Exit 14, one line, no plan saved.
    with open(root / HISTORY / "a.log", "ab") as f:
        f.write(b"more\n")
    os.utime(root / HISTORY / "a.log", ns=((H2024 + 1) * 1_000_000,) * 2)
    line = one_line_error(invoke_trib("files", str(root), "--consumer", "c"), 14,
                          f"partition {HISTORY} (dt=2024010102)", "a file was removed, resized or rewritten",
                          f"trib consumer replay file://{root} c --partition {HISTORY} --execute", "--allow-beyond-horizon")
    assert "allow_beyond_horizon" not in line  # the CLI's flag, not the Python spelling
    assert json.loads(cli("consumer", "show", str(root), "c", "--json").stdout)["pending"] is None
    one_line_error(invoke_trib("files", str(root), "--consumer", "c", "--json"), 14, "trib consumer replay")

    # Replay: a preview first, then the next plan delivers every current file of the partition and re-seals it.
    before = state()["version"]
    p = cli("consumer", "replay", str(root), "c", "--partition", HISTORY)
    assert "forgets the 3 files it delivered of 2024_01_01/02" in p.stdout and "add --execute" in p.stderr
    assert state()["version"] == before
    cli("consumer", "replay", str(root), "c", "--partition", HISTORY, "--execute")
    doc = plan(root)
    assert paths(doc) == [f"{HISTORY}/{n}.log" for n in "abc"]
    ack(root, doc)
    assert HISTORY in state()["sealed"] and paths(plan(root, "--full-scan")) == []
    ack(root, plan(root, "--full-scan"))
    one_line_error(invoke_trib("consumer", "replay", str(root), "c", "--partition", "2030_01_01/00"), 3,
                   "has delivered nothing of partition '2030_01_01/00'")

    # The explicit opt-out: a warning, the files reported, exit 0; acked, the change is acknowledged.
    (root / HISTORY / "b.log").unlink()
    one_line_error(invoke_trib("files", str(root), "--consumer", "c"), 14, "3 files then, 2 now")
    p = cli("files", str(root), "--consumer", "c", "--allow-beyond-horizon")
    assert p.stdout == "" and "changed beyond the lookback horizon are not delivered" in p.stderr
    doc = plan(root, "--allow-beyond-horizon")
    assert paths(doc) == [] and {b["path"] for b in doc["beyond_horizon"]} == {
        f"{HISTORY}/a.log", f"{HISTORY}/c.log"}
    ack(root, doc)
    assert paths(plan(root)) == []  # acknowledged: no longer refused


@pytest.mark.unit
def test_an_etl_consumer_input_over_a_changed_sealed_partition_exits_14_and_commits_nothing(tmp_path):
    root, out = tmp_path / "raw", tmp_path / "events"
    put(root, f"{HISTORY}/a.jsonl", H2024 + 1, b'{"id": 1, "ts": 1704074400000}\n')
    cli("table", "create", str(out), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet")
    cli("files", str(root), "--layout", LAYOUT, "--consumer", "c")
    ack(root, plan(root))
    put(root, f"{HISTORY}/a.jsonl", H2024 + 1, b'{"id": 1, "ts": 1704074400000, "x": 2}\n')  # rewritten
    (tmp_path / "etl.sql").write_text("SELECT id, ts FROM raw\n")
    (tmp_path / "job.toml").write_text(_job("consumer = \"c\"\n"))
    line = one_line_error(run_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time",
                                   "2024-01-01T05:00:00Z", "-q"), 14,
                          "input raw: consumer 'c': partition 2024_01_01/02", "trib consumer replay",
                          "allow_beyond_horizon = true in its [[inputs]]")
    assert "--allow-beyond-horizon" not in line
    assert Table.load(str(out)).log.latest_version() == 0  # nothing committed


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
    r = json.loads(invoke_trib("consumer", "replay", str(root), "b", "--partition", part, "--json",
                               check=True).stdout)
    assert "every file other tools wrote in the partition" in r["effect"]
    refused = one_line_error(invoke_trib("consumer", "replay", str(root), "m", "--partition", part), 3,
                             "tracks table versions", "trib files ROOT --partitions")
    assert "delivered nothing" not in refused
