"""Architecture rules as tests: facts anyone can check with plain tools (ast, grep, wc).

Pure Python over the source files of the installed layout (``cli/`` is
``tributary_read.cli``, as pyproject's package-dir maps it): no JVM, no
storage, well under a second apart from one interpreter start.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 600
#: The one module that may parse directory/partition templates.
LAYOUT = "tributary_read.table.layout"
#: The one package that may look at storage schemes.
IO = "tributary_read.io"


def _modules() -> dict[str, Path]:
    """Module name -> source file, for every package pyproject installs."""
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = cfg.get("package-dir", {})
    out: dict[str, Path] = {}
    for pkg in cfg["packages"]:
        # A package not mapped itself lives under its nearest mapped parent.
        parent = next((p for p in sorted(dirs, key=len, reverse=True) if pkg == p or pkg.startswith(p + ".")), None)
        rel = dirs[parent] + pkg[len(parent):].replace(".", "/") if parent else pkg.replace(".", "/")
        for f in sorted((REPO / rel).glob("*.py")):
            out[pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"] = f
    return out


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _where(name: str, node: ast.AST | None = None) -> str:
    rel = MODULES[name].relative_to(REPO)
    return f"{rel}:{node.lineno}" if node is not None else str(rel)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of import nodes under ``if TYPE_CHECKING:``: never executed, so no runtime edge."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imports(name: str, tree: ast.Module) -> set[str]:
    """Package modules this module imports anywhere (module level or inside functions)."""
    is_pkg = MODULES[name].name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    skip = _type_checking_only(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from pkg import sub`` imports the module pkg.sub, not just pkg.
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            # ``import a.b.c`` binds a module; the nearest known one is the edge.
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


GRAPH = {name: _imports(name, tree) for name, tree in TREES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, set(c)) for c in comps]


def _one_cycle(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A concrete cycle inside a component: the shortest path from its first module back to it."""
    start = min(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)  # unreachable for a real component


def test_the_module_map_covers_the_installed_packages():
    """Guards the other tests against scanning nothing."""
    for name in ("tributary_read", "tributary_read.cli.main", LAYOUT, "tributary_read.io.storage"):
        assert name in MODULES, name
    assert "tributary_read.errors" in GRAPH["tributary_read"]  # ``from .errors import *``


def test_imports_resolve_relative_and_function_level():
    tree = ast.parse("""
from . import files
from .context import x
from ..table.layout import Layout
import tributary_read.io.storage as s

def f():
    from tributary_read.read import listing
""")
    assert _imports("tributary_read.cli.main", tree) == {
        "tributary_read.cli", "tributary_read.cli.files", "tributary_read.cli.context",
        "tributary_read.table.layout", "tributary_read.io.storage", "tributary_read.read",
        "tributary_read.read.listing"}


def test_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles (function-level imports count):\n" + "\n".join(
        " -> ".join(c) for c in cycles)


def test_no_module_over_600_lines():
    long = {_where(n): len(p.read_text().splitlines()) for n, p in MODULES.items()}
    offenders = {f: n for f, n in long.items() if n > MAX_LINES}
    assert not offenders, f"modules over {MAX_LINES} lines: {offenders}"


#: The ETL's modules stay readable whole: one step per module (issue 19).
ETL_MAX_LINES = 350


def test_no_etl_module_over_350_lines():
    etl = {_where(n): len(p.read_text().splitlines()) for n, p in MODULES.items()
           if n == "tributary_read.etl" or n.startswith("tributary_read.etl.")}
    assert len(etl) >= 8, etl  # the split steps are there to be measured
    offenders = {f: n for f, n in etl.items() if n > ETL_MAX_LINES}
    assert not offenders, f"modules of tributary_read/etl over {ETL_MAX_LINES} lines: {offenders}"


#: A regex for template tokens (``{yyyy|MM...}``, ``\{(\w+)\}``) is template parsing.
_TOKEN_REGEX = re.compile(r"yyyy\s*\||\|\s*yyyy|\\\{\(")


def _template_parsing(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _TOKEN_REGEX.search(node.value):
            found.append((node, f"token regex {node.value!r}"))
        # layout.partition.split(",") re-parses the partition spec.
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("split", "partition", "findall", "finditer")
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "partition"):
            found.append((node, ast.unparse(node)))
    return found


