"""The commit point under faults: every outcome is known before anything is deleted.

Lost replies (a fault-injecting proxy in front of the S3 server), SIGINT and
SIGTERM at random moments of real `trib ingest` processes, 8 concurrent
committers, and a log whose files disagree with each other.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest

from tributary_read.errors import CommitConflictError, CommitStateUnknownError, StorageError
from tributary_read.table.layout import Layout
from tributary_read.table.log import commit_path
from tributary_read.table.manifest import Commit, FileEntry, Transaction
from tributary_read.io.local import LocalStorage
from tributary_read.io.storage import open_storage
from tributary_read.table.config import Table, TableConfig
from tributary_read.write.writer import TableWriter

from conftest import TRIB, invoke_trib, run_trib
from faultproxy import FaultProxy
from forkserver import ForkServer
from helpers import (
    LAYOUT, PARTITION, assert_exactly_once, committed_records, make_source, opened, signal_growing_source, snapshot,
)
from test_concurrency import _check_log

pytestmark = pytest.mark.integration


def _entry(i: int) -> FileEntry:
    return FileEntry(f"2020_06_24/01/f{i}.jsonl", 10 + i, 1, {"dt": "2020062401"})


class LostReply(LocalStorage):
    """Real local storage whose commit replies go missing after the commit lands.

    ``mode`` "exists": the create answers "already exists", as a retried request
    does when its first try landed. "raise": it raises, as a timed-out request does.
    "never": it raises without landing (the store never got the request).
    """

    def __init__(self, root: str, mode: str):
        super().__init__(root, fsync=False)
        self.mode, self.calls = mode, []

    def create_if_absent(self, rel, data):
        if "/log/" not in rel or rel.endswith(".checkpoint.json"):
            return super().create_if_absent(rel, data)
        self.calls.append(rel)
        if self.mode != "never":
            super().create_if_absent(rel, data)
        if self.mode == "exists":
            return False
        raise StorageError(f"cannot commit {rel}: read timed out")


# -- the commit point, in-process against real storage ---------------------------------
@pytest.mark.parametrize("mode", ["exists", "raise"])
def test_own_landed_commit_is_success_local(tmp_path, mode):
    storage = LostReply(str(tmp_path / "t"), mode)
    t = Table.create(str(tmp_path / "t"), TableConfig(Layout(LAYOUT, PARTITION)))
    t.log.storage = storage
    first = t.log.commit([_entry(1)], Transaction("etl", {"src": 1}), writer="w1")
    second = t.log.commit([_entry(2)], Transaction("etl", {"src": 2}), base_version=1, writer="w1")
    assert (first.version, second.version) == (1, 2)
    assert t.log.latest_version() == 2
    landed = Commit.decode(storage.read(commit_path(2)), "c2")
    assert landed.commit_id == second.commit_id and landed.commit_id.startswith("w1-")
    assert storage.calls == [commit_path(1), commit_path(2)]  # one request each, never a higher slot


@pytest.mark.s3
@pytest.mark.parametrize("drops", [1, 7])
def test_own_landed_commit_is_success_s3(s3_server, drops):
    root = f"s3://trib/unit-{random.getrandbits(40):x}"
    with FaultProxy(s3_server["endpoint_url"], drop_commit_replies=drops) as proxy:
        t = Table.create(root, TableConfig(Layout(LAYOUT, PARTITION)), {**s3_server, "endpoint_url": proxy.url})
        first = t.log.commit([_entry(1)], Transaction("etl", {"src": 1}), writer="w1")
        second = t.log.commit([_entry(2)], Transaction("etl", {"src": 2}), base_version=1, writer="w1")
        assert proxy.dropped[0] == 200  # the first PUT landed and its reply was lost
        assert len(proxy.dropped) == drops  # botocore retried into 412s: still success
    assert (first.version, second.version) == (1, 2)
    st = Table.load(root, s3_server).log.state()
    assert st.version == 2 and sorted(st.files) == [_entry(1).path, _entry(2).path]


def test_unknown_outcome_raises_and_never_moves_to_a_higher_slot(tmp_path, monkeypatch):
    monkeypatch.setattr("tributary_read.table.log.SLOT_ATTEMPTS", 3, raising=False)
    root = str(tmp_path / "t")
    t = Table.create(root, TableConfig(Layout(LAYOUT, PARTITION)))
    t.log.storage = storage = LostReply(root, "never")
    with pytest.raises(CommitStateUnknownError):
        t.log.commit([_entry(1)], Transaction("etl", {"src": 1}), writer="w1")
    assert storage.calls == [commit_path(1)] * 3  # the same slot, never version 2
    assert t.log.latest_version() == 0


@pytest.mark.parametrize("mode", ["raise", "never"])
def test_writer_keeps_files_of_an_attempted_commit(tmp_path, monkeypatch, mode):
    """abort() after a commit attempt deletes nothing: the commit may have landed."""
    monkeypatch.setattr("tributary_read.table.log.SLOT_ATTEMPTS", 2, raising=False)
    root = str(tmp_path / "t")
    t = Table.create(root, TableConfig(Layout(LAYOUT, PARTITION)))
    t.log.storage = LostReply(root, mode)
    w = TableWriter(t)
    for i in range(10):
        w.write(json.dumps({"id": i}).encode(), 1_592_960_400_000 + i * 60_000)
    try:
        c = w.commit(Transaction("etl", {"src": 9}))
    except CommitStateUnknownError:
        assert mode == "never"
        c = None
    w.abort()  # what the ingest does on any exception
    written = [f.path for f in t.storage.list() if not f.path.startswith("_tributary")]
    assert len(written) == 1 and t.storage.read(written[0]).count(b"\n") == 10
    if c is not None:
        assert run_trib("verify", root).returncode == 0


# -- the HDFS/local publish routine ---------------------------------------------------
class DoubtfulLink(LocalStorage):
    """The publish step (link on local disk, RENAME on WebHDFS) reports an error after acting."""

    def __init__(self, root, act: bool):
        super().__init__(root, fsync=False)
        self.act = act

    def _publish(self, tmp, target, data):
        if self.act:
            super()._publish(tmp, target, data)
        raise OSError(5, "reply lost")


def test_publish_reads_back_on_doubt(tmp_path):
    landed = DoubtfulLink(str(tmp_path / "a"), act=True)
    assert landed.create_if_absent("_tributary/log/x.json", b"ours") is True
    assert landed.read("_tributary/log/x.json") == b"ours"
    theirs = DoubtfulLink(str(tmp_path / "a"), act=False)
    assert theirs.create_if_absent("_tributary/log/x.json", b"mine") is False  # someone else's bytes
    with pytest.raises(StorageError):
        theirs.create_if_absent("_tributary/log/y.json", b"mine")  # nothing there: the error stands
    # The temp copies are gone either way; only the published file remains.
    assert [f.path for f in landed.list()] == ["_tributary/log/x.json"]


# -- lost replies end to end ------------------------------------------------------------
@pytest.mark.s3
def test_lost_commit_replies_lose_nothing(tmp_path, s3_server, s3_root):
    n = 1_000
    src = make_source(tmp_path / "src.jsonl", n, hours=2)
    with FaultProxy(s3_server["endpoint_url"], drop_commit_replies=7) as proxy:
        env = {"TRIB_S3_ENDPOINT_URL": proxy.url, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        invoke_trib("table", "create", s3_root, "--layout", LAYOUT, "--partition", PARTITION, check=True, env=env)
        codes = []
        for _ in range(10):
            r = run_trib("ingest", s3_root, "--source", str(src), "--app-id", "etl", "--time-field", "ts",
                         "--commit-every", "100", env=env)
            codes.append(r.returncode)
            if r.returncode == 0:
                break
            assert r.returncode == 12, r.stderr  # outcome unknown: rerun; never a false conflict
        assert codes[-1] == 0, codes
        assert len(proxy.dropped) == 7 and 200 in proxy.dropped
        files = json.loads(invoke_trib("files", s3_root, "--all", "--json", check=True, env=env).stdout)["files"]
        assert_exactly_once(committed_records(open_storage(s3_root, {**s3_server}), files), n)
        v = invoke_trib("verify", s3_root, env=env)
        assert v.returncode == 0, v.stdout + v.stderr


# -- an upload refused at the close ------------------------------------------------------
def _proxy_env(proxy) -> dict:
    return {"TRIB_S3_ENDPOINT_URL": proxy.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1"}


@pytest.mark.s3
@pytest.mark.timeout(90)
@pytest.mark.parametrize("status,code,options,tries", [
    (404, "NoSuchBucket", (), 1),  # the bucket was deleted between the open and the close
    (500, "InternalError", (), 3),  # a store that keeps failing: pyarrow's three tries, stated by trib
    (500, "InternalError", ("-o", "max_attempts=1", "-o", "request_timeout=2"), 1),
])
def test_an_upload_refused_at_the_close_fails_at_once_and_commits_nothing(tmp_path, s3_server, s3_root, status,
                                                                         code, options, tries):
    """A small file is one PUT at its close (the open is delayed): a bucket deleted meanwhile, or a
    store that keeps failing, is one line and exit 7 after a bounded number of tries, never a hang."""
    src = make_source(tmp_path / "src.jsonl", 200, hours=3)
    with FaultProxy(s3_server["endpoint_url"], refuse_data_puts=(status, code, None)) as proxy:
        env = _proxy_env(proxy)
        invoke_trib("table", "create", s3_root, "--layout", LAYOUT, "--partition", PARTITION, check=True, env=env)
        before = _objects(open_storage(s3_root, {**s3_server}))
        start = time.monotonic()
        r = invoke_trib(*options, "ingest", s3_root, "--source", str(src), "--app-id", "etl", "--time-field", "ts",
                        env=env)
        took = time.monotonic() - start
        assert r.returncode == 7, r.stdout + r.stderr
        assert r.stderr.startswith("trib: error: cannot write ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert took < 45, took
        per_file = {key: proxy.refused.count(key) for key in proxy.refused}
        assert len(per_file) == 3 and set(per_file.values()) == {tries}, per_file  # one file an hour
    assert _objects(open_storage(s3_root, {**s3_server})) == before  # nothing committed, nothing left
    assert json.loads(invoke_trib("files", s3_root, "--all", "--json", check=True, env=_s3(s3_server)).stdout)[
        "files"] == []


@pytest.mark.s3
@pytest.mark.parametrize("option", ["max_attempts=0", "request_timeout=soon"])
def test_a_bad_retry_option_is_one_line(s3_root, s3_env, option):
    r = invoke_trib("-o", option, "files", s3_root, "--all")
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert option.split("=")[0] in r.stderr


@pytest.mark.s3
def test_a_transient_5xx_at_the_close_is_ridden_out(tmp_path, s3_server, s3_root):
    """One 503 (SlowDown) is retried by the store's client: the run commits every record once."""
    n = 100
    src = make_source(tmp_path / "src.jsonl", n, hours=1)
    with FaultProxy(s3_server["endpoint_url"], refuse_data_puts=(503, "SlowDown", 1)) as proxy:
        env = _proxy_env(proxy)
        invoke_trib("table", "create", s3_root, "--layout", LAYOUT, "--partition", PARTITION, check=True, env=env)
        invoke_trib("ingest", s3_root, "--source", str(src), "--app-id", "etl", "--time-field", "ts", check=True,
                    env=env)
        assert len(proxy.refused) == 1
    files = json.loads(invoke_trib("files", s3_root, "--all", "--json", check=True, env=_s3(s3_server)).stdout)["files"]
    assert_exactly_once(committed_records(open_storage(s3_root, {**s3_server}), files), n)


