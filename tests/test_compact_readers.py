"""Issue 28's property: ingests, compactions and cleans interleaved with the hourly reads of every
reader, in real time, on local storage and on S3; over consecutive runs each reader gets every
record exactly once.

The "hour" is PERIOD (2 s): the mtime reader reads each aligned window once it has ended, and the
table compacts by the same period, as docs/compaction.md tells users to set it. Readers:

* a durable consumer (plan, read, ack);
* a version-range reader (``--since-version`` its last ``until_version``);
* a commit-time window reader (consecutive closed windows of commit time);
* an mtime window reader (consecutive aligned windows of file mtime).
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections import Counter

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION

from tributary_read.io.storage import open_storage

pytestmark = pytest.mark.integration

PERIOD_MS = 2_000
T0 = 1_592_956_800_000
HOURS = 3


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


class Readers:
    def __init__(self, root: str):
        self.root = root
        self.st = open_storage(root)
        self.got: dict[str, Counter] = {k: Counter() for k in ("consumer", "versions", "commit_time", "mtime")}
        self.version = 0
        self.commit_from = 0  # the next commit-time window starts here
        self.mtime_from: int | None = None  # the next aligned mtime window starts here

    def _ids(self, plan: dict) -> Counter:
        out: Counter = Counter()
        for f in plan["files"]:
            out.update(json.loads(line)["id"] for line in self.st.read(f["path"]).decode().splitlines() if line)
        return out

    def _files(self, *args: str) -> dict:
        p = invoke_trib("files", self.root, *args, "--json")
        assert p.returncode == 0, (args, p.stderr)
        return json.loads(p.stdout)

    def run(self, now_ms: int, final: bool = False) -> None:
        plan = self._files("--consumer", "c")
        self.got["consumer"] += self._ids(plan)
        invoke_trib("consumer", "ack", self.root, "c", plan["plan_id"], check=True)

        ranged = self._files("--mode", "manifest", "--since-version", str(self.version))
        self.got["versions"] += self._ids(ranged)
        self.version = ranged["until_version"] if "until_version" in ranged else ranged["plan"]["until_version"]

        # Commit times: a closed window up to a moment ago (a commit becomes visible just after its time).
        end = now_ms - 500 if not final else now_ms
        if end > self.commit_from:
            w = self._files("--mode", "manifest", "--start", _iso(self.commit_from), "--end", _iso(end - 1))
            self.got["commit_time"] += self._ids(w)
            self.commit_from = end

        # mtime: every aligned window that has ended (and a moment more: a write may still be landing).
        if self.mtime_from is None:
            self.mtime_from = now_ms - now_ms % PERIOD_MS - 60 * PERIOD_MS  # well before the first file
        while self.mtime_from + PERIOD_MS <= now_ms - 300:
            w = self._files("--mode", "mtime", "--start", _iso(self.mtime_from),
                            "--end", _iso(self.mtime_from + PERIOD_MS - 1))
            self.got["mtime"] += self._ids(w)
            self.mtime_from += PERIOD_MS


def _ingest(root: str, tmp_path, n_ids: list[int]) -> Counter:
    k = len(list(tmp_path.glob("src*.jsonl")))
    src = tmp_path / f"src{k}.jsonl"
    n = random.Random(k).randint(5, 40)
    ids = list(range(k * 1000, k * 1000 + n))
    src.write_text("".join(json.dumps({"id": i, "ts": T0 + (i % HOURS) * 3_600_000 + i}) + "\n" for i in ids))
    invoke_trib("ingest", root, "--source", str(src), "--app-id", f"a{k}", "--time-field", "ts", check=True)
    n_ids.extend(ids)
    return Counter(ids)


@pytest.mark.parametrize("where,seed", [("local", 1), ("local", 2), ("s3", 1)])
def test_every_reader_gets_every_record_once_across_ingests_compactions_and_cleans(where, seed, tmp_path,
                                                                                  request):
    rng = random.Random(seed)
    root = str(tmp_path / "t") if where == "local" else request.getfixturevalue("s3_root")
    invoke_trib("table", "create", root, "--layout", LAYOUT, "--partition", PARTITION, check=True)
    invoke_trib("table", "set", root, "--compact", f"period={PERIOD_MS}ms", "--compact", "min_files=2", check=True)
    readers = Readers(root)
    ids: list[int] = []
    compactions = 0
    # 40 steps, then on until 4 compactions have found work: one compacts only a closed period that holds
    # two files, and on a slow S3 server the random steps can spread the ingests one to a period.
    for step in itertools.count():
        if step >= 40 and compactions >= 4:
            break
        assert step < 120, f"{compactions} compactions in 120 steps"
        if step >= 40:  # still short of compactions that found work: give the next one two files of a period
            _ingest(root, tmp_path, ids)
            _ingest(root, tmp_path, ids)
            time.sleep((PERIOD_MS + 600) / 1000)  # their period closes
            p = invoke_trib("compact", root, "--min-age", "0s", "--json")
            assert p.returncode == 0, p.stderr
            compactions += json.loads(p.stdout)["version"] is not None
            continue
        op = 0.6 if step % 6 == 5 else rng.random()  # a compaction at least every sixth step
        if op < 0.5:
            _ingest(root, tmp_path, ids)
        elif op < 0.75:
            p = invoke_trib("compact", root, "--min-age", "0s", "--json")
            assert p.returncode == 0, p.stderr
            compactions += json.loads(p.stdout)["version"] is not None
        elif op < 0.85:
            invoke_trib("clean", root, "--older-than", "0s", check=True)
        else:
            readers.run(int(time.time() * 1000))
        time.sleep(rng.uniform(0.0, 0.3))
    time.sleep((PERIOD_MS + 600) / 1000)  # the last period ends: everything is readable by every reader
    readers.run(int(time.time() * 1000), final=True)
    everything = Counter(ids)
    for name, got in readers.got.items():
        twice = {i: n for i, n in got.items() if n > 1}
        lost = sorted(set(everything) - set(got))
        assert got == everything, f"{name}: {len(twice)} records twice {list(twice)[:5]}, {len(lost)} lost {lost[:5]}"
    assert invoke_trib("verify", root).returncode == 0