def test_template_rule_sees_the_usual_forms():
    code = """
_TOKEN = re.compile(r"\\{(yyyy|MM|dd|HH|mm)\\}")
_ANY = re.compile(r"\\{(\\w+)\\}")
specs = layout.partition.split(",")
ok = "help: {yyyy}_{MM}_{dd}/{HH}"
"""
    assert len(_template_parsing(ast.parse(code))) == 3


def test_templates_are_parsed_only_in_layout():
    found = [f"{_where(name, node)}: {what}" for name, tree in TREES.items() if name != LAYOUT
             for node, what in _template_parsing(tree)]
    assert not found, f"templates parsed outside {LAYOUT}:\n" + "\n".join(found)


#: Scheme names that mean nothing but a store; "file" and "memory" count only as
#: ``file:``/``file://`` (a bare "file" is as often a kind of entry).
_STORE_NAMES = ("s3", "s3a", "s3n", "hdfs", "viewfs", "webhdfs", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs",
                "adl", "oss")
_SCHEME_PREFIX = re.compile(r"^(?:(?:%s)(?::|://)?|(?:file|memory|mock)(?::|://))$" % "|".join(_STORE_NAMES))


def _is_scheme(node: ast.AST) -> bool:
    """``scheme``, ``x.scheme``, ``urlparse(u).scheme``."""
    return (isinstance(node, ast.Name) and node.id == "scheme") or (
        isinstance(node, ast.Attribute) and node.attr == "scheme")


def _scheme_literals(node: ast.AST) -> list[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items
            if isinstance(i, ast.Constant) and isinstance(i.value, str) and _SCHEME_PREFIX.match(i.value)]


def _scheme_tests(tree: ast.AST) -> list[ast.AST]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_scheme(s) for s in sides) or any(_scheme_literals(s) for s in sides):
                found.append(node)
        elif isinstance(node, ast.Match) and _is_scheme(node.subject):
            found.append(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith", "removeprefix")
              and any(_scheme_literals(a) for a in node.args)):
            found.append(node)
    return found


def test_scheme_rule_sees_the_usual_forms():
    flagged = """
storage.scheme == "s3"
storage.scheme in REAL_DIRECTORY_SCHEMES
urlparse(u).scheme != "file"
uri.startswith(("s3://", "s3a://"))
prefix == "hdfs://"
kind in ("s3", "s3a")
"""
    fine = """
entry.kind == "file"
BACKENDS.get(name)
"""
    assert len(_scheme_tests(ast.parse(flagged))) == 6
    assert _scheme_tests(ast.parse(fine)) == []


def test_no_scheme_tests_outside_io():
    """What differs between stores is asked of Storage (capabilities), never decided by its scheme."""
    found = [f"{_where(name, node)}: {ast.unparse(node)}" for name, tree in TREES.items()
             if not (name == IO or name.startswith(IO + ".")) for node in _scheme_tests(tree)]
    assert not found, f"storage scheme tests outside {IO}/:\n" + "\n".join(found)


@pytest.mark.parametrize("module,forbidden", [
    ("tributary_read", ("pyspark", "pyhive", "pyarrow.compute")),
    # trib's own start-up: every CLI run pays for what main imports.
    ("tributary_read.cli.main", ("pyspark", "pyhive")),
])
def test_import_stays_light(module, forbidden):
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = set(out.stdout.split())
    heavy = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden))
    assert not heavy, f"import {module} loads {heavy}"


#: The one parser of durations and instants, and the one owner of schedule windows.
TIMESPEC = "tributary_read.timespec"
WINDOW = "tributary_read.read.window"
#: Record times (a log line's own timestamp, with --time-format) are data, not a front end's instant.
RECORD_TIMES = "tributary_read.write.ingest"
_DURATION_REGEX = re.compile(r"\(ms\|s\|m\|h|\(s\|m\|h|ms\|s\|m")


#: Ways to read a time from text besides timespec's own: each would give a zone-less time some meaning.
_PARSERS = {"fromisoformat", "strptime", "isoparse", "to_datetime", "parsedate_to_datetime"}
_PARSER_MODULES = ("dateutil", "ciso8601", "pendulum", "arrow", "iso8601", "email.utils")