@pytest.mark.s3
def test_an_s3_rename_is_one_copy_and_a_refused_one_goes_through_the_managed_copy(s3_server, s3_root):
    """The rename after a commit: one CopyObject, no HEAD first; where the store refuses it (S3 does
    for a source over 5 GiB), boto3's managed copy, which copies in parts."""
    direct = open_storage(s3_root, {**s3_server})
    for name in ("a", "b"):
        direct.write(f"d/.{name}.inprogress", name.encode() * 3)
    with FaultProxy(s3_server["endpoint_url"], refuse_data_puts=(400, "InvalidRequest", 1)) as proxy:
        st = open_storage(s3_root, {**s3_server, "endpoint_url": proxy.url})
        st.rename("d/.a.inprogress", "d/a")  # refused once, then copied
        assert len(proxy.refused) == 1
        del proxy.requests[:]
        st.rename("d/.b.inprogress", "d/b")
        assert [m for m, _ in proxy.requests] == ["PUT", "DELETE"], proxy.requests
    assert (direct.read("d/a"), direct.read("d/b")) == (b"aaa", b"bbb")
    assert direct.stat_many(["d/.a.inprogress", "d/.b.inprogress"]) == [None, None]


def _objects(st) -> dict[str, bytes]:
    """Every object under a table root and its bytes."""
    return {f.path: st.read(f.path) for f in st.list()}


