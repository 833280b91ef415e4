"""Every shell and Python block in README.md and docs/ runs as shown, in order, one scratch directory per page.

A reader copies a page's blocks one after the other, so that is what this
runs: the ```sh, ```bash, ```shell and ```console blocks (a console block's
``$ `` lines) with bash, the ```python blocks with the venv's Python, each in
its own process, all of a page's blocks in one scratch directory in document
order (later blocks read what earlier ones made). ``trib`` is the venv's, on
PATH; HOME, the XDG directories (trib's state, its default Iceberg catalog,
consumer state) and ``$SCRATCH`` point into the scratch directory, and no
``TRIB_*`` variable of the test run leaks in. Each block must exit 0, or the
code its marker names. Other blocks (``text``, ``json``, ``toml``, ``sql``
...) are not run.

What the prose needs but does not show is said in the Markdown source, in
HTML comments that do not render (docs/development.md, *Writing docs*)::

    <!-- docs-test: skip "needs a YARN cluster, which the suite does not start" -->
    <!-- docs-test: exit 3 -->
    <!-- docs-test: env PIP_NO_INDEX=1 -->
    <!-- docs-test: sub /data $SCRATCH/data -->
    <!-- docs-test: needs spark -->
    <!-- docs-test: setup
    printf '{"ts": 1}\\n' > events.jsonl
    -->
    <!-- docs-test: prelude
    schedule_ms = 1592960400000
    -->

``skip``, ``exit``, ``env`` and ``prelude`` (hidden lines the block starts
with) belong to the fence right after them; ``sub``
(a literal replacement in every later block of the page), ``needs`` (a
service of the suite, for the whole page) and ``setup`` (a hidden block, run
where it stands; ``setup python`` for Python) stand alone.

Pages are converted one at a time: a page not yet converted is listed in
:data:`PENDING_PAGES` with its reason, and a page that is neither converted
nor listed fails, as do a skip without a reason and more skips than
:data:`MAX_SKIPS`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]

#: Pages whose blocks do not run yet, each with why (every page runs now; a new page is converted, not listed).
PENDING_PAGES: dict[str, str] = {}
#: The most blocks of converted pages that may be skipped, all pages together: a skip is a block no one runs,
#: so raising this is a decision a review sees, not a side effect of a new page.
MAX_SKIPS = 13
#: A skip's reason says why in words, not "todo" or "slow".
MIN_REASON_WORDS = 4

SHELL = {"sh", "bash", "shell", "console"}
RUN = SHELL | {"python"}
#: The suite's services a page may ask for (``needs NAME``): the fixture, and the variables its blocks get.
SERVICES = {
    "spark": ("warm_spark", lambda s: {"TRIB_SPARK_REMOTE": s.remote, "DOCS_SPARK_DIR": s.dir}),
    "hive": ("hive_services", lambda s: {"DOCS_METASTORE": s.metastore_uri, "DOCS_HS2": f"127.0.0.1:{s.hs2_port}",
                                         "DOCS_HIVE_DIR": s.dir}),
    "kafka": ("kafka_broker", lambda s: {"DOCS_KAFKA": s.bootstrap}),
    "s3": ("s3_server", lambda s: {"TRIB_S3_ENDPOINT_URL": s["endpoint_url"], "AWS_ACCESS_KEY_ID": "testing",
                                   "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}),
    "postgres": ("postgres_server", lambda s: {"DOCS_POSTGRES": f"127.0.0.1:{s.port}"}),
    # the page's python blocks run in Airflow's venv (DAG files, operators), its shell blocks as on any page
    "airflow": ("airflow_python", lambda python: {"DOCS_PYTHON": python}),
}
BLOCK_TIMEOUT_S = 300
#: The suite's variables a page's blocks keep: the tests' JVM options (what a JVM costs, not what trib does).
_KEPT = frozenset({"TRIB_HIVE_JAVA_OPTS"})

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(\w+)(.*)", re.S)


class DocsTestError(ValueError):
    """A marker the runner cannot read: the page's test fails with this line."""


@dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str
    hidden: bool = False
    skip: str | None = None
    exit: int = 0
    env: dict[str, str] = field(default_factory=dict)
    prelude: str = ""
    subs: tuple[tuple[str, str], ...] = ()

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}{' (setup)' if self.hidden else ''}"

    @property
    def runs(self) -> bool:
        return self.lang in RUN and self.skip is None


