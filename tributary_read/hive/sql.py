"""The partition SQL: templates in ``sql/``, and the checks every rendered value passes.

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

#: Where the SQL templates live: the repository's ``sql/``, installed as the
#: package ``tributary_read.sql`` (see pyproject.toml).
SQL_DIR = Path(str(resources.files("tributary_read.sql")))

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Partition values trib renders: what a layout can produce (digits plus template literals).
_VALUE = re.compile(r"^[A-Za-z0-9_.+\-]{1,128}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: template -> separator of its ``{items}`` (rendered from ``NAME.item.sql``)
ITEM_JOIN = {"add_partitions": " ", "drop_partitions": ", "}


@lru_cache(maxsize=None)
def load_template(name: str) -> str:
    """A template's text without its ``--`` comment lines."""
    path = SQL_DIR / f"{name}.sql"
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