def _time_parsing(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _PARSERS:
            found.append((node, node.attr))
        if isinstance(node, ast.ImportFrom) and node.names and any(a.name in _PARSERS for a in node.names):
            found.append((node, f"from {node.module} import {', '.join(a.name for a in node.names)}"))
        mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for m in mods:
            if any(m == p or m.startswith(p + ".") for p in _PARSER_MODULES):
                found.append((node, f"import {m}"))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _DURATION_REGEX.search(node.value):
            found.append((node, f"duration regex {node.value!r}"))
    return found


def _window_math(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    names = {"previous_period", "floor_to_period", "shift_periods"}
    return [(n, ast.unparse(n)) for n in ast.walk(tree)
            if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) in names]


def test_time_rule_sees_the_usual_forms():
    code = """
dt = datetime.fromisoformat(text)
_DURATION = re.compile(r"^([0-9]+)(ms|s|m|h|d|w)$")
w = TimeWindow.previous_period(t, p, lag)
b = floor_to_period(t, p)
t = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
d = date.fromisoformat(text)
from dateutil.parser import isoparse
import dateutil
ts = pd.to_datetime(text)
"""
    tree = ast.parse(code)
    assert len(_time_parsing(tree)) == 8 and len(_window_math(tree)) == 2


#: The jar's one instant parser (tributary_read.timespec's twin).
JAVA_TIMESPEC = "TimeSpec.java"
#: java.time and java.text calls that read a time from text, each with its own idea of a missing offset.
_JAVA_PARSING = re.compile(r"\b(?:LocalDateTime|OffsetDateTime|ZonedDateTime|Instant|LocalDate|LocalTime|Timestamp)"
                           r"\s*\.\s*(?:parse|valueOf)\s*\(|\bSimpleDateFormat\b|\bDateTimeFormatter\.ISO_\w+\.parse"
                           r"|\.parse\s*\([^)]*DateTimeFormatter|DateFormat\s*\.\s*parse")


def test_java_time_rule_sees_the_usual_forms():
    code = """
long a = Instant.parse(s).toEpochMilli();
OffsetDateTime b = OffsetDateTime.parse(s);
LocalDateTime c = LocalDateTime.parse(s, DateTimeFormatter.ISO_LOCAL_DATE_TIME);
java.sql.Timestamp d = Timestamp.valueOf(s);
new SimpleDateFormat("yyyy").parse(s);
String ok = DateTimeFormatter.ofPattern(p).format(Instant.ofEpochMilli(ms));
"""
    assert len(_JAVA_PARSING.findall(code)) == 5


def test_the_jar_parses_instants_only_in_timespec():
    """Issue 33, item 5: the jar's UDFs and path filter read a time only through TimeSpec, as Python's do."""
    sources = sorted((REPO / "hive_udfs" / "java").rglob("*.java"))
    assert any(p.name == JAVA_TIMESPEC for p in sources)
    found = [f"{p.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0)}"
             for p in sources if p.name != JAVA_TIMESPEC
             for text in [p.read_text()] for m in _JAVA_PARSING.finditer(text)]
    assert not found, f"instants parsed outside {JAVA_TIMESPEC}:\n" + "\n".join(found)


def test_durations_and_instants_are_parsed_only_in_timespec():
    found = [f"{_where(name, node)}: {what}" for name, tree in TREES.items()
             if name not in (TIMESPEC, RECORD_TIMES) for node, what in _time_parsing(tree)]
    assert not found, f"durations or instants parsed outside {TIMESPEC}:\n" + "\n".join(found)


def test_schedule_windows_are_computed_only_by_schedule():
    """Front ends build a Schedule and call .window(); none recomputes a period's bounds."""
    found = [f"{_where(name, node)}: {what}" for name, tree in TREES.items() if name != WINDOW
             for node, what in _window_math(tree)]
    assert not found, f"schedule windows computed outside {WINDOW}:\n" + "\n".join(found)


#: Layers, bottom first: a module may import its own package and any lower layer, never a higher one, nor a
#: sibling package of its own layer. Function-level imports count (they run as surely, only later).
LAYERS: list[set[str]] = [
    {"errors"},
    # leaves; sql/: data; paths: trib's state directory
    {"choice", "faults", "timespec", "lazy", "sql", "exits", "secret", "kerberos", "processes", "paths"},
    {"io"},
    {"table"},
    {"lineage"},  # OpenLineage events: emitted by write (ingest), read (acks) and etl runs
    {"write", "read"},
    {"hive", "report", "kafka", "spool"},  # spool: a directory of rotating logs (--source-dir)
    {"iceberg"},  # its Hive catalog is a metastore: hive/uri.py parses its thrift:// URI, hive/metastore.py connects
    {"hive_udfs"},  # everything JVM; its registry renders SQL through hive/sql.py
    {"spark"},
    {"etl", "compact"},
    {"airflow", "metrics"},  # the Airflow provider: runs trib as a process, reads the log (etl, hive) for its sensor
    {"services"},
    {"demo"},
    # The front ends: the CLI and the package face (tributary_read itself, whose names load lazily). The CLI
    # reads the face's __version__; nothing below them imports either.
    {"cli", ""},
]
#: Known upward edges still to remove: none left (issue 19, item 8 removed the last). The test fails if one
#: is added, and fails when one listed here is gone (so the list only shrinks).
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _rank(module: str) -> int:
    pkg = _package(module)
    for i, layer in enumerate(LAYERS):
        if pkg in layer:
            return i
    raise AssertionError(f"{module}: package {pkg!r} is in no layer of LAYERS")


def _upward(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(package, package) -> the module edges that climb or cross sideways."""
    out: dict[tuple[str, str], list[str]] = {}
    for mod, deps in graph.items():
        for dep in deps:
            a, b = _package(mod), _package(dep)
            if a == b:
                continue
            top = _rank(mod) == len(LAYERS) - 1
            if _rank(dep) > _rank(mod) or (_rank(dep) == _rank(mod) and not top):
                key = (f"tributary_read.{a}" if a else "tributary_read", f"tributary_read.{b}" if b else "tributary_read")
                out.setdefault(key, []).append(f"{mod} -> {dep}")
    return out


def test_layer_rule_sees_a_climb_and_a_sideways_step():
    graph = {"tributary_read.read.resolve": {"tributary_read.write.writer", "tributary_read.table.config"},
             "tributary_read.table.log": {"tributary_read.io.storage"},
             "tributary_read.spark.write": {"tributary_read"}}
    assert set(_upward(graph)) == {("tributary_read.read", "tributary_read.write"),
                                   ("tributary_read.spark", "tributary_read")}


def test_every_package_is_in_a_layer():
    for name in MODULES:
        _rank(name)


def test_imports_point_down():
    found = _upward(GRAPH)
    new = {k: v for k, v in found.items() if k not in KNOWN_UPWARD}
    assert not new, "imports that climb a layer or cross to a sibling:\n" + "\n".join(
        e for v in new.values() for e in v)
    gone = KNOWN_UPWARD - set(found)
    assert not gone, f"fixed, so drop them from KNOWN_UPWARD: {sorted(gone)}"


def test_table_knows_no_state_names_of_the_layers_above():
    """``_tributary/`` is trib's namespace; what consumers, Hive sync or the ETL keep there is named by them."""
    higher = re.compile(r"consumers/|hive/|etl/|partition-commit|\.lock\b")
    found = [f"{_where(name, node)}: {node.value!r}" for name, tree in TREES.items()
             if name.startswith("tributary_read.table.") for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and higher.search(node.value)]
    assert not found, "table/ names state the layers above own:\n" + "\n".join(found)


# -- one owner each: the metastore URI, SQL quoting, the SQL session, the exit mapping, the JVM build ----
#: The one module that parses a metastore URI and knows its kind.
METASTORE_URI = "tributary_read.hive.uri"
#: The one module that quotes and renders SQL.
SQL = "tributary_read.hive.sql"
#: The one module that assembles a SparkSession (builder, jar, catalog, UDFs).
SESSION = "tributary_read.spark.session"
#: The one module that maps a failure to its line and exit status.
EXITS = "tributary_read.exits"
#: The one package that compiles Java or names a Java source (hive_udfs/: the sources, the build, the registry).
JVM = "tributary_read.hive_udfs"
REGISTRY = "tributary_read.hive_udfs.registry"
_KIND_NAMES = {"spark", "hs2", "hive2", "thrift"}
_URI_WORDS = re.compile(r"metastore|uri|backend|address|BACKENDS", re.I)


def _kind_tests(tree: ast.AST) -> list[ast.AST]:
    """Metastore-kind decisions made on strings: what :class:`MetastoreURI` answers."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = [s for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)
                     and s.value.lower().rstrip(":/") in _KIND_NAMES]
            if names and any(_URI_WORDS.search(ast.unparse(s)) for s in sides if s not in names):
                found.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            text = ast.unparse(node.func.value)
            args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if node.func.attr in ("split", "partition") and "?" in args and _URI_WORDS.search(text):
                found.append(node)  # uri.split("?", 1)[0]: the scheme by hand
            elif node.func.attr in ("startswith", "endswith") and _URI_WORDS.search(text) and any(
                    a.lower().rstrip(":/?") in _KIND_NAMES or a.endswith("Metastore") for a in args):
                found.append(node)
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and str(node.slice.value).lower() in _KIND_NAMES and _URI_WORDS.search(ast.unparse(node.value))):
            found.append(node)  # backend == BACKENDS["spark"]
    return found


def test_kind_rule_sees_the_past_offenders():
    flagged = """
hive = job.hive.metastore.split("?", 1)[0].lower() == "spark"
if h.metastore.split("?", 1)[0].lower() == "spark": pass
if backend == BACKENDS["thrift"]: pass
if backend_for(uri).endswith(":SparkCatalogMetastore"): pass
ms.address == "spark"
uri.startswith("thrift://")
"""
    fine = """
if lister != "spark": pass
DIALECTS["spark"]
u.is_spark_catalog
"""
    assert len(_kind_tests(ast.parse(flagged))) == 8  # the first two lines hold a split and a compare each
    assert _kind_tests(ast.parse(fine)) == []


def test_metastore_kinds_are_decided_only_by_the_uri_type():
    found = [f"{_where(name, node)}: {ast.unparse(node)}" for name, tree in TREES.items()
             if name not in (METASTORE_URI, "tributary_read.hive.metastore") for node in _kind_tests(tree)]
    assert not found, f"metastore kind tested outside {METASTORE_URI} (use MetastoreURI):\n" + "\n".join(found)


_SQL_WORDS = re.compile(r"\b(SELECT|CREATE|DROP|ALTER|INSERT|DESCRIBE|SHOW|ANALYZE|MSCK|ADD JAR|USE|SET|FUNCTION|"
                        r"DATABASE|PARTITION|TBLPROPERTIES|LOCATION|ROW FORMAT|STORED AS)\b")


def _sql_rendering(tree: ast.AST) -> list[ast.AST]:
    """SQL built by hand: an f-string or ``.format`` with SQL keywords, or quoting (backquotes around a value)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.FormattedValue) for v in node.values):
            parts = node.values
            text = "".join(v.value for v in parts if isinstance(v, ast.Constant) and isinstance(v.value, str))
            around = any(isinstance(a, ast.Constant) and isinstance(a.value, str) and isinstance(b, ast.FormattedValue)
                         and (a.value.endswith(("`", "'")) and i + 1 < len(parts) and parts[i + 1] is b)
                         for i, (a, b) in enumerate(zip(parts, parts[1:])))
            if _SQL_WORDS.search(text) or (around and "`" in text and text.count("`") % 2 == 0
                                           and not re.search(r"`[a-z]+ [a-z]", text)):
                found.append(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
              and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
              and _SQL_WORDS.search(node.func.value.value)):
            found.append(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "replace"
              and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in ("`", "'")):
            found.append(node)  # hand-made escaping of a quote character
    return found