@dataclass
class Page:
    name: str
    blocks: list[Block]
    needs: tuple[str, ...]
    untagged: list[int]  # lines of fences that name no language


def _marker_text(lines: list[str], i: int) -> tuple[str, str, int]:
    """The marker starting at line ``i``: (kind, rest without ``-->``, the line after it)."""
    m = _MARKER.match(lines[i])
    assert m
    kind, rest = m.group(1), [m.group(2)]
    j = i
    while "-->" not in rest[-1]:
        j += 1
        if j == len(lines):
            raise DocsTestError(f"line {i + 1}: a docs-test marker without its closing -->")
        rest.append(lines[j])
    rest[-1] = rest[-1].split("-->", 1)[0]
    return kind, "\n".join(rest), j + 1


def parse(name: str, text: str) -> Page:
    """A page's blocks in document order, each with what its markers say."""
    lines = text.splitlines()
    blocks: list[Block] = []
    needs: list[str] = []
    untagged: list[int] = []
    subs: list[tuple[str, str]] = []
    pending: dict = {}  # markers waiting for their fence
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            indent, mark, lang = fence.groups()
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(mark):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            if not lang:
                untagged.append(i - len(body))
            blocks.append(Block(name, i - len(body), lang, "\n".join(body) + "\n", subs=tuple(subs), **pending))
            pending = {}
            i += 1
            continue
        if _MARKER.match(line):
            kind, rest, nxt = _marker_text(lines, i)
            where = f"{name}:{i + 1}"
            if kind == "setup":
                first, _, hidden = rest.partition("\n")
                lang = first.strip() or "sh"
                if lang not in RUN:
                    raise DocsTestError(f"{where}: setup takes sh or python, not {lang!r}")
                blocks.append(Block(name, i + 1, lang, textwrap.dedent(hidden).strip("\n") + "\n", hidden=True,
                                    subs=tuple(subs)))  # dedented: a marker in a list item is indented
            elif kind == "sub":
                words = shlex.split(rest)
                if len(words) != 2:
                    raise DocsTestError(f"{where}: sub takes OLD NEW, got {rest.strip()!r}")
                subs.append((words[0], words[1]))
            elif kind == "needs":
                unknown = set(rest.split()) - set(SERVICES)
                if unknown or not rest.split():
                    raise DocsTestError(f"{where}: needs takes {', '.join(SERVICES)}, got {rest.strip()!r}")
                needs.extend(rest.split())
            elif kind in ("skip", "exit", "env", "prelude"):
                later = lines[nxt:]
                ahead = next((ln for ln in later if ln.strip()), "")
                if not (_FENCE.match(ahead) or _MARKER.match(ahead)):
                    raise DocsTestError(f"{where}: a {kind} marker must stand right before a fence")
                if kind == "skip":
                    pending["skip"] = " ".join(shlex.split(rest))
                elif kind == "prelude":  # hidden lines the block starts with (what its prose assumes defined)
                    pending["prelude"] = textwrap.dedent(rest).strip("\n") + "\n"
                elif kind == "exit":
                    pending["exit"] = int(rest)
                else:
                    pending["env"] = dict(w.split("=", 1) for w in shlex.split(rest))
            else:
                raise DocsTestError(f"{where}: unknown docs-test marker {kind!r}")
            i = nxt
            continue
        i += 1
    if pending:
        raise DocsTestError(f"{name}: a marker at the end of the page belongs to no fence")
    return Page(name, blocks, tuple(dict.fromkeys(needs)), untagged)


