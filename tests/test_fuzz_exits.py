"""Issue 25, item 7: no exit 1 ("unexpected") for anything the user can fix.

Every duration, instant, count and path option of the CLI, every job-file key
and every table.json key gets edge values (huge, negative, fractional, empty,
wrong type, year 0 and 10000) plus seeded random spellings. Each must end in
its error class's exit (2 usage, 3 bad input, 4 no table, 6 a corrupt
table.json) with one stderr line and no traceback, or succeed. In-process
(click's CliRunner) and without Spark, so the whole fuzz takes seconds.
"""

from __future__ import annotations

import json
import random
import textwrap

import pytest
from conftest import invoke_trib

from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.unit

#: The issue's known exit-1 cases come first; then the edges every kind of value has.
EDGES = ["99999999999d", "9999-12-31T23:00:00Z", "99999999999999d", "99999999999999999999", "-1", "-1h", "1.9ms",
         "0.5", "1.5", "", " ", "0", "nan", "inf", "-inf", "1e400", "1e3h", "0000-01-01T00:00:00Z",
         "10000-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z", "2020-03-29T02:30:00",
         "x", "true", "[]", "{}", "\u0661h", "1h" * 40, "9" * 400, "-9223372036854775809", "18446744073709551616"]


def _random_values(seed: int, n: int) -> list[str]:
    rnd = random.Random(seed)
    alphabet = "0123456789.-+:TZhmsdw xe"
    return ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 24))) for _ in range(n)]


VALUES = EDGES + _random_values(25, 20)
LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    Table.create(str(d / "t"), TableConfig(Layout(LAYOUT, "dt={yyyy}{MM}{dd}{HH}", "Europe/Berlin"),
                                           format="jsonl"))
    (d / "land").mkdir()
    (d / "q.sql").write_text("SELECT value FROM v\n")
    return d


def _assert_user_exit(p, argv, allowed=(0, 2, 3, 4)):
    shown = " ".join(repr(a) for a in argv)
    assert p.returncode in allowed, f"trib {shown}: exit {p.returncode}: {p.stderr}"
    assert "Traceback" not in p.stderr and "trib: unexpected" not in p.stderr, f"trib {shown}: {p.stderr}"
    if p.returncode:  # one error line, the last (progress lines may come before it)
        errors = [line for line in p.stderr.splitlines() if line.startswith("trib: error")]
        assert len(errors) == 1 and p.stderr.strip().splitlines()[-1] == errors[0], f"trib {shown}: {p.stderr}"


#: (argv with {v} for the value, how the error names it)
OPTIONS = [
    (["files", "{t}", "--schedule-time", "2024-01-01T05:00:00Z", "--period", "{v}"], "--period"),
    (["files", "{t}", "--schedule-time", "2024-01-01T05:00:00Z", "--period", "1h", "--lag", "{v}"], "--lag"),
    (["files", "{t}", "--schedule-time", "2024-01-01T05:00:00Z", "--period", "1h", "--window-form", "sliding",
      "--window", "{v}"], "--window"),
    (["files", "{t}", "--schedule-time", "{v}", "--period", "1h"], "--schedule-time"),
    (["files", "{t}", "--start", "{v}"], "--start"),
    (["files", "{t}", "--end", "{v}"], "--end"),
    (["files", "{t}", "--since-version", "{v}"], "--since-version"),
    (["files", "{t}", "--partitions", "{v}"], "--partitions"),
    (["files", "{land}", "--layout", LAYOUT, "--timezone", "{v}", "--all"], "--timezone"),
    (["files", "{t}", "--consumer", "c", "--max-files", "{v}", "--state-dir", "{state}"], "--max-files"),
    (["files", "{t}", "--consumer", "c", "--lookback", "{v}", "--state-dir", "{state}"], "--lookback"),
    (["files", "{t}", "--consumer", "c", "--initial-position", "{v}", "--state-dir", "{state}"],
     "--initial-position"),
    (["files", "{v}", "--all"], "ROOT"),
    (["expire", "{t}", "--older-than", "{v}", "--dry-run"], "--older-than"),
    (["expire", "{t}", "--older-than", "1d", "--grace", "{v}", "--dry-run"], "--grace"),
    (["clean", "{t}", "--older-than", "{v}", "--dry-run"], "--older-than"),
    (["clean", "{t}", "--log-retention", "{v}", "--dry-run"], "--log-retention"),
    (["log", "{t}", "--limit", "{v}"], "--limit"),
    (["report", "lateness", "{t}", "--since", "{v}", "--json"], "--since"),
    (["report", "lateness", "{t}", "--lag", "{v}", "--json"], "--lag"),
]


@pytest.mark.parametrize("argv,name", OPTIONS, ids=[o[1] + "-" + o[0][0] for o in OPTIONS])
def test_every_option_value_is_the_users_to_fix(base, argv, name):
    for i, v in enumerate(VALUES):
        args = [a.replace("{t}", str(base / "t")).replace("{land}", str(base / "land"))
                .replace("{state}", str(base / "state" / f"{name}{i}")).replace("{v}", v) for a in argv]
        p = invoke_trib(*args)
        # a path the file system cannot hold (ENAMETOOLONG) is the storage's answer: exit 7, one line
        _assert_user_exit(p, args, (0, 2, 3, 4, 7) if name == "ROOT" else (0, 2, 3, 4))
        if p.returncode == 3 and name != "ROOT":
            assert name in p.stderr or v.strip() in p.stderr, f"{args}: {p.stderr}"