def _s3(s3_server) -> dict:
    return {"TRIB_S3_ENDPOINT_URL": s3_server["endpoint_url"], "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


# -- signals ----------------------------------------------------------------------------
def _signaller(sig: int, rng: random.Random, second_after: tuple[float, float] | None = None, seen=None):
    """A ``send`` for signal_loop: one signal (or two), then check how trib ended.

    ``seen`` collects the first word of each ingest-level message ("interrupted"
    for a stop at a safe point, "stopped" for a stop at once).
    """

    def send(p) -> bool:
        p.send_signal(sig)
        if second_after is not None:
            time.sleep(rng.uniform(*second_after))
            if p.poll() is None:
                p.send_signal(sig)
        try:
            rc = p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            # A hang: SIGABRT makes faulthandler (PYTHONFAULTHANDLER=1 below) print every thread's stack.
            p.send_signal(signal.SIGABRT)
            p.wait()
            raise AssertionError("no exit 120 s after the signal; stacks:\n" + p.stderr.read().decode()[-8000:])
        err = p.stderr.read().decode()
        # -sig: it arrived before trib had loaded (or, a second one, after it had
        # finished); 0: the run ended just before it.
        assert rc in (128 + sig, -sig, 0), f"exit {rc}: {err}"
        if rc == 128 + sig:
            assert "Traceback" not in err and err.strip().count("\n") == 0, err
        # A hit: the ingest itself was stopped (not its start-up).
        hit = err.startswith(("trib: interrupted by", "trib: stopped at once"))
        if hit and seen is not None:
            seen.append(err.split()[1])
        return hit

    return send


def _signal_run(tmp_path, sig, hits, seed, checkpoint_interval=100, second_after=None, fsync=False) -> list[str]:
    n = 20_000
    src = make_source(tmp_path / "src.jsonl", n, hours=6)
    root = tmp_path / "table"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
                "--checkpoint-interval", str(checkpoint_interval), check=True)
    cmd = [*TRIB, "ingest", str(root), "--source", str(src), "--app-id", "etl", "--time-field", "ts",
           "--commit-every", "100"]
    rng = random.Random(seed)
    # fsync off: a signal stops the process, not the machine, so the page cache
    # survives, and the runs spend their time ingesting rather than waiting on disk.
    # The moment is random from when the run opens its source (its handlers are set by then): the
    # interpreter's start-up before it takes 0.3 s idle and seconds on a loaded machine, and a window
    # counted from the process start spent most of CI's trials signalling start-ups, which are no hits.
    # Each run is a child of a fork server that has imported trib (tests/forkserver.py): a real process,
    # without the cold interpreter's start-up per trial.
    seen: list[str] = []
    with ForkServer({"TRIB_FSYNC": str(fsync).lower(), "PYTHONFAULTHANDLER": "1"}) as fs:
        landed, n = signal_growing_source(cmd, src, n, hits, rng, hours=6, window=(0.0, 0.6), started=opened(src),
                                          send=_signaller(sig, rng, second_after, seen), spawn=fs.spawn)
    assert landed >= hits, f"only {landed} signals landed"
    # The run to completion is not signalled: without fsync either (it fsynced each of up to ~200 commits
    # and checkpoints, most of the test on a loaded machine).
    done = run_trib(*cmd[len(TRIB):], env={"TRIB_FSYNC": "false"})
    assert done.returncode == 0, done.stderr
    # The checks read the table: in this process (no interpreter start per command).
    files = json.loads(invoke_trib("files", str(root), "--all", "--mode", "manifest", "--json",
                                   check=True).stdout)["files"]
    assert_exactly_once(committed_records(open_storage(str(root)), files), n)
    v = invoke_trib("verify", str(root))
    assert v.returncode == 0, v.stdout + v.stderr
    rec = json.loads(invoke_trib("recover", str(root), "--app-id", "etl", "--json", check=True).stdout)
    assert rec["offsets"] == {"src.jsonl": n - 1}
    return seen