def _rel(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


def _parsed() -> tuple[dict[str, Page], dict[str, str]]:
    pages, errors = {}, {}
    for p in PAGES:
        try:
            pages[_rel(p)] = parse(_rel(p), p.read_text(encoding="utf-8"))
        except (DocsTestError, ValueError) as e:
            errors[_rel(p)] = str(e)
    return pages, errors


PARSED, PARSE_ERRORS = _parsed()
CONVERTED = [name for name in [_rel(p) for p in PAGES] if name not in PENDING_PAGES]


# -- running a page ----------------------------------------------------------------------------------


def scratch_env(scratch: Path, services: dict[str, str]) -> dict[str, str]:
    """The environment a page's blocks run in: trib on PATH, every place trib keeps state inside ``scratch``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIB_", "XDG_", "PYTEST")) or k in _KEPT}
    env.update(HOME=str(scratch), SCRATCH=str(scratch), XDG_STATE_HOME=str(scratch / ".local/state"),
               XDG_CONFIG_HOME=str(scratch / ".config"), XDG_CACHE_HOME=str(scratch / ".cache"),
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    env.update(services)
    return env


def _console(code: str) -> str:
    """A console block's commands: its ``$ `` lines and their continuations; the rest is output."""
    out, more = [], False
    for line in code.splitlines():
        if line.startswith("$ ") or more:
            out.append(line[2:] if line.startswith("$ ") and not more else line)
            more = line.endswith("\\")
    return "\n".join(out) + "\n"


def source(block: Block, env: dict[str, str]) -> str:
    """The block's code as it runs: its console prompts dropped, its page's ``sub`` markers applied."""
    code = block.prelude + (_console(block.code) if block.lang == "console" else block.code)
    for old, new in block.subs:
        value = _expand(new, env)
        code = re.sub(r"(?<![\w.])" + re.escape(old) + r"(?![\w.-])", lambda _: value, code)
    return code


def _expand(text: str, env: dict[str, str]) -> str:
    """A ``sub`` marker's NEW with its variables ($SCRATCH, a service's) filled in."""
    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name not in env:
            raise DocsTestError(f"a sub marker names ${name}, which the page's blocks do not have")
        return env[name]
    return re.sub(r"\$(\w+)|\$\{(\w+)\}", value, text)


def run_block(block: Block, scratch: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = source(block, env)
    python = env.get("DOCS_PYTHON", sys.executable)
    argv = [python, "-"] if block.lang == "python" else ["bash", "-e", "-o", "pipefail", "-s"]
    return subprocess.run(argv, input=code, cwd=scratch, env={**env, **block.env}, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S)


def run_page(page: Page, scratch: Path, services: dict[str, str]) -> list[str]:
    """Runs the page's blocks in order; the failures, each with its place, code and output."""
    env = scratch_env(scratch, services)
    failed = []
    for block in page.blocks:
        if not block.runs:
            continue
        proc = run_block(block, scratch, env)
        if proc.returncode != block.exit:
            failed.append(f"{block.where} ({block.lang}) exited {proc.returncode}, expected {block.exit}:\n"
                          f"{source(block, env)}--- stdout ---\n{proc.stdout[-1500:]}\n"
                          f"--- stderr ---\n{proc.stderr[-2500:]}")
            break  # the blocks after it build on it: their failures would only echo this one
    return failed


@pytest.fixture(scope="session")
def airflow_python() -> str:
    """The Python of Airflow's venv (tests/airflow_env.py): the machine's cached Airflow under this clone's thin
    layer with the project, made in under a second once the base exists, as test_scheduling_airflow.py has it."""
    import airflow_env

    return str(airflow_env.ensure_venv() / "bin" / "python")


def services_for(page: Page, request: pytest.FixtureRequest) -> dict[str, str]:
    """The variables that point the page's blocks at the suite's services it ``needs`` (started on first use)."""
    services: dict[str, str] = {}
    for need in page.needs:
        fixture, variables = SERVICES[need]
        services.update(variables(request.getfixturevalue(fixture)))
    return services


@pytest.mark.integration  # real processes: bash, trib and Python for each block
@pytest.mark.parametrize("name", CONVERTED)
def test_page_blocks_run(name, tmp_path, request):
    assert name not in PARSE_ERRORS, PARSE_ERRORS.get(name)
    page = PARSED[name]
    services = services_for(page, request)
    shown = [b for b in page.blocks if b.lang in RUN and not b.hidden]
    assert not shown or any(b.runs for b in shown), f"{name} is converted but skips every block it shows"
    failed = run_page(page, tmp_path, services)
    assert not failed, "\n".join(failed) + "\n(a page not converted yet is listed in PENDING_PAGES, with why)"


# -- what keeps the conversion honest ------------------------------------------------------------------


def test_every_page_is_converted_or_pending():
    """A new page runs its blocks, or says here why not yet; a pending entry names a page that exists."""
    names = {_rel(p) for p in PAGES}
    assert set(PENDING_PAGES) <= names, f"pending pages that no longer exist: {set(PENDING_PAGES) - names}"
    assert CONVERTED, "no page is converted"
    for name, why in PENDING_PAGES.items():
        assert len(why.split()) >= MIN_REASON_WORDS, name


def test_markers_parse():
    assert not PARSE_ERRORS, PARSE_ERRORS


def test_skips_are_few_and_say_why():
    skipped = [b for n in CONVERTED for b in PARSED[n].blocks if b.lang in RUN and b.skip is not None]
    assert len(skipped) <= MAX_SKIPS, [b.where for b in skipped]
    short = [b.where for b in skipped if len(b.skip.split()) < MIN_REASON_WORDS]  # type: ignore[union-attr]
    assert not short, f"a skip says why in at least {MIN_REASON_WORDS} words: {short}"


def test_converted_pages_tag_every_fence():
    """On a converted page a fence names its language, so no command block goes unrun unnoticed (``text`` for
    a synopsis or output)."""
    untagged = [f"{n}:{line}" for n in CONVERTED for line in PARSED[n].untagged]
    assert not untagged, untagged


def test_markers_as_parsed():
    page = parse("x.md", "\n".join([
        "<!-- docs-test: sub /data $SCRATCH/data -->",
        "<!-- docs-test: setup",
        "mkdir -p /data/in",
        "-->",
        "<!-- docs-test: skip \"needs a YARN cluster here\" -->",
        "```sh", "yarn app -list", "```",
        "  <!-- docs-test: exit 3 -->",
        "  <!-- docs-test: env A=1 B='x y' -->",
        "  ```bash", "  ls /data/in /database", "  ```",
        "<!-- docs-test: prelude", "x = 1", "-->",
        "```python", "print(x)", "```",
        "```", "trib files ROOT", "```",
    ]))
    setup, yarn, ls, py, synopsis = page.blocks
    assert (setup.hidden, setup.lang, setup.code) == (True, "sh", "mkdir -p /data/in\n")
    assert (yarn.skip, yarn.runs) == ("needs a YARN cluster here", False)
    assert (ls.exit, ls.env, ls.code) == (3, {"A": "1", "B": "x y"}, "ls /data/in /database\n")
    env = {"SCRATCH": "/s"}
    assert source(ls, env) == "ls /s/data/in /database\n"
    with pytest.raises(DocsTestError, match=r"\$NOPE"):
        _expand("$NOPE/x", env)
    assert (py.lang, py.runs, source(py, env), synopsis.runs, page.untagged) == (
        "python", True, "x = 1\nprint(x)\n", False, [20])
    assert parse("x.md", "<!-- docs-test: needs s3 kafka -->\n<!-- docs-test: needs s3 -->\n").needs == ("s3", "kafka")
    assert _console("$ trib x \\\n  --y\nout\n$ ls\n") == "trib x \\\n  --y\nls\n"
    for bad in ("<!-- docs-test: skip \"x\" -->\ntext\n```sh\nls\n```", "<!-- docs-test: frob -->",
                "<!-- docs-test: needs yarn -->", "<!-- docs-test: setup toml\nx\n-->"):
        with pytest.raises(DocsTestError):
            parse("x.md", bad)


@pytest.mark.integration
def test_a_failing_block_fails_its_page(tmp_path):
    """The runner sees a block's exit code: a wrong one fails the page, and the blocks after it do not run."""
    page = parse("x.md", "```sh\ntouch made\nfalse\n```\n```sh\ntouch after\n```\n")
    failed = run_page(page, tmp_path, {})
    assert len(failed) == 1 and "x.md:1 (sh) exited 1, expected 0" in failed[0]
    assert (tmp_path / "made").exists() and not (tmp_path / "after").exists()
    ok = parse("y.md", "<!-- docs-test: exit 3 -->\n```bash\nexit 3\n```\n"
                       "```python\nimport os\nassert os.environ['HOME'] == os.getcwd()\n```\n")
    assert run_page(ok, tmp_path, {}) == []


@pytest.mark.integration
def test_a_page_that_needs_a_service_reaches_the_suites(tmp_path, request):
    """``needs s3``: the blocks get the session's S3 server (moto, started in this process), as a page on S3 would."""
    root, day = "s3://trib/docs-test", "{yyyy}{MM}{dd}"
    page = parse("x.md", "<!-- docs-test: needs s3 -->\n```sh\n"
                         f"trib table create {root} --layout '{day}' --partition 'dt={day}'\n"
                         f"trib table show {root} --json | grep -q '\"root\": \"{root}\"'\n```\n")
    services = services_for(page, request)
    assert services["TRIB_S3_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    assert run_page(page, tmp_path, services) == []
