"""Every `trib` command in README.md and docs/ runs as shown (issue 26, item 3), and every Python snippet names only what it defines.

tests/test_docs_commands.py owns the question "which commands do the docs
show" (and checks their flags against click); this module runs them, in this
process (``invoke_trib``), on a scratch copy of the paths they name, because a
command whose flags parse can still fail on the table the doc just built:
a doc is a walkthrough, and a reader copies it line by line.

* A fenced block runs in tests/test_docs_examples.py, whole, in page order and
  with the set-up its markers give; every page is converted there.
* An inline span is a reference (`trib verify ROOT` in a sentence): each one
  runs alone on a fresh copy of one prepared table, its placeholders (ROOT,
  NAME, P, FILE, PLAN_ID ...) filled with that table's values.
* A synopsis runs in its shortest form: ``[optional]`` parts dropped, the first
  of each ``(a | b)`` and ``a|b``.

Each command exits 0 unless a doc says, in words :data:`SHOWN_FAILING` quotes,
that it fails. What is not run has its reason (:data:`NOT_RUN`, or a mention
or a part left to the reader, decided per command), and the coverage test
fails on a command that is neither run nor given a reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import click
import pytest

from conftest import invoke_trib
from test_docs_commands import COMMANDS, DOCS, REPO, _resolve, _tokens, is_inline
from test_docs_examples import CONVERTED

pytestmark = pytest.mark.unit

#: The commands not run: (pattern over the command's shortest form, reason). The first match names the reason.
NOT_RUN: list[tuple[str, str]] = [
    (r"\bs3://|\bhdfs://", "remote storage (S3, HDFS): the suite's s3 tests run those paths"),
    (r"--kafka\b", "needs a Kafka broker (tests/test_kafka_*.py)"),
    (r"--follow\b", "runs until SIGTERM (tests/test_spool_faults.py, tests/test_kafka_*.py)"),
    (r"--metastore\b|--hive-table\b|--policy metastore|^trib partitions sync\b",
     "needs a Hive metastore (tests/test_partitions_sync.py, test_metastore.py)"),
    (r"^trib hive\b", "starts Hive, or needs its metastore (tests/test_hive_services.py)"),
    (r"^trib spark\b", "starts a Spark Connect server (tests/test_spark_connect.py)"),
    (r"^trib (?:-o \S+ )*(etl|sql|demo|doctor)\b", "runs Spark (tests/test_etl_*.py, test_sql_cli.py, test_demo.py)"),
    (r"^trib udfs\b", "builds the UDF jar with javac, a JVM (tests/test_udfs*.py)"),
    (r"^trib iceberg sync ROOT\b", "ROOT is a JSON-lines table here; docs/iceberg.md's walkthrough syncs a Parquet one "
     "(tests/test_iceberg.py)"),
    (r"^trib table set ROOT --iceberg\b", "ROOT is a JSON-lines table here, which no mirror takes; docs/iceberg.md's "
     "walkthrough sets one on a Parquet table (tests/test_iceberg_auto.py)"),
    (r"postgresql://", "needs a PostgreSQL server (tests/test_iceberg_auto.py starts one)"),
    (r"^trib iceberg sync \S+ --consumer\b", "a landing zone of Parquet files other tools write (tests/test_iceberg_landing.py "
     "runs one)"),
    (r"--(?:iceberg-)?partition-by\b", "a Parquet table with a TIMESTAMP time column, as an ETL job writes it "
     "(tests/test_iceberg_partition_by.py)"),
    (r"--catalog thrift://", "needs a Hive metastore (tests/test_iceberg_hive.py mirrors into the session's)"),
    (r"^trib table set ROOT$", "a synopsis whose options are each optional, though set needs one"),
    (r"^trib dead-letters replay ROOT$", "a mention: the sentence adds ingest's time options in words"),
]
#: Reasons decided per command rather than by pattern.
MENTION = "a mention in prose: names the command without the operands it needs"
LEFT_TO_READER = "leaves a part to the reader (…, <…>, or a placeholder with no scratch value)"
#: Commands a doc shows failing: command as shown -> (exit code, the doc's words saying so).
SHOWN_FAILING = {
    "trib files ROOT": (3, "A `trib files ROOT` with none of them is refused (exit 3"),
    "trib consumer reset ROOT NAME": (3, "is refused, exit 3, with the list of targets"),
}

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
#: What the docs read but never build, by the name they give it: made when a command first names it
#: (any other path a command reads must come from an earlier command, so a typo in one fails).
ASSUMED = {"ROOT": "table", "/data/raw": "table", "raw": "table", "/data/events": "table",
           "/data/logs": "plain", "/mnt/flume": "plain", "events.jsonl": "source", "/var/log/app": "spool"}
#: The placeholders a scratch world fills (:meth:`World.value`); a command with another is not run.
FILLED = frozenset({"ROOT", "TABLE", "NAME", "C", "PLAN_ID", "FILE", "P", "ID", "V", "N", "N-1", "T", "L"})
_PLACEHOLDER = re.compile(r"^(?!UTC$)(?:[A-Z][A-Z0-9_]*(?:-1)?|[A-Z]+\.toml)$")
_REDIRECT = re.compile(r"\s>\s*(\S+)\s*$")
_JQ = re.compile(r"\$\(jq -r \.(\w+) (\S+)\)")


# -- which commands run, in which form --------------------------------------------------------------


def shortest(text: str) -> str:
    """A synopsis in its shortest form; a plain command unchanged.

    ``[…]`` groups go (innermost first), a ``( a | b )`` group becomes ``a``
    and ``a|b`` becomes ``a``: what a reader of the synopsis types first. A
    shell pipe (`` | xargs``) is left for :func:`_tokens` to cut.
    """
    text = text.replace("\n", " ")
    prev = None
    while prev != text:
        prev, text = text, re.sub(r"\s*\[[^\[\]]*\]", "", text)
    text = re.sub(r"\(\s*([^()|]*?)\s*\|[^()]*\)", r"\1", text)
    text = re.sub(r"(?<=\s)([^\s|'\"]+)\|[^\s'\"]+", r"\1", text)
    return re.sub(r"\s+", " ", text).strip()


def _command(words: list[str]) -> tuple[click.Command, dict]:
    """The command ``words`` (after ``trib``) name, and the values click parses for it."""
    cmd, rest = _resolve(words)
    return cmd, cmd.make_context(cmd.name or "", list(rest), resilient_parsing=True).params


def why_not_run(text: str) -> str | None:
    """The reason a shown command is not run, or None: it runs."""
    short = shortest(text)
    for pattern, reason in NOT_RUN:
        if re.search(pattern, short):
            return reason
    words = _tokens(short)[1:]
    if any(w in ("…", "...") for w in words) or re.search(r"<[A-Za-z][^<>=]*>", short):
        return LEFT_TO_READER
    cmd, given = _command(words)
    if isinstance(cmd, click.Group):
        return None if words == ["--version"] else MENTION
    if any(isinstance(p, click.Argument) and p.required and given.get(p.name) is None for p in cmd.params):
        return MENTION
    if any(_PLACEHOLDER.match(w) and w not in FILLED for w in words):
        return LEFT_TO_READER
    return None


def expected_exit(text: str) -> int:
    return SHOWN_FAILING.get(text.replace("\n", " "), (0, ""))[0]


RUN = [(w, t) for w, t in COMMANDS if why_not_run(t) is None]
SKIPPED = [(w, t, why_not_run(t)) for w, t in COMMANDS if why_not_run(t) is not None]
#: Fenced blocks run in tests/test_docs_examples.py, whole and with their set-up; this module runs the inline ones.
assert not [p for p in DOCS if p.relative_to(REPO).as_posix() not in CONVERTED], "a page test_docs_examples skips"
REFERENCES = [(w, t) for w, t in RUN if is_inline(w)]


# -- the scratch world ------------------------------------------------------------------------------


class World:
    """One scratch directory where the docs' paths live, and the values their placeholders stand for.

    A doc's absolute paths move under it (``/data/raw`` is ``<cwd>/data/raw``);
    what :data:`ASSUMED` names is made there when a command first names it: a
    copy of :func:`prepared_table`, a plain directory of logs, or a source.
    """

    def __init__(self, cwd: Path, table: Path, facts: dict):
        self.cwd, self.table, self.facts = cwd, table, facts

    def value(self, words: list[str], i: int) -> str:
        """The scratch value of placeholder ``words[i]`` (the flag before it decides P, T and FILE)."""
        word, flag, f = words[i], words[i - 1], self.facts
        if flag == "--partition":
            return PARTITION if words[1:3] == ["table", "create"] else f["partition"]
        if flag == "--period":
            return "1h"
        if flag == "--source":
            return "events.jsonl"
        if word == "T":
            return "2024-01-01T05:00:00Z"
        return {"ROOT": "ROOT", "TABLE": "ROOT", "NAME": f["consumer"], "C": f["consumer"],
                "PLAN_ID": f["plan_id"], "FILE": f["file"], "ID": f["app_id"], "L": LAYOUT,
                "V": str(f["version"] - 1), "N": str(f["version"]), "N-1": str(f["version"] - 1)}[word]

    def args(self, text: str) -> tuple[list[str], str | None]:
        """The command's arguments in this world, and the file its stdout is redirected to (``> plan.json``)."""
        out = _REDIRECT.search(text)
        text = _JQ.sub(lambda m: json.loads((self.cwd / m.group(2)).read_text())[m.group(1)], shortest(text))
        words = _tokens(text)
        words = [self.value(words, i) if _PLACEHOLDER.match(w) else w for i, w in enumerate(words)]
        for w in words:
            if w in ASSUMED and words[1:3] != ["table", "create"]:
                self.make(self.cwd / w.lstrip("/"), ASSUMED[w])
        words = [str(self.cwd / w.lstrip("/")) if w.startswith("/") and len(w) > 1 else w for w in words]
        return words[1:], out.group(1) if out else None

    def make(self, p: Path, kind: str) -> None:
        """A path the doc reads but never builds, unless it is there already."""
        if p.exists():
            return
        if kind == "table":
            shutil.copytree(self.table, p, symlinks=True)
        elif kind == "plain":
            for hour in ("2020_06_24/00", "2020_06_24/01"):
                put_log(p / hour / "a.log", 1592958600)  # 2020-06-24T00:30Z
        elif kind == "spool":  # a rotating log directory: a rotated file and the live one
            p.mkdir(parents=True)
            write_source(p / "app.log.1", time.time() - 7200, n=3)
            write_source(p / "app.log", time.time() - 3600, n=2)
        else:
            write_source(p, time.time() - 7200, n=3)

    def run(self, text: str):
        args, out = self.args(text)
        proc = invoke_trib(*args, cwd=self.cwd)
        if out:
            (self.cwd / out).write_text(proc.stdout)
        return proc


