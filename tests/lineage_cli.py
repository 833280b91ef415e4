"""Shared by the tests of ``trib ingest`` and ``trib consumer ack`` events: real processes, the client's file
transport (one event per line), each event checked against the spec's schemas as it is read."""

from __future__ import annotations

import json
import os
import signal
import subprocess

from conftest import REPO, TRIB
from helpers import LAYOUT, PARTITION
from openlineage_schema import event_errors


def env_for(events=None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENLINEAGE", "TRIB_CRASH_AT", "TRIB_STOP_AT"))}
    env["PYTHONPATH"] = str(REPO)
    if events is not None:
        env.update(OPENLINEAGE__TRANSPORT__TYPE="file", OPENLINEAGE__TRANSPORT__LOG_FILE_PATH=str(events),
                   OPENLINEAGE__TRANSPORT__APPEND="true")
    return {**env, **extra}


def trib(tmp_path, *args, env):
    return subprocess.run([*TRIB, *map(str, args)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=60)


def ingest(tmp_path, root, src, env, every=3):
    return trib(tmp_path, "ingest", root, "--source", src, "--app-id", "logs", "--time-field", "ts",
                "--commit-every", every, "--json", env=env)


def term_after_stop(cmd, out, cwd, env) -> int:
    """Run ``cmd`` (``env`` names a ``TRIB_STOP_AT`` point): at its first stop send SIGTERM (pending until it runs
    again), resume it at every stop; its exit status."""
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    termed = False
    while True:
        _, status = os.waitpid(p.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            return os.waitstatus_to_exitcode(status)
        if not termed:
            os.kill(p.pid, signal.SIGTERM)
            termed = True
        os.kill(p.pid, signal.SIGCONT)


def events_of(path) -> list[dict]:
    evs = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    for e in evs:
        assert event_errors(e) == [], event_errors(e)
    return evs


def kept(root) -> list:
    return sorted((root / "_tributary" / "lineage").rglob("*.json"))


def stats(ev, side="inputs"):
    key = "inputStatistics" if side == "inputs" else "outputStatistics"
    s = dict(ev[side][0].get("inputFacets" if side == "inputs" else "outputFacets", {}).get(key, {}))
    return {k: v for k, v in s.items() if not k.startswith("_")}


def new_table(tmp_path):
    """An empty trib table at ``tmp_path/t`` (hourly partitions)."""
    root = tmp_path / "t"
    p = trib(tmp_path, "table", "create", root, "--layout", LAYOUT, "--partition", PARTITION, env=env_for())
    assert p.returncode == 0, p.stderr
    return root
