"""Inputs that once ended in "trib: unexpected …" (exit 1) exit with their error class's code.

Each case runs the CLI and asserts: the code, one stderr line, no traceback,
and that the table's committed bytes did not change. The CLI runs in this
process (``invoke_trib``: the root group maps errors itself) unless the process
is the point: a JSON nesting deep enough to crash an interpreter, a file-size
limit, concurrent syncs.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess

import pytest
from conftest import REPO, TRIB, invoke_trib, run_trib
from helpers import LAYOUT, PARTITION, assert_exactly_once, committed_records, make_source, snapshot

from tributary_read.io.storage import open_storage

pytestmark = pytest.mark.unit

COMMIT1 = "_tributary/log/00000000000000000001.json"
DEEP = '{"format":"tributary-manifest","format_version":1,"x":' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("codes")
    root = base / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    src = make_source(base / "s.jsonl", 200, hours=3)
    invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    invoke_trib("files", str(root), "--consumer", "c", check=True)
    return root


@pytest.fixture
def table(built, tmp_path):
    root = tmp_path / "t"
    shutil.copytree(built, root, symlinks=True)
    return root


def expect(code: int, *args: str, root=None, proc=None):
    before = snapshot(root) if root is not None else None
    p = proc or invoke_trib(*args)
    assert p.returncode == code, (args, p.returncode, p.stderr)
    err = p.stderr
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and "unexpected" not in err and err.startswith("trib: error: "), err
    if root is not None:
        assert snapshot(root) == before
    return p


def _edit_json(path, fn) -> None:
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))


@pytest.mark.parametrize("field,value", [
    ("version", "1"), ("files", {}), ("size", 1.5), ("partition", 3), ("transaction", []),
    ("timestamp_ms", 1e20), ("timestamp_ms", 10**17), ("path", 7),
])
def test_badly_typed_commit_fields_are_corrupt(table, field, value):
    def mutate(d):
        if field in ("size", "partition", "path"):
            d["files"][0][field] = value
        else:
            d[field] = value
    _edit_json(table / COMMIT1, mutate)
    for cmd in (("files", "--all"), ("log",), ("verify",)):
        expect(6, cmd[0], str(table), *cmd[1:], root=table)


@pytest.mark.integration  # a real process: a recursion crash would take pytest down with it
@pytest.mark.parametrize("where", [COMMIT1, "_tributary/table.json", "consumers"])
def test_deeply_nested_json_is_corrupt_not_a_recursion_crash(table, where):
    if where == "consumers":
        path = next((table / "_tributary/consumers/c").glob("plan-*.json"))
        args = ("files", str(table), "--consumer", "c")
    else:
        path = table / where
        args = ("files", str(table), "--all")
    path.write_text(DEEP)
    before = snapshot(table)
    expect(6, *args, proc=run_trib(*args))
    assert snapshot(table) == before


def test_last_checkpoint_that_is_a_directory_is_treated_as_missing(table):
    hint = table / "_tributary/_last_checkpoint"
    if hint.exists():
        hint.unlink()
    hint.mkdir()
    files = invoke_trib("files", str(table), "--all")
    assert files.returncode == 0, files.stderr and files.stdout.strip()
    assert invoke_trib("verify", str(table)).returncode == 0
    (table / "_tributary/_last_checkpoint/x").write_text(DEEP)  # still a directory, now not empty
    assert invoke_trib("log", str(table)).returncode == 0


@pytest.mark.parametrize("mutate", [
    lambda d: d["layout"].update(directory=5), lambda d: d.update(layout=7),
    lambda d: d["layout"].update(partition=["dt"]), lambda d: d["layout"].update(timezone=0),
])
def test_non_string_layout_in_table_json_is_corrupt(table, mutate):
    _edit_json(table / "_tributary/table.json", mutate)
    expect(6, "files", str(table), "--all", root=table)


@pytest.mark.parametrize("args", [
    ("--start", "99999999999999999999"), ("--start", "0", "--end", "99999999999999999999"),
    ("--schedule-time", "9999-12-31T23:30:00Z", "--period", "2h"),
    ("--schedule-time", "0001-01-01T00:30:00Z", "--period", "1h"),
])
def test_out_of_range_window_bounds_are_bad_input(table, args):
    expect(3, "files", str(table), *args, root=table)


@pytest.mark.parametrize("cond", ["dt<=9999123123", "dt>=9999123123", "dt>=9999123123,dt<=9999123123"])
def test_partition_bounds_at_the_end_of_time_work(table, cond):
    for mode in ("manifest", "mtime"):
        p = invoke_trib("files", str(table), "--mode", mode, "--partitions", cond)
        assert p.returncode == 0, p.stderr
        assert "Traceback" not in p.stderr


@pytest.mark.parametrize("size", ["inf", "-inf", "nan", "-1", "1e30", "1e400"])
def test_roll_size_must_be_a_reachable_byte_count(table, tmp_path, size):
    expect(3, "table", "create", str(tmp_path / "n"), "--layout", LAYOUT, "--partition", PARTITION,
           "--roll-size", size)
    assert not (tmp_path / "n").exists()
    src = make_source(tmp_path / "s.jsonl", 10)
    expect(3, "ingest", str(table), "--source", str(src), "--app-id", "z", "--time-field", "ts",
           "--roll-size", size, root=table)


@pytest.mark.parametrize("layout", [
    "../x/" + LAYOUT, "/abs/" + LAYOUT, "{yyyy}_{MM}_{dd}//{HH}", "{yyyy}_{MM}_{dd}/./{HH}",
    "{yyyy}_{MM}_{dd}/../{HH}", "_x/" + LAYOUT, "{yyyy}_{MM}_{dd}\\{HH}",
])
def test_table_create_refuses_layouts_that_leave_root_or_hide_data(tmp_path, layout):
    expect(3, "table", "create", str(tmp_path / "t"), "--layout", layout, "--partition", PARTITION)
    assert not (tmp_path / "t").exists() and not (tmp_path / "x").exists()


@pytest.mark.integration  # a real process under a file-size limit
def test_efbig_on_a_data_file_is_a_storage_error_and_a_rerun_completes(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    n = 2000
    src = make_source(tmp_path / "s.jsonl", n, hours=3)
    lines = src.read_text().splitlines(keepends=True)
    big = json.loads(lines[1500])
    big["msg"] = "x" * 30_000  # its file passes the 20 kB limit: commits before it land, then EFBIG
    lines[1500] = json.dumps(big) + "\n"
    src.write_text("".join(lines))
    args = ["ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts",
            "--commit-every", "300"]

    def limit():  # writes past 20 kB fail with EFBIG instead of killing the process
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([*TRIB, *args], capture_output=True, text=True, env=env, preexec_fn=limit)
    expect(7, proc=p)
    assert "File too large" in p.stderr
    storage = open_storage(str(root))
    first = json.loads(run_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    assert first, "some commits should have landed before the limit was hit"
    assert run_trib("verify", str(root)).returncode == 0  # nothing committed was deleted
    run_trib(*args, check=True)
    files = json.loads(run_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    assert {f["path"] for f in first} <= {f["path"] for f in files}
    assert_exactly_once(committed_records(storage, files), n)


def test_fuzzed_cli_inputs_never_exit_unexpected(table, tmp_path):
    """A few hostile values through the main commands: each is a classed error or a success."""
    cases = [
        ("files", str(table), "--since-version", "99999999999999999999999"),
        ("files", str(table), "--until-version", "-5"),
        ("files", str(table), "--all", "--parallel", "0"),
        ("files", str(table), "--schedule-time", "2020-06-24T01:05:00Z", "--period", "0h"),
        ("files", str(table), "--schedule-time", "2020-06-24T01:05:00Z", "--period", "1e400h"),
        ("files", str(table), "--lookback", "1e400d", "--consumer", "z"),
        ("files", str(table), "--all", "--mode", "mtime", "--timezone", "Mars/Olympus"),
        ("files", str(table), "--partitions", "dt>=\u00ff\u2028"),
        ("log", str(table), "--since-version", "-3"),
        ("clean", str(table), "--older-than", "1e400d"),
        ("files", str(tmp_path / "nope"), "--all"),
    ]
    for args in cases:
        p = invoke_trib(*args)
        assert "unexpected" not in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert p.returncode != 1, (args, p.stderr)


# -- Hive: runs with the other Hive tests, on the session's metastore + HiveServer2 -----------------
def test_concurrent_first_time_partition_syncs_loser_exits_5(hive_services, tmp_path):
    """Two first-time syncs of one Hive table race: the loser exits 5 (as docs/hive.md promises),
    never 1, and a rerun converges."""
    import uuid

    from conftest import hs2_connect

    from tributary_read.hive.model import TableName

    name = TableName("default", f"c_{uuid.uuid4().hex[:10]}")
    root = tmp_path / "root"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "text",
             check=True)
    for h in range(48):
        d = root / f"2024_01_{1 + h // 24:02d}" / f"{h % 24:02d}"
        d.mkdir(parents=True)
        (d / "part-0.txt").write_text(f"h{h}\n")
    conn = hs2_connect(hive_services)
    cur = conn.cursor()
    cur.execute(f"CREATE EXTERNAL TABLE {name.sql} (line STRING) PARTITIONED BY (dt STRING) "
                f"STORED AS TEXTFILE LOCATION 'file://{root}'")
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        args = [*TRIB, "partitions", "sync", str(root), "--hive-table", str(name),
                "--metastore", f"hs2://127.0.0.1:{hive_services.hs2_port}?user=trib"]
        procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(2)]
        results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
        codes = sorted(c for c, _ in results)
        for c, err in results:
            assert "unexpected" not in err and "Traceback" not in err, err
            assert c == 0 or (c == 5 and err.count("\n") == 1), (c, err)
        assert codes[0] == 0, results
        again = run_trib(*args[len(TRIB):])
        assert again.returncode == 0, again.stderr
        cur.execute(f"SHOW PARTITIONS {name.sql}")
        assert len(cur.fetchall()) == 48
    finally:
        cur.execute(f"DROP TABLE IF EXISTS {name.sql}")
        conn.close()