def put_log(p: Path, mtime_s: float) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("x\n")
    os.utime(p, (mtime_s, mtime_s))


def write_source(path: Path, start_s: float, n: int, late_field: int = 0) -> Path:
    """``n`` jsonl events an hour apart from ``start_s``, with the README's fields and the time in both
    ``ts`` and ``time``; then ``late_field`` events whose time is in ``ts`` only."""
    def event(i: int, *fields: str) -> str:
        ms = int((start_s + 3600 * i) * 1000)
        return json.dumps({**{f: ms for f in fields}, "user_id": f"u{i}", "action": "click"})
    lines = [event(i, "ts", "time") for i in range(n)] + [event(n + i, "ts") for i in range(late_field)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _ok(proc, *args) -> dict:
    assert proc.returncode == 0, (args, proc.stderr)
    return json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}


@pytest.fixture(scope="module")
def prepared_table(tmp_path_factory) -> tuple[Path, dict]:
    """The table a doc's ``ROOT`` stands for, with something for every command to act on.

    Committed files in three hours; a success-file partition commit (the
    policy that needs no metastore); one dead letter, filed by ``--time-field
    time`` and mended by the replay's ``--time-field ts``; a consumer that
    acked a first plan and holds a pending second one. Built once through trib
    itself; each command gets a copy, so a reference that deletes or resets
    cannot change what the next one sees.
    """
    base = tmp_path_factory.mktemp("prepared")
    root = base / "ROOT"
    app, consumer = "events", "etl"
    trib = lambda *a: _ok(invoke_trib(*map(str, a), cwd=base), *a)  # noqa: E731
    trib("table", "create", root, "--layout", LAYOUT, "--partition", PARTITION, "--format", "jsonl")
    trib("partitions", "configure", root, "--policy", "success-file")
    start = time.time() - 5 * 3600
    src = write_source(base / "first.jsonl", start, n=2, late_field=1)
    trib("ingest", root, "--source", src, "--app-id", app, "--time-field", "time", "--max-bad-fraction", "0.5")
    first = trib("files", root, "--consumer", consumer, "--min-age", "0s", "--json")
    trib("consumer", "ack", root, consumer, first["plan_id"])
    src = write_source(base / "second.jsonl", start + 3 * 3600, n=1)
    trib("ingest", root, "--source", src, "--app-id", app + "-late", "--time-field", "ts")
    pending = trib("files", root, "--consumer", consumer, "--min-age", "0s", "--json")
    facts = {"consumer": consumer, "app_id": app, "plan_id": pending["plan_id"],
             "file": pending["files"][0]["path"], "partition": first["files"][0]["path"].rpartition("/")[0],
             "version": trib("table", "show", root, "--json")["latest_version"]}
    return root, facts


