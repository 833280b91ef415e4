"""A compaction setting originals aside while a writer's roll-forward renames the same file: the
interleaving forced, on S3, where a rename is a copy and then a delete.

A roll-forward killed between the copy and the delete of its rename leaves a committed file under
both names, final and staged (``.part-….inprogress``). The compaction later replaces that file; its
set-aside and another roll-forward of the same commit (the app's next run, ``trib recover``, a reader)
then race over the two names. The test holds the compaction's first request about the staged name
(a proxy in front of the S3 server, so the compaction stops exactly where its own code looks, on
any version of it), lets ``trib recover`` run to its end, then lets the compaction go on (or kills
it, and a reader finishes it). Every record must then be once in trib's reader and once in a plain
listing of the partition directories (what Hive and Spark count), never beside its compacted copy.

On local disk a rename is one step and the interleaving cannot arise; the closest one (a writer
stopped between looking at its file's names and renaming it, while a compaction takes that file) is
tested there, and so is a reader whose state predates the compaction (docs/compaction.md).
"""

from __future__ import annotations

import json
import os
import posixpath
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest
from conftest import REPO, TRIB, invoke_trib
from faultproxy import FaultProxy
from helpers import LAYOUT, PARTITION

from tributary_read.io.storage import open_storage

pytestmark = pytest.mark.integration

T0 = 1_592_956_800_000  # 2020-06-24T00:00Z
HOURS = 2


class HoldingProxy(FaultProxy):
    """Relays every request, but holds each one whose path names ``needle`` until :meth:`release`."""

    def __init__(self, upstream: str, needle: str):
        super().__init__(upstream)
        self.needle = needle
        self.held = threading.Event()
        self._go = threading.Event()

    def _take_drop(self, method: str, path: str, headers) -> bool:
        if self.needle in path and not self._go.is_set():
            self.held.set()
            self._go.wait(60)
        return False

    def release(self) -> None:
        self._go.set()


def _ids(data: bytes) -> list[int]:
    return [json.loads(line)["id"] for line in data.splitlines() if line.strip()]


def _directory_reader(st) -> Counter:
    """What Hive or Spark count: every object under the partition prefixes, hidden names skipped."""
    files, _ = st.walk()
    ids: Counter = Counter()
    for f in files:
        if not any(part[:1] in "._" for part in f.path.split("/")):
            ids.update(_ids(st.read(f.path)))
    return ids


def _trib_reader(st, root: str) -> Counter:
    plan = json.loads(invoke_trib("files", root, "--all", "--json", check=True).stdout)
    return Counter(i for f in plan["files"] for i in _ids(st.read(f["path"])))