def _job(base, job_keys: dict, input_keys: dict, output_keys: dict) -> str:
    def toml(defaults, over):
        return "\n".join(f"{k} = {v}" for k, v in {**defaults, **over}.items())

    job = toml({"name": '"f"', "sql": '"q.sql"', "period": '"1h"'}, job_keys)
    inp = toml({"table": '"land"', "view": '"v"', "mode": '"mtime"', "layout": json.dumps(LAYOUT),
                "format": '"text"'}, input_keys)
    out = toml({"table": '"t"', "time_column": '"ts"'}, output_keys)
    (base / "job.toml").write_text(f"[job]\n{job}\n\n[[inputs]]\n{inp}\n\n[output]\n{out}\n")
    return str(base / "job.toml")


def _toml_values() -> list[str]:
    """Each value as a TOML string, and as TOML's other types where the spelling is one."""
    out = [json.dumps(v) for v in VALUES]
    out += ["99999999999", "-1", "1.5", "true", "[1]", "{ a = 1 }", "0", "nan", "inf", "1979-05-27T07:32:00",
            "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"]
    return out


JOB_KEYS = [("job", "period"), ("job", "timezone"), ("job", "count_inputs"), ("job", "name"),
            ("input", "lag"), ("input", "window"), ("input", "window_form"), ("input", "view"),
            ("input", "mode"), ("input", "format"), ("input", "layout"), ("input", "timezone"),
            ("input", "allow_untracked"), ("input", "options"), ("input", "schema"),
            ("input", "table"), ("output", "table"), ("output", "time_column")]


@pytest.mark.parametrize("section,key", JOB_KEYS, ids=[f"{s}.{k}" for s, k in JOB_KEYS])
def test_every_job_key_value_is_the_users_to_fix(base, section, key):
    for v in _toml_values():
        job_keys: dict = {}
        inp: dict = {}
        out: dict = {}
        {"job": job_keys, "input": inp, "output": out}[section][key] = v
        if key in ("lag", "window"):
            inp["window_form"] = '"sliding"'
        args = ["etl", "run", _job(base, job_keys, inp, out), "--schedule-time", "2024-01-01T05:00:00Z",
                "--dry-run"]
        p = invoke_trib(*args)
        _assert_user_exit(p, [key, v], (0, 2, 3, 4, 7) if key == "table" else (0, 2, 3, 4))  # 7: ENAMETOOLONG
        if p.returncode == 3 and "cannot read job file" not in p.stderr:  # TOML's own refusal names a line
            assert key in p.stderr or "window" in p.stderr or v.strip('"') in p.stderr, (key, v, p.stderr)


TABLE_KEYS = ["layout", "file_format", "compression", "protocol", "roll", "checkpoint_interval", "partition_commit",
              "created_ms", "tracking", "log_retention_ms", "max_bad_fraction", "final_after_ms"]


@pytest.mark.parametrize("key", TABLE_KEYS)
def test_every_table_json_key_is_corrupt_not_unexpected(base, tmp_path, key):
    """A table.json no trib would write is exit 6 (corrupt) for every command that opens the table; the
    issue's case: ``"partition_commit": "x"`` was exit 1 for ``ingest`` and ``partitions commit`` while
    ``verify`` said ok."""
    root = tmp_path / "t"
    Table.create(str(root), TableConfig(Layout(LAYOUT, "dt={yyyy}{MM}{dd}{HH}"), format="jsonl"))
    props = root / "_tributary" / "table.json"
    good = json.loads(props.read_text())
    (tmp_path / "src.jsonl").write_text('{"ts": 1704085200000}\n')
    bad = ["x", "", -1, 1.5, 99999999999999999999, None, True, [], {"a": 1}, {"policies": ["nope"]},
           {"directory": "{yyyy}", "partition": 7}]
    for v in bad:
        props.write_text(json.dumps({**good, key: v}))
        seen = {}
        for argv in (["verify", str(root)], ["partitions", "commit", str(root)], ["files", str(root), "--all"],
                     ["ingest", str(root), "--source", str(tmp_path / "src.jsonl"), "--app-id", "a",
                      "--time-field", "ts"],
                     ["clean", str(root), "--dry-run"]):
            p = invoke_trib(*argv)
            _assert_user_exit(p, [key, v, *argv], allowed=(0, 3, 6, 9))
            seen[argv[0]] = p.returncode
        # verify and the commands that use the table agree: corrupt for one is corrupt for all
        assert (seen["verify"] == 6) == (6 in seen.values()), (key, v, seen)


# -- issue 25, Why 11: small faults, each through the CLI ----------------------------------------
@pytest.mark.parametrize("edit,says", [
    (lambda d: {**d, "job": 'period = "1.9ms"'}, "1.9ms is not a whole number of milliseconds"),  # fixed by #19
    (lambda d: {**d, "view": '"select"'}, "view 'select' is a SQL keyword"),
    (lambda d: {**d, "view": '"Where"'}, "view 'Where' is a SQL keyword"),
    (lambda d: {**d, "input_table": '"t"'}, "reads the job's own [output] table"),
])
def test_small_faults_of_a_job_file_are_refused(base, edit, says):
    d = edit({"job": 'period = "1h"', "view": '"v"', "input_table": '"land"'})
    text = (f'[job]\nname = "s"\nsql = "q.sql"\n{d["job"]}\n\n[[inputs]]\ntable = {d["input_table"]}\n'
            f'view = {d["view"]}\nmode = "consumer"\n\n[output]\ntable = "t"\ntime_column = "ts"\n')
    (base / "small.toml").write_text(text)
    p = invoke_trib("etl", "run", str(base / "small.toml"), "--schedule-time", "2024-01-01T05:00:00Z", "--dry-run")
    assert p.returncode == 3 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