def test_sql_rule_sees_the_past_offenders():
    flagged = """
spark.sql(f"ADD JAR '{jar}'")
stmt = f"CREATE OR REPLACE TEMPORARY FUNCTION {name} AS '{cls}'"
ms.execute(f"DROP FUNCTION IF EXISTS {database}.{name}")
cols = ", ".join(f"`{c}` {t}" for c, t in columns)
sql = f"`{self.db}`.`{self.name}`"
q = "`" + name.replace("`", "``") + "`"
spark.sql("SELECT * FROM {}".format(t))
"""
    fine = """
msg = f"start over with `trib consumer reset`: {e}"
msg = f"run `trib verify` on {root}"
spark.sql(create_function(name, cls, temporary=True))
"""
    assert len(_sql_rendering(ast.parse(flagged))) == 7
    assert _sql_rendering(ast.parse(fine)) == []


def test_sql_is_rendered_and_quoted_only_in_the_sql_module():
    found = [f"{_where(name, node)}: {ast.unparse(node)[:100]}" for name, tree in TREES.items() if name != SQL
             for node in _sql_rendering(tree)]
    assert not found, f"SQL rendered or quoted outside {SQL}:\n" + "\n".join(found)


def _session_builders(tree: ast.AST) -> list[ast.AST]:
    """``SparkSession.builder``, ``enableHiveSupport()`` and UDF registration: assembling a session by hand."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("builder", "enableHiveSupport"):
            found.append(node)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("udfs.spark_conf", "lib.spark_conf",
                                                                        "registry.spark_conf", "udfs.register",
                                                                        "lib.register", "registry.register",
                                                                        "spark_session"):
            found.append(node)
    return found


def test_one_session_builder():
    owners = {SESSION, REGISTRY, "tributary_read.cli.udfs"}  # the registry: the jar's own conf; and its CLI
    found = [f"{_where(name, node)}: {ast.unparse(node)}" for name, tree in TREES.items() if name not in owners
             for node in _session_builders(tree)]
    # The demo registers the UDFs on a host's session (a notebook's) that it did not build.
    found = [f for f in found if not f.startswith("tributary_read/demo/run.py") or "udfs.register(spark)" not in f]
    assert not found, f"a SparkSession assembled outside {SESSION} (use sql_session):\n" + "\n".join(found)
    conftest = ast.parse((REPO / "tests" / "conftest.py").read_text())
    assert not _session_builders(conftest), "tests/conftest.py builds its session by hand: use sql_session"


_JAVA_SOURCE = re.compile(r"\.java(?![\w.])")  # Foo.java, *.java; not java.base/java.lang
_COMPILING = {"javac", "compile_into", "source_key"}


def _jvm_building(tree: ast.AST) -> list[ast.AST]:
    """Running javac (its name as a string, or build.py's compile steps) or naming a ``.java`` source."""
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value.rsplit("/", 1)[-1] == "javac" or _JAVA_SOURCE.search(node.value):
                found.append(node)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in _COMPILING:
            found.append(node)
    return found


def test_jvm_rule_sees_the_usual_forms():
    flagged = """
subprocess.run(["javac", "-d", out, *srcs])
exe = shutil.which("javac")
src = Path(__file__).with_name("java") / "LoopbackMetaStore.java"
sources = sorted(root.rglob("*.java"))
javac.compile_into(srcs, jars, out, what="x", javac_exe=exe, timeout=1.0)
key = source_key(srcs, jars)
"""
    fine = """
\"\"\"Compiled at first use, which needs a JDK's javac; see Foo.java.\"\"\"
opts = ["--add-opens=java.base/java.lang=ALL-UNNAMED", f"-Djava.io.tmpdir={tmp}"]
classes = build.launcher_classes(java, jars, 10.0)
java = build.java(MetastoreError)
"""
    assert len(_jvm_building(ast.parse(flagged))) == 6
    assert _jvm_building(ast.parse(fine)) == []


def test_jvm_has_one_owner():
    """javac runs, and Java sources are named, only in hive_udfs/: the dev Hive pair calls its build too."""
    found = [f"{_where(name, node)}: {ast.unparse(node)[:100]}" for name, tree in TREES.items()
             if name != JVM and not name.startswith(JVM + ".") for node in _jvm_building(tree)]
    assert not found, f"Java compiled or a .java source named outside {JVM}:\n" + "\n".join(found)
    assert _jvm_building(TREES[f"{JVM}.build"]), "the rule no longer sees hive_udfs/build.py's own javac runs"


def _exit_mapping(tree: ast.AST) -> list[ast.AST]:
    """Reading an error's ``exit_code`` or spelling a signal's status: the mapping :func:`exit_line` owns."""
    click_handlers = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None and "click" in ast.unparse(node.type):
            click_handlers.update(id(n) for n in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in click_handlers:
            continue  # click's own usage errors carry click's codes
        if (isinstance(node, ast.Attribute) and node.attr == "exit_code" and isinstance(node.ctx, ast.Load)
                and not (isinstance(node.value, ast.Name) and node.value.id[:1].isupper())):
            found.append(node)  # e.exit_code of a caught error (a class's code as a status is fine)
        elif isinstance(node, ast.Constant) and node.value in (130, 143) and not isinstance(node.value, bool):
            found.append(node)
    return found


def test_the_exit_mapping_has_one_owner():
    found = [f"{_where(name, node)}: {ast.unparse(node)}" for name, tree in TREES.items() if name != EXITS
             for node in _exit_mapping(tree)]
    assert not found, f"failures mapped to exit codes outside {EXITS} (use exit_line):\n" + "\n".join(found)


def test_which_settings_are_secrets_has_one_owner():
    """Kafka options, Spark ``--conf`` and metastore URIs refuse the same names: tributary_read.secret."""
    owner = "tributary_read.secret"
    word = r"(?:password|secret|token|credential|keystore)"

    def names_secrets(node) -> bool:  # a regex alternation of them, or a tuple/list/set of them
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return bool(re.search(word + r"\w*\|\w*" + word, node.value, re.I))
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return sum(isinstance(e, ast.Constant) and isinstance(e.value, str) and len(e.value) < 24
                       and bool(re.search(word, e.value, re.I)) for e in node.elts) >= 2
        return False

    found = [f"{_where(name, node)}: {ast.unparse(node)[:120]}" for name, tree in TREES.items() if name != owner
             for node in ast.walk(tree) if names_secrets(node)]
    assert not found, f"a list of secret setting names outside {owner} (use is_secret):\n" + "\n".join(found)


_THRIFT_PARTS = ("TSocket", "TBufferedTransport", "TSaslClientTransport", "get_installed_sasl")


def test_one_thrift_transport_factory():
    """HiveServer2 and the metastore's Thrift API reach, time out and authenticate the same way."""
    owner = "tributary_read.hive.metastore"
    found = [f"{_where(name, node)}: {ast.unparse(node)}" for name, tree in TREES.items() if name != owner
             for node in ast.walk(tree) if (isinstance(node, ast.Attribute) and node.attr in _THRIFT_PARTS)
             or (isinstance(node, ast.alias) and node.name.rpartition(".")[2] in _THRIFT_PARTS)]
    assert not found, f"a Thrift transport built outside {owner} (use thrift_transport):\n" + "\n".join(found)


#: The log's writing internals: claiming a slot, reading it back, checkpointing after a commit.
_COMMIT_PROTOCOL = {"_claim", "_maybe_checkpoint", "_commits", "_checkpoints"}


def test_one_retry_backoff_and_the_commit_protocol_stays_in_the_log():
    """Retries pause through ``log.backoff``; nobody else claims log slots (the commit protocol is the log's)."""
    owner = "tributary_read.table.log"
    found = []
    for name, tree in TREES.items():
        if name == owner:
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and ast.unparse(node.func) == "time.sleep"
                    and any(isinstance(n, ast.Attribute) and n.attr in ("uniform", "random") for n in ast.walk(node))):
                found.append(f"{_where(name, node)}: {ast.unparse(node)}")  # a jittered backoff of its own
            if (isinstance(node, ast.Attribute) and node.attr in _COMMIT_PROTOCOL
                    and isinstance(node.value, (ast.Name, ast.Attribute))
                    and ast.unparse(node.value).rpartition(".")[2] == "log"):
                found.append(f"{_where(name, node)}: {ast.unparse(node)}")  # the log's private protocol
    assert not found, "retry loops or log internals outside the log:\n" + "\n".join(found)


def test_format_and_serde_facts_live_in_one_table():
    """SerDe class names are facts of :data:`tributary_read.io.formats.FORMATS`; other tables derive from it."""
    owner = "tributary_read.io.formats"
    serde = re.compile(r"^(org|com)\.[\w.]+(SerDe|Serde)$")
    found = [f"{_where(name, node)}: {node.value}" for name, tree in TREES.items() if name != owner
             for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and serde.match(node.value)]
    assert not found, f"SerDe facts outside {owner}:\n" + "\n".join(found)


#: The one owner of "which files does this run read" (a consumer's plan, or a window / version range).
SELECTION = "tributary_read.read.selection"
#: What only the owner calls: a run's answer from read.resolve, and a consumer's plan. (Reading every
#: committed file (column inference) or every visible file (list_on_executors) is not choosing a run's files.)
_SELECTING = {"resolve", "manifest_window"}


def _selects(name: str, tree: ast.Module) -> list[tuple[ast.AST, str]]:
    found: list[tuple[ast.AST, str]] = []
    skip = _type_checking_only(tree)  # the package face names them for type checkers and the Python API
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "tributary_read.read.resolve":
            found += [(node, f"imports {a.name}") for a in node.names if a.name in _SELECTING]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "plan"
              and not name.startswith("tributary_read.read.")):
            found.append((node, ast.unparse(node.func)))
    return found