@pytest.mark.slow
def test_sigint_at_40_random_moments_checkpoint_every_commit(tmp_path):
    _signal_run(tmp_path, signal.SIGINT, 40, "sigint", checkpoint_interval=1)


@pytest.mark.slow
def test_sigterm_at_random_moments(tmp_path):
    _signal_run(tmp_path, signal.SIGTERM, 10, "sigterm")


@pytest.mark.slow
def test_double_sigint_stops_at_once(tmp_path):
    # The second signal follows within 1-40 ms, and fsync stays on so that the stop at a
    # safe point (flush, fsync, commit, checkpoint) lasts long enough to be cut short:
    # without fsync it takes a millisecond or two and most second signals came too late.
    seen = _signal_run(tmp_path, signal.SIGINT, 12, "double", checkpoint_interval=1, second_after=(0.001, 0.04),
                       fsync=True)
    assert "stopped" in seen, seen  # some second signals cut a stop short


# -- honest contention --------------------------------------------------------------------
class CountingCommits(LocalStorage):
    def __init__(self, root):
        super().__init__(root, fsync=False)
        self.tried = []

    def create_if_absent(self, rel, data):
        if "/log/" in rel and not rel.endswith(".checkpoint.json"):
            self.tried.append(rel)
        return super().create_if_absent(rel, data)


