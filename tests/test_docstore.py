"""The numbered-document store behind the manifest log, consumer state and Hive sync state.

Real storage on every backend (local disk, the S3 server, memory), real threads
and real processes racing for the same numbers; the names checked against the
formats the docs publish.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import REPO
from helpers import put
from tributary_read.errors import ManifestCorruptError, UnsupportedFormatVersionError
from tributary_read.hive.model import TableName
from tributary_read.hive.state import STATE_DIR, Known, StateStore, SyncState
from tributary_read.io.storage import open_storage
from tributary_read.read.consumer import Consumer
from tributary_read.read.resolve import Source
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.docstore import DocumentSeries, DocumentStore, encode, header
from tributary_read.table.layout import Layout
from tributary_read.table.log import CHECKPOINTS, COMMITS, checkpoint_path, commit_path
from tributary_read.table.manifest import FileEntry

pytestmark = pytest.mark.unit  # the S3 variants are integration tests (conftest decides)

WRITERS = 8
NUMBERS = 12
#: Fewer in the process race: its cost is eight interpreters starting, not the creates.
PROCESS_NUMBERS = 4
T0 = 1_592_956_800_000  # 2020-06-24T00:00:00Z


def _doc(writer: str, n: int) -> dict:
    return {**header("test"), "writer": writer, "number": n}


def _store(storage, prefix: str = "state-") -> DocumentStore:
    return DocumentStore(storage, DocumentSeries("_tributary/docs", prefix))


# -- exclusive create ------------------------------------------------------------------------
def test_exclusive_create_has_one_winner_per_number_across_threads(any_storage):
    store = _store(any_storage)
    start = threading.Barrier(WRITERS)
    wins: dict[int, list[str]] = {n: [] for n in range(1, NUMBERS + 1)}
    errors: list[BaseException] = []

    def race(writer: str) -> None:
        try:
            start.wait()
            for n in range(1, NUMBERS + 1):
                if store.create(n, _doc(writer, n)):
                    wins[n].append(writer)  # list.append is atomic under the GIL
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=race, args=(f"w{i}",)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {n: len(w) for n, w in wins.items()} == {n: 1 for n in wins}
    for n, (winner,) in wins.items():
        assert store.read(n) == _doc(winner, n)  # the winner's bytes, never overwritten by a loser
    assert store.numbers() == list(range(1, NUMBERS + 1)) and store.latest() == NUMBERS


_RACER = """
import json, sys
from tributary_read.io.storage import open_storage
from tributary_read.table.docstore import DocumentSeries, DocumentStore, header
root, writer, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store = DocumentStore(open_storage(root), DocumentSeries("_tributary/docs", "state-"))
print("ready", flush=True)
sys.stdin.readline()  # every process starts racing at once
won = [n for n in range(1, count + 1)
       if store.create(n, {**header("test"), "writer": writer, "number": n})]
