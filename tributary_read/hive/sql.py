"""The partition SQL: templates in ``sql/metastore/``, and the checks every rendered value passes.

Everything rendered into SQL passes a strict check first: identifiers and
partition values must match a small character set, strings are quoted and
escaped, so a directory name can never become SQL. Templates are files, not
f-strings, so tests/test_sql_templates.py can run each through Spark's and
Hive's real parsers.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Mapping, Sequence

from tributary_read.errors import InvalidInputError, MetastoreError

#: Where the packaged SQL lives: the repository's ``sql/``, installed as ``tributary_read.sql`` (see
#: pyproject.toml). ``metastore/`` holds the templates trib renders itself (below); ``warehouse/`` the
#: example ODS/DW scripts users run with ``trib sql -f`` (the demo runs them too).
_PACKAGED = Path(str(resources.files("tributary_read.sql")))
METASTORE_DIR = _PACKAGED / "metastore"
WAREHOUSE_DIR = _PACKAGED / "warehouse"

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Partition values trib renders: what a layout can produce (digits plus template literals).
_VALUE = re.compile(r"^[A-Za-z0-9_.+\-]{1,128}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: template -> separator of its ``{items}`` (rendered from ``NAME.item.sql``)
ITEM_JOIN = {"add_partitions": " ", "drop_partitions": ", "}


@lru_cache(maxsize=None)
def load_template(name: str) -> str:
    """A template's text without its ``--`` comment lines."""
    path = METASTORE_DIR / f"{name}.sql"
    try:
        text = path.read_text()
    except OSError as e:
        raise MetastoreError(f"SQL template {path} is missing ({e.strerror})") from None
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--")).strip()


def render(name: str, **parts: str) -> str:
    """Fill a template; every part must already be checked and quoted."""
    return load_template(name).format(**parts)


# -- validation and quoting ------------------------------------------------------
def sql_string(text: str) -> str:
    """A single-quoted SQL string literal, as both Hive's and Spark's lexers read it."""
    if not isinstance(text, str) or _CONTROL.search(text):
        raise InvalidInputError(f"refusing to render {text!r}: control characters")
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def check_values(keys: Sequence[str], values: Mapping[str, str]) -> dict[str, str]:
    """Values for exactly ``keys``, each matching the strict value pattern."""
    if [k.lower() for k in values] != [k.lower() for k in keys]:
        raise InvalidInputError(f"partition {dict(values)} does not have the keys {list(keys)}")
    out = {}
    for k, v in zip(keys, values.values()):
        if not _KEY.fullmatch(k) or not isinstance(v, str) or not _VALUE.fullmatch(v):
            raise InvalidInputError(f"refusing to render partition value {k}={v!r}")
        out[k] = v
    return out


def render_spec(keys: Sequence[str], values: Mapping[str, str]) -> str:
    vals = check_values(keys, values)
    return ", ".join(f"`{k}`={sql_string(v)}" for k, v in vals.items())



# -- names and small statements: every SQL string trib renders outside the templates --------------
#: A Java class name as Hive's CREATE FUNCTION takes it.
_CLASS = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z_$][A-Za-z0-9_$]*)*$")
#: A Hive column type as ``--columns`` gives it (``DECIMAL(10,2)``, ``STRUCT<a:INT,b:STRING>``).
COLUMN_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_<>(),: ]*$")


def identifier(name: str) -> str:
    """A database, table, column or function name trib chose or checked: backquoted, strict."""
    if not isinstance(name, str) or not _KEY.fullmatch(name):
        raise InvalidInputError(f"refusing to render the name {name!r} (letters, digits and _ only)")
    return f"`{name}`"


def qualified(*parts: str) -> str:
    """``db.name`` with each part an :func:`identifier`."""
    return ".".join(identifier(p) for p in parts if p is not None)


def quote_name(name: str) -> str:
    """Any column name a catalog or file gave us (it may hold spaces, dots, backquotes): doubled backquotes."""
    return "`" + name.replace("`", "``") + "`"


