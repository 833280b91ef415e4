"""A real Prometheus scrapes ``trib metrics --serve`` and answers a PromQL query with the exact pending count.

Debian's prometheus package (the binary, not the service), on 127.0.0.1 with a temporary TSDB and a
1 s scrape interval; the first sample arrives about 6 s after start. The series' `job` is the scrape
config's; the ETL job's label is `etl_job` (a series' own `job` would be renamed `exported_job`).
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
    # An ETL input's consumer: owned by the job "hourly", which also keeps a run book in the table.
    from tributary_read.etl.runs import recorded
    from tributary_read.read.consumer import Consumer
    from tributary_read.table.config import Table

    c = Consumer(str(root), "c")
    c.ack(c.plan(mode="manifest", owner={"job": "hourly", "output": "file:///elsewhere"}).plan_id)

    class Report:
        already_committed, version = False, None  # no restate commit to count

    with recorded(Table.load(str(root)), "hourly", 3_600_000) as e:
        e.done(Report())
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
        # `job` is Prometheus's own (the scrape config's job); the ETL job is `etl_job`, never renamed.
        for q, value in (('trib_consumer_pending_files{etl_job="hourly"}', expected),
                         ('trib_etl_runs_total{etl_job="hourly", outcome="success"}', 1.0)):
            result = _query(pport, q)
            assert len(result) == 1, (q, result)
            assert float(result[0]["value"][1]) == value
            labels = result[0]["metric"]
            assert labels["job"] == "trib" and labels["etl_job"] == "hourly" and "exported_job" not in labels, labels
    finally:
        for p in (prom, serve):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in (prom, serve):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert serve.returncode == 143, "SIGTERM did not end --serve within 20 s"  # with trib's one line
    assert serve.stderr is not None and serve.stderr.read().splitlines()[-1] == "trib: terminated"