@pytest.mark.parametrize("same_app_at", [None, 3])
def test_a_loser_jumps_to_the_newest_version_and_checks_what_it_jumps_over(tmp_path, same_app_at):
    root = str(tmp_path / "t")
    t = Table.create(root, TableConfig(Layout(LAYOUT, PARTITION)))
    for v in range(1, 6):
        t.log.commit([_entry(v)], Transaction("etl" if v == same_app_at else f"other{v}", {"src": v}))
    t.log.storage = storage = CountingCommits(root)
    if same_app_at:
        # Lost at version 1 (another app), but version 3, also jumped over, is ours.
        with pytest.raises(CommitConflictError, match="version 3"):
            t.log.commit([_entry(9)], Transaction("etl", {"src": 9}), base_version=0)
        assert t.log.latest_version() == 5
    else:
        c = t.log.commit([_entry(9)], Transaction("etl", {"src": 9}), base_version=0)
        assert c.version == 6
        assert storage.tried == [commit_path(1), commit_path(6)]  # one lost race, not five


def _run_concurrently(root, sources, env=None, preload=ForkServer.PRELOAD):
    """tests/test_concurrency.py's runs (one ``trib ingest --commit-every 1`` per source, all at once), each a
    child of one fork server: they start within milliseconds of each other, and 8 cold interpreters'
    imports no longer take the cores from the committers they are meant to contend with."""
    with ForkServer(env, preload=preload) as fs:
        procs = [fs.spawn([*TRIB, "ingest", str(root), "--source", str(src), "--app-id", f"app{i}", "--time-field",
                           "ts", "--commit-every", "1", "--json"], stdout=True) for i, src in enumerate(sources)]
        for p in procs:
            assert p.wait(900) == 0, p.stderr.read().decode()
        return [json.loads(p.stdout.read()) for p in procs]