def column_defs(columns) -> str:
    """``(name, type)`` pairs as a column list; a type that could carry more SQL is refused."""
    for _, t in columns:
        if not isinstance(t, str) or not COLUMN_TYPE.fullmatch(t):
            raise InvalidInputError(f"refusing to render the column type {t!r}")
    return ", ".join(f"{identifier(c)} {t}" for c, t in columns)


def delimiter_literal(ch: str) -> str:
    """A field delimiter as a SQL literal; a control character (tab, \\x01) as the escape both lexers know."""
    if ch == "\t":
        return "'\\t'"
    if len(ch) == 1 and (ord(ch) < 32 or ord(ch) == 127):
        return f"'\\{ord(ch):03o}'"
    return sql_string(ch)


def storage_clause(stored_as: str, *, delimiter: str | None = None, serde: str | None = None) -> str:
    """``[ROW FORMAT DELIMITED FIELDS TERMINATED BY d | ROW FORMAT SERDE 'cls'] STORED AS X``."""
    if not isinstance(stored_as, str) or not _KEY.fullmatch(stored_as):
        raise InvalidInputError(f"refusing to render the storage {stored_as!r}")
    if delimiter is not None:
        row = f"ROW FORMAT DELIMITED FIELDS TERMINATED BY {delimiter_literal(delimiter)}\n"
    elif serde is not None:
        row = f"ROW FORMAT SERDE {sql_string(java_class(serde))}\n"
    else:
        row = ""
    return f"{row}STORED AS {stored_as}"


def java_class(name: str) -> str:
    if not isinstance(name, str) or not _CLASS.fullmatch(name):
        raise InvalidInputError(f"refusing to render the class name {name!r}")
    return name


def function_name(name: str, database: str | None = None) -> str:
    """``[db.]name``, each part checked; unquoted (as users type them, and as docs/udfs.md shows them)."""
    for part in (database, name):
        if part is not None and not (isinstance(part, str) and _KEY.fullmatch(part)):
            raise InvalidInputError(f"refusing to render the name {part!r} (letters, digits and _ only)")
    return f"{database}.{name}" if database is not None else name


def create_function(name: str, cls: str, *, database: str | None = None, jar_uri: str | None = None,
                    temporary: bool = False, replace: bool = False) -> str:
    """``CREATE [OR REPLACE] [TEMPORARY] FUNCTION [db.]name AS 'cls' [USING JAR 'uri']``."""
    head = "CREATE " + ("OR REPLACE " if replace else "") + ("TEMPORARY " if temporary else "") + "FUNCTION"
    using = f" USING JAR {sql_string(jar_uri)}" if jar_uri is not None else ""
    return f"{head} {function_name(name, database)} AS {sql_string(java_class(cls))}{using}"


def drop_function(name: str, database: str | None = None) -> str:
    return f"DROP FUNCTION IF EXISTS {function_name(name, database)}"


def add_jar(path: str) -> str:
    return f"ADD JAR {sql_string(str(path))}"


def create_database(name: str) -> str:
    return f"CREATE DATABASE {identifier(name)}"


def drop_table(db: str, table: str) -> str:
    """What a message suggests for an EXTERNAL table trib re-creates (its files stay)."""
    return f"DROP TABLE {qualified(db, table)}"


def add_columns(db: str, table: str, columns) -> str:
    return f"ALTER TABLE {qualified(db, table)} ADD COLUMNS ({column_defs(columns)})"


def set_external(db: str, table: str) -> str:
    """Makes a managed table EXTERNAL, so that a DROP TABLE keeps its files."""
    return f"ALTER TABLE {qualified(db, table)} SET TBLPROPERTIES ('EXTERNAL'='TRUE')"


def show_database(name: str) -> str:
    """The statement whose rows are non-empty exactly when database ``name`` exists (Hive and Spark alike)."""
    identifier(name)  # checked: letters, digits and _ only, so it is also a LIKE pattern matching itself
    return f"SHOW DATABASES LIKE {sql_string(name)}"


def drop_database(name: str) -> str:
    """Drops its tables too (``CASCADE``): for scratch databases trib made itself (the demo's)."""
    return f"DROP DATABASE IF EXISTS {identifier(name)} CASCADE"