def test_which_files_a_run_reads_has_one_owner():
    """trib files, the ETL, read_incremental and the lateness report build a ReadRequest and call select()."""
    found = [f"{_where(name, node)}: {what}" for name, tree in TREES.items()
             if not name.startswith("tributary_read.read.") for node, what in _selects(name, tree)]
    assert not found, f"a run's files chosen outside {SELECTION}:\n" + "\n".join(found)
    users = {name for name, tree in TREES.items() if SELECTION in GRAPH[name]}
    assert {"tributary_read.cli.files", "tributary_read.etl.resolve_step", "tributary_read.spark.incremental",
            "tributary_read.report.lateness"} <= users


def test_selection_rule_sees_a_second_owner():
    tree = ast.parse("from tributary_read.read.resolve import Source, resolve\nc.plan(mode='auto')\n")
    assert [what for _, what in _selects("tributary_read.etl.x", tree)] == ["imports resolve", "c.plan"]


#: The metastore calls that change what Hive shows of a table's partitions.
_PARTITION_DDL = ("add_partitions", "set_locations", "refresh_stats", "drop_partitions")
#: Their owners: a commit's partitions (the ETL's Hive step and the partition-commit policy), and the full sync.
_PARTITION_DDL_OWNERS = {("tributary_read.hive.commit", "mount_commit"), ("tributary_read.hive.sync", "apply_sync")}


