"""A real Prometheus scrapes ``trib metrics --serve`` and answers a PromQL query with the exact pending count.

Debian's prometheus package (the binary, not the service), on 127.0.0.1 with a temporary TSDB and a
1 s scrape interval; the first sample arrives about 6 s after start.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import TRIB, _free_port, run_trib
from helpers import LAYOUT, PARTITION, make_source

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180),
              pytest.mark.skipif(not shutil.which("prometheus"), reason="needs Debian's prometheus package")]


def _query(port: int, q: str):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


def test_prometheus_scrapes_the_exact_pending_count(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--tracking", "manifest",
             check=True)
    run_trib("ingest", str(root), "--source", str(make_source(tmp_path / "a.jsonl", 20, hours=1)), "--app-id", "a",
             "--time-field", "ts", check=True)
    plan = json.loads(run_trib("files", str(root), "--consumer", "c", "--mode", "manifest", "--json",
                               check=True).stdout)
    run_trib("consumer", "ack", str(root), "c", plan["plan_id"], check=True)
    for i in range(2):  # two commits the consumer has not read
        run_trib("ingest", str(root), "--source", str(make_source(tmp_path / f"b{i}.jsonl", 7, seed=i + 2, hours=1)),
                 "--app-id", f"b{i}", "--time-field", "ts", check=True)
    mport, pport = _free_port(), _free_port()
    serve = subprocess.Popen([*TRIB, "metrics", str(root), "--serve", f"127.0.0.1:{mport}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True)
    (tmp_path / "prom.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: trib\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{mport}']\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prom.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{pport}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        text = None
        while time.monotonic() < deadline and text is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                time.sleep(0.2)
        assert text is not None, serve.stderr.read() if serve.poll() is not None else "no /metrics"
        line = next(ln for ln in text.splitlines() if ln.startswith("trib_consumer_pending_files{"))
        from tributary_read.table.config import Table

        log = Table.load(str(root)).log
        expected = float(sum(len(log.read_commit(v).new_data) for v in (2, 3)))  # the unread commits' files
        assert float(line.rsplit(" ", 1)[1]) == expected > 0
        result = []
        while time.monotonic() < deadline and not result:
            try:
                result = _query(pport, 'trib_consumer_pending_files{consumer="c"}')
            except OSError:
                pass
            time.sleep(0.5)
        assert result, "Prometheus returned no sample"
        assert float(result[0]["value"][1]) == expected
        assert result[0]["metric"]["table"] == f"file://{root}"
    finally:
        for p in (prom, serve):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in (prom, serve):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
    assert serve.returncode == 143  # SIGTERM ends --serve with trib's one line