@pytest.mark.s3
@pytest.mark.parametrize("compaction", ["resumes", "killed"])
def test_set_aside_and_a_roll_forward_of_the_same_file_never_leave_it_beside_its_copy(s3_root, s3_env, s3_server,
                                                                                     tmp_path, compaction):
    from tributary_read.table.config import Table

    root = s3_root
    invoke_trib("table", "create", root, "--layout", LAYOUT, "--partition", PARTITION, "--protocol", "rename",
                check=True)
    everything: Counter = Counter()
    for k in range(3):  # three apps, a small file each in each hour
        src = tmp_path / f"src{k}.jsonl"
        rows = [{"id": k * 100 + j, "ts": T0 + (j % HOURS) * 3_600_000 + j} for j in range(20)]
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        everything.update(r["id"] for r in rows)
        invoke_trib("ingest", root, "--source", str(src), "--app-id", f"a{k}", "--time-field", "ts", check=True)
    st = open_storage(root)
    table = Table.load(root)
    last = table.log.read_commit(table.log.state().apps["a0"].version)
    victim = last.files[0]
    # What a roll-forward of a0's commit killed between its copy and its delete leaves: both names.
    st.write(victim.staged, st.read(victim.path))

    with HoldingProxy(s3_server["endpoint_url"], posixpath.basename(victim.staged)) as proxy:
        env = {**os.environ, **s3_env, "TRIB_S3_ENDPOINT_URL": proxy.url, "PYTHONPATH": str(REPO)}
        comp = subprocess.Popen([*TRIB, "compact", root, "--min-age", "0s", "--min-files", "2", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert proxy.held.wait(60), "the compaction never looked at the staged name"
            # The compaction stands at its first look at the staged name (set-aside under way). Now the
            # same commit is rolled forward by another process: a0's next run, or `trib recover`.
            if compaction == "killed":
                comp.kill()
                comp.communicate()
                proxy.release()
                invoke_trib("files", root, "--all", "--json", check=True)  # a reader finishes the compaction
                invoke_trib("recover", root, "--app-id", "a0", check=True)
            else:
                invoke_trib("recover", root, "--app-id", "a0", check=True)
                proxy.release()
                out, err = comp.communicate(timeout=120)
                assert comp.returncode == 0, err
                assert json.loads(out)["files_out"] == HOURS
        finally:
            proxy.release()
            if comp.poll() is None:
                comp.send_signal(signal.SIGKILL)
                comp.communicate()

    assert _directory_reader(st) == everything  # Hive's count: never the original beside its compacted copy
    assert _trib_reader(st, root) == everything
    invoke_trib("recover", root, "--app-id", "a0", check=True)  # once more, after everything: still nothing
    assert _directory_reader(st) == everything
    report = invoke_trib("verify", root, "--json")
    assert report.returncode == 0, report.stdout + report.stderr


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_on_local_disk_a_writer_stopped_before_its_rename_while_a_compaction_takes_its_file(tmp_path):
    """Local disk renames in one step, and a compaction rolls its inputs forward before it commits, so a
    file is under one name at a time and set-aside never races a roll-forward there: the closest
    interleaving is the writer's own roll-forward stopped after it looked (staged there, final not)
    while a compaction takes its just-committed file, sets it aside and reveals the compacted copy.
    The writer then finds its file moved on: it exits 0 (its commit landed), and every record is once."""
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    everything: Counter = Counter()
    srcs = []
    for k in range(3):
        src = tmp_path / f"src{k}.jsonl"
        rows = [{"id": k * 100 + j, "ts": T0 + (j % HOURS) * 3_600_000 + j} for j in range(20)]
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        everything.update(r["id"] for r in rows)
        srcs.append(src)
    for k in range(2):
        invoke_trib("ingest", str(root), "--source", str(srcs[k]), "--app-id", f"a{k}", "--time-field", "ts",
                    check=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRIB_STOP_AT": "roll_forward.before_rename"}
    w = subprocess.Popen([*TRIB, "ingest", str(root), "--source", str(srcs[2]), "--app-id", "a2", "--time-field",
                          "ts"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not _stopped(w.pid):
            assert w.poll() is None and time.monotonic() < deadline, "the writer never reached its rename"
            time.sleep(0.02)
        done = json.loads(invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", "--json",
                                      check=True).stdout)
        assert done["files_in"] == 3 * HOURS  # the stopped writer's committed, still hidden files too
        while w.poll() is None:  # it stops before each of its renames
            if _stopped(w.pid):
                w.send_signal(signal.SIGCONT)
            time.sleep(0.02)
        out, err = w.communicate()
    finally:
        if w.poll() is None:
            w.kill()
            w.communicate()
    assert w.returncode == 0, err
    st = open_storage(str(root))
    assert _directory_reader(st) == everything and _trib_reader(st, str(root)) == everything
    assert invoke_trib("verify", str(root)).returncode == 0


@pytest.mark.unit
def test_a_reader_whose_state_predates_a_compaction_reads_the_set_aside_originals(tmp_path):
    """A trib read that took the table's state just before a compaction committed, and resolves its
    files after the originals were set aside: the same committed bytes, where they were set aside, not a
    false "committed file is missing" (exit 9)."""
    from tributary_read.table.config import Table
    from tributary_read.table.renames import REPLACED_DIR, finish_renames

    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    everything: Counter = Counter()
    for k in range(3):
        src = tmp_path / f"src{k}.jsonl"
        rows = [{"id": k * 100 + j, "ts": T0 + (j % HOURS) * 3_600_000 + j} for j in range(20)]
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        everything.update(r["id"] for r in rows)
        invoke_trib("ingest", str(root), "--source", str(src), "--app-id", f"a{k}", "--time-field", "ts", check=True)
    table = Table.load(str(root))
    entries = list(table.log.state().files.values())  # the reader's state, read before the compaction
    invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", check=True)
    where = finish_renames(Table.load(str(root)), entries)
    assert sorted(where) == sorted(e.path for e in entries)
    assert all(p.startswith(REPLACED_DIR + "/") for p in where.values())
    st = open_storage(str(root))
    assert Counter(i for p in where.values() for i in _ids(st.read(p))) == everything
