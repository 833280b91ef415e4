"""OpenLineage events of real ``trib ingest`` processes (issue 31, part 1; work in progress on branch i31).

The client's file transport writes one event per line. A run sends START and COMPLETE with one run id,
the source as input with the records and bytes of the ``--json`` report, the table as output with its
last commit's version; a retry of the same start offset is the same run. A run killed with -9 (before
its first commit, or after one) leaves no terminal event: the next ingest of the app sends it, once,
as FAIL with the commits the dead run made; one stopped by SIGTERM sends ABORT with its commits. A
transport that fails is one warning line and exit 0; the event is kept and sent by the next run. With
nothing configured nothing is sent, kept or imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import TRIB
from helpers import grow_source, make_source
from lineage_cli import env_for, events_of, ingest, kept, new_table, stats, term_after_stop

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
pytest.importorskip("openlineage.client")


def test_an_ingest_sends_start_and_complete_and_a_killed_one_is_ended_by_the_next(tmp_path):
    table = new_table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 7)
    events = tmp_path / "events.jsonl"

    # Killed before its first commit: START only; the retry (same start offset) is the same run.
    p = ingest(tmp_path, table, src, env_for(events, TRIB_CRASH_AT="writer.before_commit"))
    assert p.returncode == -9, p.stderr
    assert [e["eventType"] for e in events_of(events)] == ["START"] and len(kept(table)) == 1
    p = ingest(tmp_path, table, src, env_for(events))
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    evs = events_of(events)
    assert [e["eventType"] for e in evs] == ["START", "FAIL", "START", "COMPLETE"]
    assert len({e["run"]["runId"] for e in evs}) == 1  # every try of offset 0 is one run
    assert "killed" in evs[1]["run"]["facets"]["errorMessage"]["message"]
    assert stats(evs[1], "outputs") == {"rowCount": 0, "size": 0, "fileCount": 0}
    assert "version" not in evs[1]["outputs"][0]["facets"]
    done = evs[3]
    assert done["job"]["name"] == "logs"
    assert (done["inputs"][0]["namespace"], done["inputs"][0]["name"]) == ("file", str(src))
    assert stats(done) == {"rowCount": report["records"], "size": report["consumed_bytes"]} \
        == {"rowCount": 7, "size": src.stat().st_size}
    assert done["outputs"][0]["facets"]["version"]["datasetVersion"] == str(report["commits"])  # a new table
    assert stats(done, "outputs")["rowCount"] == 7
    parts = done["outputs"][0]["outputFacets"]["subset"]["outputCondition"]["partitions"]
    dirs = {f.parent.relative_to(table) for f in table.rglob("part-*")}
    assert len(parts) == len(dirs) and all(set(p["dimensions"]) == {"dt"} for p in parts)
    assert kept(table) == []

    # Killed after its first commit (2 of 5 new records): the next ingest sends its FAIL, with that commit.
    grow_source(src, 7, 5)
    p = ingest(tmp_path, table, src, env_for(events, TRIB_CRASH_AT="ingest.after_commit"), every=2)
    assert p.returncode == -9, p.stderr
    assert [e["eventType"] for e in events_of(events)[4:]] == ["START"]
    p = ingest(tmp_path, table, src, env_for(events), every=2)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    evs = events_of(events)[4:]
    assert [e["eventType"] for e in evs] == ["START", "FAIL", "START", "COMPLETE"]
    assert evs[0]["run"]["runId"] == evs[1]["run"]["runId"] != evs[2]["run"]["runId"] == evs[3]["run"]["runId"]
    dead = evs[1]
    assert dead["outputs"][0]["facets"]["version"]["datasetVersion"] == "4"  # versions 1-3, then its one commit
    assert stats(dead, "outputs")["rowCount"] == 2 and stats(dead)["rowCount"] == 2
    assert stats(dead)["size"] + report["consumed_bytes"] == sum(len(line) for line in
                                                                 src.read_bytes().splitlines(True)[7:])
    assert report["start_offset"] == 9 and stats(evs[3]) == {"rowCount": 3, "size": report["consumed_bytes"]}

    # Nothing new: COMPLETE with the table as output, zero statistics, no version; the FAIL is not sent again.
    p = ingest(tmp_path, table, src, env_for(events))
    assert p.returncode == 0, p.stderr
    evs = events_of(events)[8:]
    assert [e["eventType"] for e in evs] == ["START", "COMPLETE"]
    assert stats(evs[1], "outputs") == {"rowCount": 0, "size": 0, "fileCount": 0}
    assert "version" not in evs[1]["outputs"][0]["facets"] and kept(table) == []


def test_a_failing_transport_is_one_warning_and_the_next_run_sends_the_kept_event(tmp_path):
    table = new_table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 4)
    down = env_for(OPENLINEAGE__TRANSPORT__TYPE="http", OPENLINEAGE__TRANSPORT__URL="http://127.0.0.1:9",
                OPENLINEAGE__TRANSPORT__RETRY='{"total": 0, "connect": 0, "read": 0}')
    p = ingest(tmp_path, table, src, down)
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and warnings[0].startswith("trib: warning: lineage: START"), p.stderr
    assert len(kept(table)) == 1  # the COMPLETE, not sent

    events = tmp_path / "events.jsonl"
    p = ingest(tmp_path, table, src, env_for(events))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    evs = events_of(events)
    assert [e["eventType"] for e in evs] == ["COMPLETE", "START", "COMPLETE"]
    assert stats(evs[0]) == {"rowCount": 4, "size": src.stat().st_size} and kept(table) == []


def test_nothing_configured_sends_keeps_and_imports_nothing(tmp_path):
    """One process runs ingest, plans and acks through the CLI's entry point, then looks at sys.modules."""
    table = new_table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 3)
    code = f"""
import json, sys
from tributary_read.cli.main import cli
def run(*args):
    try:
        cli(["-q", *args], prog_name="trib")
    except SystemExit as e:
        assert not e.code, (args, e.code)
run("ingest", {str(table)!r}, "--source", {str(src)!r}, "--app-id", "logs", "--time-field", "ts")
run("files", {str(table)!r}, "--consumer", "c", "--json")
"""
    code += f"""
import io, contextlib
out = io.StringIO()
with contextlib.redirect_stdout(out):
    run("files", {str(table)!r}, "--consumer", "c", "--json")
run("consumer", "ack", {str(table)!r}, "c", json.loads(out.getvalue())["plan_id"])
print(sorted(m for m in sys.modules if m.split(".")[0] == "openlineage"), file=sys.stderr)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                       env=env_for(HOME=str(tmp_path)))
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines()[-1] == "[]", p.stderr
    assert not (table / "_tributary" / "lineage").exists()


def test_an_ingest_stopped_by_sigterm_sends_abort_with_the_commits_it_made(tmp_path):
    """Paused right after its first commit (``TRIB_STOP_AT``), sent SIGTERM, resumed: it stops at a record
    boundary, commits what it read, and its terminal event is ABORT with its commits as output."""
    import signal

    table, src, events = new_table(tmp_path), make_source(tmp_path / "s.jsonl", 50), tmp_path / "events.jsonl"
    with open(tmp_path / "out.json", "w") as out:
        code = term_after_stop([*TRIB, "ingest", str(table), "--source", str(src), "--app-id", "logs",
                                "--time-field", "ts", "--commit-every", "2", "--json"], out, tmp_path,
                               env_for(events, TRIB_STOP_AT="ingest.after_commit"))
    assert code == 128 + signal.SIGTERM
    report = json.loads((tmp_path / "out.json").read_text())
    # It stops at the first record boundary after the handler ran: usually right after that commit.
    assert report["stopped_by"] == "SIGTERM" and 2 <= report["records"] < 50 and report["commits"] >= 1
    evs = events_of(events)
    assert [e["eventType"] for e in evs] == ["START", "ABORT"] and "errorMessage" not in evs[1]["run"]["facets"]
    assert evs[1]["outputs"][0]["facets"]["version"]["datasetVersion"] == str(report["commits"])  # a new table
    assert stats(evs[1]) == {"rowCount": report["records"], "size": report["consumed_bytes"]} and kept(table) == []