def _contend(root, tmp_path, writers, per_writer, env=None):
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
                "--checkpoint-interval", "50", check=True, env=env)
    sources = [make_source(tmp_path / f"src{i}.jsonl", per_writer, seed=i) for i in range(writers)]
    started = time.monotonic()
    preload = (*ForkServer.PRELOAD, "tributary_read.io.s3", "boto3") if env else ForkServer.PRELOAD
    results = _run_concurrently(root, sources, env=env, preload=preload)  # every process exits 0: no give-up
    elapsed = time.monotonic() - started
    assert [r["commits"] for r in results] == [per_writer] * writers
    _check_log(root, writers, per_writer, env=env)
    return elapsed


@pytest.mark.slow
def test_eight_processes_200_commits_each_local(tmp_path):
    _contend(tmp_path / "table", tmp_path, 8, 200)


@pytest.mark.slow
@pytest.mark.s3
def test_eight_processes_40_commits_each_s3(tmp_path, s3_root, s3_env):
    """The local test's contention on the S3 server's conditional PUT, smaller: with 8 writers on
    2 cores the server, not trib, sets the pace (8 x 200 took 5-13 minutes of CI time)."""
    _contend(s3_root, tmp_path, 8, 40, env=s3_env)


# -- the log is cross-checked -------------------------------------------------------------
def _three_commits(tmp_path, interval=100):
    root = tmp_path / "table"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
             "--checkpoint-interval", str(interval), check=True)
    src = make_source(tmp_path / "src.jsonl", 300, hours=3)
    run_trib("ingest", str(root), "--source", str(src), "--app-id", "etl", "--time-field", "ts",
             "--commit-every", "100", check=True)
    return root


def test_verify_and_clean_see_commits_beyond_a_gap(tmp_path):
    root = _three_commits(tmp_path)
    log = root / "_tributary" / "log"
    # Commit 3 ends up at version 5: probing stops at 2, but commit 5 and its files exist.
    (log / "00000000000000000003.json").rename(log / "00000000000000000005.json")
    doc = json.loads((log / "00000000000000000005.json").read_text())
    doc["version"] = 5
    (log / "00000000000000000005.json").write_text(json.dumps(doc))
    stranded = [f["path"] for f in doc["files"]]
    v = run_trib("verify", str(root), "--json")
    assert v.returncode == 9
    kinds = {p["problem"] for p in json.loads(v.stdout)["problems"]}
    assert {"log_gap", "unreachable_commits"} <= kinds
    assert not any(o["path"] in stranded for o in json.loads(v.stdout)["orphans"])
    before = snapshot(root)
    c = run_trib("clean", str(root), "--older-than", "0s")  # refused like verify: the log is not whole
    assert c.returncode == 9 and "log_gap" in c.stderr, c.stderr
    assert snapshot(root) == before and all((root / p).exists() for p in stranded)


def test_verify_reports_a_checkpoint_that_disagrees(tmp_path):
    root = _three_commits(tmp_path, interval=2)
    cp = root / "_tributary" / "log" / "00000000000000000002.checkpoint.json"
    doc = json.loads(cp.read_text())
    dropped = doc["files"].pop()
    cp.write_text(json.dumps(doc))
    v = run_trib("verify", str(root), "--json")
    assert v.returncode == 9, v.stdout
    assert [p["problem"] for p in json.loads(v.stdout)["problems"]] == ["checkpoint_mismatch"]
    assert os.path.exists(root / dropped["path"])