# -- the tests --------------------------------------------------------------------------------------


def test_every_shown_command_is_run_or_has_a_reason():
    """A new doc command is run unless a reason names it: none goes untested silently."""
    assert {r for _, _, r in SKIPPED} <= {r for _, r in NOT_RUN} | {MENTION, LEFT_TO_READER}
    assert len(RUN) + len(SKIPPED) == len(COMMANDS)
    assert len(RUN) >= 90, len(RUN)  # a floor: a broken classifier would otherwise run nothing, green


def test_shortest_forms():
    assert shortest("trib clean ROOT [--older-than 24h] [--dry-run]") == "trib clean ROOT"
    assert shortest("trib x ROOT (--a 1 | --b [--c] | --d) [-0] …") == "trib x ROOT --a 1 …"
    assert shortest("trib table set ROOT --tracking manifest|listing|both") == "trib table set ROOT --tracking manifest"
    assert shortest("trib files ROOT --all -0 | xargs -0 …") == "trib files ROOT --all -0 | xargs -0 …"
    assert why_not_run("trib files ROOT --start T …") == LEFT_TO_READER
    assert why_not_run("trib files --partitions <one day>") == LEFT_TO_READER
    assert why_not_run("trib files --all") == MENTION


def test_the_failures_shown_are_in_the_docs():
    """An expected failure is one a doc states, in its own words."""
    text = " ".join(" ".join(d.read_text(encoding="utf-8").split()) for d in DOCS)
    for command, (_, words) in SHOWN_FAILING.items():
        assert words in text and any(t.replace("\n", " ") == command for _, t in RUN), command