print(json.dumps(won), flush=True)
"""


@pytest.mark.parametrize("any_root", ["local", "s3"], indirect=True)
def test_exclusive_create_has_one_winner_per_number_across_processes(any_root):
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, any_root, f"p{i}", str(PROCESS_NUMBERS), "go"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
             for i in range(WRITERS)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        won = {}
        for i, p in enumerate(procs):
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            won[f"p{i}"] = json.loads(out.strip().splitlines()[-1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    winners = {n: [w for w, ns in won.items() if n in ns] for n in range(1, PROCESS_NUMBERS + 1)}
    assert {n: len(w) for n, w in winners.items()} == {n: 1 for n in winners}
    store = _store(open_storage(any_root))
    for n, (winner,) in winners.items():
        assert store.read(n)["writer"] == winner


# -- prune --------------------------------------------------------------------------------------
def test_prune_keeps_the_newest_k_and_never_the_latest(any_storage):
    states, plans = _store(any_storage, "state-"), _store(any_storage, "plan-")
    for n in range(1, 8):
        assert states.create(n, _doc("w", n)) and plans.create(n, _doc("w", n))
    assert states.prune(3, 7) == [1, 2, 3, 4]
    assert states.numbers() == [5, 6, 7]
    assert plans.numbers() == list(range(1, 8))  # a sibling series in the same directory is untouched
    # A caller that created 6 while 7 appeared meanwhile: 7 is never deleted.
    assert states.prune(1, 6) == [5]
    assert states.numbers() == [6, 7]
    assert states.prune(5, 7) == [] and states.numbers() == [6, 7]
    with pytest.raises(ValueError):
        states.prune(0, 7)  # would delete the current document
    # One listing can serve both series.
    names = states.names()
    assert plans.prune(2, 7, names) == [1, 2, 3, 4, 5] and plans.numbers() == [6, 7]


def test_consumer_keeps_its_last_three_states_and_plans(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    c = Consumer(Source.open(str(root), layout=Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")), "c")
    for i in range(6):
        put(root, f"2020_06_24/0{i}/f.log", T0 + i)
        c.ack(c.plan(lookback_ms=100_000 * 86_400_000).plan_id)
    names = sorted(p.name for p in (root / "_tributary" / "consumers" / "c").iterdir() if p.is_file())
    # Plan n is made on state n; the ack of plan 5 made state 6 and pruned 3 and below.
    assert names == [f"plan-{n:020d}.json" for n in (4, 5)] + [f"state-{n:020d}.json" for n in (4, 5, 6)]


# -- the header -----------------------------------------------------------------------------
@pytest.mark.parametrize("data, error", [
    (b"{not json", ManifestCorruptError),
    (b"[1, 2]", ManifestCorruptError),
    (b'{"format": "something-else", "format_version": 1}', ManifestCorruptError),
    (b'{"format_version": 1, "kind": "test"}', ManifestCorruptError),
    (b'{"format": "tributary-manifest", "format_version": 99}', UnsupportedFormatVersionError),
    (b'{"format": "tributary-manifest"}', UnsupportedFormatVersionError),
])
def test_a_bad_header_is_the_right_error(any_storage, data, error):
    store = _store(any_storage)
    assert store.create(1, data)
    with pytest.raises(error) as e:
        store.read(1)
    assert store.uri(1) in str(e.value)  # names the file
    assert store.read(2) is None  # absent is not an error
    assert store.read(-1) is None and not store.exists(-1)  # nor is a number no document can have


def test_documents_are_written_with_the_header(any_storage):
    store = _store(any_storage)
    with pytest.raises(ValueError):
        store.create(1, {"writer": "w"})
    assert not store.numbers()
    assert store.create(1, _doc("w", 1))
    assert store.read_bytes(1) == json.dumps(_doc("w", 1), separators=(",", ":")).encode() == encode(_doc("w", 1))


def test_hive_sync_state_round_trips_and_refuses_a_bad_header(any_storage):
    store = StateStore(any_storage, f"{STATE_DIR}/db.t")
    assert store.latest() is None and store.versions() == []
    for v in range(1, 6):
        store.save(SyncState(v, "db.t", "thrift://hms:9083", None, "file:///r", v, {"dt=1": Known("file:///r/1")}))
    assert store.versions() == [3, 4, 5]  # KEEP_STATES
    assert store.latest().version == 5 and store.latest().partitions["dt=1"].location == "file:///r/1"
    any_storage.create_if_absent(f"{STATE_DIR}/db.t/state-{6:020d}.json", b'{"format": "nope"}')
    with pytest.raises(ManifestCorruptError):
        store.latest()


# -- names: exactly what docs/manifest.md, reading.md and hive.md publish -----------------------
def _doc_text(name: str) -> str:
    return (Path(REPO) / "docs" / name).read_text()


def test_names_are_the_documented_ones(tmp_path):
    manifest = _doc_text("manifest.md")
    assert f"log/\n      {commit_path(1).rsplit('/', 1)[1]}     commit, version 1" in manifest
    assert f"{checkpoint_path(100).rsplit('/', 1)[1]}   folded state at version 100" in manifest
    assert commit_path(1) == "_tributary/log/00000000000000000001.json"
    assert checkpoint_path(100) == "_tributary/log/00000000000000000100.checkpoint.json"
    reading, hive = _doc_text("reading.md"), _doc_text("hive.md")
    assert "`state-<20 digits>.json`" in reading and "`plan-<20 digits>.json`" in reading
    assert "ROOT/_tributary/hive/<db>.<table>/state-<20-digit version>.json" in hive

    # What real writers put on disk.
    root = tmp_path / "t"
    t = Table.create(str(root), TableConfig(Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"),
                                            checkpoint_interval=2))
    for i in (1, 2):
        t.log.commit([FileEntry(f"2020_06_24/01/f{i}.jsonl", 1, 1, {"dt": "2020062401"})])
    assert sorted(os.listdir(root / "_tributary" / "log")) == [
        "00000000000000000001.json", "00000000000000000002.checkpoint.json", "00000000000000000002.json"]
    c = Consumer(t, "c")
    c.ack(c.plan().plan_id)
    assert sorted(os.listdir(root / "_tributary" / "consumers" / "c")) == [
        "plan-00000000000000000000.json", "state-00000000000000000001.json"]
    StateStore.for_table(t, TableName("db", "t")).save(SyncState(1, "db.t", "m", None, t.uri, 0, {}))
    assert os.listdir(root / "_tributary" / "hive" / "db.t") == ["state-00000000000000000001.json"]


def test_series_only_see_their_own_names():
    names = ["00000000000000000001.json", "00000000000000000002.checkpoint.json", ".tmp-ab12",
             "0000000000000000003.json", "000000000000000000004.json", "00000000000000000005.json.tmp",
             "state-00000000000000000007.json", "x00000000000000000008.json"]
    assert COMMITS.numbers(names) == [1]
    assert CHECKPOINTS.numbers(names) == [2]
    assert DocumentSeries("d", "state-").numbers(names) == [7]
    assert DocumentSeries("d", "state-").path(7) == "d/state-00000000000000000007.json"
    assert re.fullmatch(r"[0-9]{20}", COMMITS.name(10**20 - 1)[:20])
    with pytest.raises(ValueError):
        COMMITS.name(10**20)