def _airflow_outlet(receiver: ast.AST) -> bool:
    """``outlet_events[asset].add_partitions(keys)``: Airflow's partition keys of an asset event, not Hive DDL."""
    return isinstance(receiver, ast.Subscript) and "events" in ast.unparse(receiver.value)


def _partition_ddl(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    """(enclosing function, call) for each ``x.add_partitions(…)``-like call."""
    found = []

    def visit(node: ast.AST, fn: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                    and child.func.attr in _PARTITION_DDL and ast.unparse(child.func.value) not in ("self", "super()")
                    and not _airflow_outlet(child.func.value)):
                found.append((fn, child))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def test_partition_ddl_rule_sees_the_usual_forms():
    code = """
def mount(ms, t, parts):
    ms.add_partitions(t, parts)
    self._metastore().refresh_stats(t, parts)
    self.ms.set_locations(t, parts)
def inner(self):
    super().refresh_stats(t, parts)  # a backend delegating to itself is not an owner
    return self.add_partitions(t, parts)
"""
    assert [(fn, c.func.attr) for fn, c in _partition_ddl(ast.parse(code))] == [
        ("mount", "add_partitions"), ("mount", "refresh_stats"), ("mount", "set_locations")]


def test_partitions_change_after_a_commit_only_through_mount_commit():
    """One owner of "which partitions to add/refresh/move back": a second caller would give a second answer."""
    found = [f"{_where(name, call)}: {fn}: {ast.unparse(call)[:80]}" for name, tree in TREES.items()
             for fn, call in _partition_ddl(tree) if (name, fn) not in _PARTITION_DDL_OWNERS]
    assert not found, ("partition DDL outside hive/commit.py's mount_commit and hive/sync.py's apply_sync:\n"
                       + "\n".join(found))