@pytest.mark.parametrize("where,text", REFERENCES, ids=[w for w, _ in REFERENCES])
def test_each_reference_runs_on_a_table(where, text, tmp_path, prepared_table):
    proc = World(tmp_path, *prepared_table).run(text)
    assert proc.returncode == expected_exit(text), (where, proc.stderr)


# -- the Python snippets: each compiles and names only what it defines --------------------------------

#: Names a snippet may use without defining, and why: what the reader already has at that point.
READER_HAS = {
    "spark": "the reader's SparkSession, as every Spark example assumes one",
    "df": "the DataFrame the reader wants to write",
    "start_ms": "a window's bounds, epoch ms", "end_ms": "a window's bounds, epoch ms",
    "t_ms": "the run's schedule time, epoch ms", "schedule_ms": "the run's schedule time, epoch ms",
    "T": "the run's schedule time, epoch ms",
}
_PYTHON = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
SNIPPETS = [(f"{doc.name}:{doc.read_text(encoding='utf-8')[:m.start()].count(chr(10)) + 1}", m.group(1))
            for doc in DOCS for m in _PYTHON.finditer(doc.read_text(encoding="utf-8"))]


def _flakes(source: str, where: str) -> list[str]:
    """pyflakes' findings for a snippet (undefined names, unused imports ...), given what the reader has."""
    import ast

    from pyflakes.checker import Checker

    checker = Checker(ast.parse(source, where), where, builtins=set(READER_HAS))
    return [f"{where}+{m.lineno}: {m.message % m.message_args}" for m in checker.messages]  # fence line + n


def test_the_docs_show_python_snippets():
    assert len(SNIPPETS) >= 8


def test_the_snippet_check_sees_an_undefined_name():
    """docs/spark.md once read ``window=window`` with no window defined (issue 26)."""
    assert _flakes("fs = resolve('/data/raw', window=window)\n", "x") == [
        "x+1: undefined name 'resolve'", "x+1: undefined name 'window'"]


@pytest.mark.parametrize("where,source", SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_each_python_snippet_compiles_and_names_only_what_it_defines(where, source):
    assert _flakes(source, where) == []
