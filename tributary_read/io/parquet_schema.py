"""How JSON records become Parquet columns: the rules of docs/parquet.md, in one place.

A Parquet file has one schema, in its footer, that every row group follows;
JSON records do not: fields come and go, and a value's type is known only once
it is seen. So a file's columns are inferred from every record the file takes,
and each record is checked as it arrives. A record that fits no column is
refused right there (ingest dead-letters it with its offset), instead of making
the whole file fail at the commit, which stalled every rerun.

Column types are kept as small hashable values, not Arrow types, for one
distinction Arrow does not draw: an integer column that holds a value beyond
2**53 cannot later become a double without losing digits.
"""

from __future__ import annotations

import pyarrow as pa

from tributary_read.errors import SchemaChangeError, SchemaConflictError

NULL, BOOL, INT, BIGINT, DOUBLE, STRING = "null", "bool", "int", "bigint", "double", "string"
#: Integers a double holds exactly; larger ones keep an integer column from becoming double.
EXACT = 2**53
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

_ARROW = {NULL: pa.null(), BOOL: pa.bool_(), INT: pa.int64(), BIGINT: pa.int64(), DOUBLE: pa.float64(),
          STRING: pa.string()}
_WORDS = {NULL: "null", BOOL: "a boolean", INT: "an integer", BIGINT: "an integer beyond 2^53",
          DOUBLE: "a number with a fraction", STRING: "a string"}
#: Python type -> the scalar column type that takes it with no further check (write_row's fast path).
FAST_TYPE = {BOOL: bool, INT: int, BIGINT: int, DOUBLE: float, STRING: str}


class _Unfit(Exception):
    """A value no column can hold; ``path`` (inside the field) is filled in on the way out."""

    def __init__(self, why: str):
        super().__init__(why)
        self.path: list[str] = []


class _Clash(_Unfit):
    """Two types with no lossless common type."""

    def __init__(self, old, new):
        extra = " (a double cannot hold it exactly)" if {old, new} == {BIGINT, DOUBLE} else ""
        super().__init__(f"{describe(new)} where this file's earlier records have {describe(old)}{extra}")
        self.old, self.new = old, new


def value_type(v):
    """The column type of one JSON value (nested: a struct or list type); raises _Unfit."""
    t = type(v)
    if t is str:
        return STRING
    if t is int:
        if -EXACT <= v <= EXACT:
            return INT
        if _I64_MIN <= v <= _I64_MAX:
            return BIGINT
        raise _Unfit(f"integer {str(v)[:30]} does not fit in 64 bits")
    if t is float:
        return DOUBLE
    if t is bool:
        return BOOL
    if v is None:
        return NULL
    if t is dict:
        fields = []
        for k, x in v.items():
            try:
                fields.append((k, value_type(x)))
            except _Unfit as u:
                u.path.insert(0, k)
                raise
        return ("struct", tuple(fields))
    if t is list:
        el = NULL
        for x in v:
            try:
                el = merge(el, value_type(x))
            except _Clash as c:
                raise _Unfit(f"a list mixing {describe(c.old)} and {describe(c.new)}") from None
            except _Unfit as u:
                u.path.insert(0, "[]")
                raise
        return ("list", el)
    raise _Unfit(f"a {t.__name__} value has no Parquet type")


_MERGED: dict = {}


def merge(a, b):
    """The narrowest type holding both ``a`` and ``b`` losslessly; raises _Clash."""
    if a == b:
        return a
    key = (a, b)
    got = _MERGED.get(key)
    if got is None:
        got = _merge(a, b)
        if len(_MERGED) >= 10_000:  # many shapes of nested objects: keep the memo bounded
            _MERGED.clear()
        _MERGED[key] = got
    return got


def _merge(a, b):
    if a == NULL:
        return b
    if b == NULL:
        return a
    pair = {a, b} if isinstance(a, str) and isinstance(b, str) else None
    if pair == {INT, BIGINT}:
        return BIGINT
    if pair == {INT, DOUBLE}:  # the one numeric promotion: JSON writes 5 and 5.5 alike
        return DOUBLE
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0]:
        if a[0] == "list":
            try:
                return ("list", merge(a[1], b[1]))
            except _Clash as c:
                c.path.insert(0, "[]")
                raise
        fields = dict(a[1])
        for name, t in b[1]:
            if name in fields:
                try:
                    fields[name] = merge(fields[name], t)
                except _Clash as c:
                    c.path.insert(0, name)
                    raise
            else:
                fields[name] = t  # a field new to this struct: null in the earlier records
        return ("struct", tuple(fields.items()))
    raise _Clash(a, b)


def describe(t) -> str:
    if isinstance(t, str):
        return _WORDS[t]
    return "an object" if t[0] == "struct" else "a list"


def to_arrow(t) -> pa.DataType:
    """The Arrow type of column type ``t`` (a field-less struct stays one; see to_table)."""
    if isinstance(t, str):
        return _ARROW[t]
    if t[0] == "list":
        return pa.list_(to_arrow(t[1]))
    return pa.struct([(k, to_arrow(x)) for k, x in t[1]])


def has_empty_struct(t) -> bool:
    if isinstance(t, str):
        return False
    if t[0] == "list":
        return has_empty_struct(t[1])
    return not t[1] or any(has_empty_struct(x) for _, x in t[1])


def empty_structs_to_null(arr: pa.Array) -> pa.Array:
    """Rebuild ``arr`` with every field-less struct replaced by nulls (see to_arrow)."""
    t = arr.type
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            return pa.nulls(len(arr))
        children = [empty_structs_to_null(arr.field(i)) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, names=[f.name for f in t], mask=arr.is_null())
    if pa.types.is_list(t):
        return pa.ListArray.from_arrays(arr.offsets, empty_structs_to_null(arr.flatten()), mask=arr.is_null())
    return arr


def parsed_type(arr: pa.Array):
    """The column type this module's rules give the values an Arrow JSON parse read into ``arr``, or None
    where the Arrow array cannot tell it (the caller then types the records one by one).

    Arrow's JSON inference merges as these rules do (fields added by name, an integer
    column widened to double, any other change refused), but forgets two things:
    whether a double column held an integer beyond 2**53 (rounded into it), and
    whether an integer column's values pass 2**53 (BIGINT). So any value at or beyond
    2**53 answers None, as does a field-less object (rule 4) and any type the rules
    never make (a timestamp Arrow read from a string: the caller parses it as a string).
    """
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_string(t):
        return STRING
    if pa.types.is_int64(t) or pa.types.is_float64(t):
        if len(arr) - arr.null_count and pc.any(pc.greater_equal(pc.abs(arr), EXACT)).as_py():
            return None
        return INT if pa.types.is_int64(t) else DOUBLE
    if pa.types.is_boolean(t):
        return BOOL
    if pa.types.is_null(t):
        return NULL
    if pa.types.is_struct(t):
        if not t.num_fields:
            return None
        fields = []
        for i in range(t.num_fields):
            ft = parsed_type(arr.field(i))
            if ft is None:
                return None
            fields.append((t.field(i).name, ft))
        return ("struct", tuple(fields))
    if pa.types.is_list(t):
        el = parsed_type(arr.flatten())
        return None if el is None else ("list", el)
    return None


class RowColumns:
    """The columns of one Parquet file written from JSON rows, in first-seen order.

    ``admit`` decides a record's fate: it fits (possibly widening a column or
    adding one), or it clashes (SchemaConflictError, nothing changed). The
    widening is applied only if ``can_widen``: once a row group is written the
    file's columns are fixed, and the caller rolls to a new file instead.
    """

    def __init__(self, columns: dict | None = None):
        self.types: dict[str, object] = dict(columns or {})
        #: field -> Python type accepted with no check (scalar columns); see ParquetSink.write_row.
        self.fast: dict[str, type] = {k: FAST_TYPE[t] for k, t in self.types.items() if t in FAST_TYPE}

    def admit(self, row: dict, can_widen: bool) -> bool:
        """Check ``row`` against the columns; False if it needs a widening that is not allowed."""
        types = self.types
        changed = {}
        for k, v in row.items():
            old = types.get(k)
            try:
                new = value_type(v)
                merged = new if old is None else merge(old, new)
            except _Unfit as u:
                path = ".".join([k, *u.path]).replace(".[]", "[]")
                raise SchemaConflictError(f"field {path!r} is {u}" if isinstance(u, _Clash)
                                          else f"field {path!r}: {u}") from None
            if merged != old:
                changed[k] = merged
        if changed:
            if not can_widen:
                return False
            self.widen(changed)
        return True

    def widen(self, changed: dict) -> None:
        """Apply column types from :meth:`admit` or :meth:`admit_types` (new fields go last)."""
        self.types.update(changed)  # dicts keep insertion order
        for k, t in changed.items():
            if t in FAST_TYPE:
                self.fast[k] = FAST_TYPE[t]
            else:
                self.fast.pop(k, None)

    def admit_types(self, columns: dict, can_widen: bool) -> dict | None:
        """The widening that rows of these column types (:func:`parsed_type`) need, or None if any
        conflicts or needs a widening that is not allowed: the rows are then admitted one by one."""
        types = self.types
        changed = {}
        for k, t in columns.items():
            old = types.get(k)
            try:
                merged = t if old is None else merge(old, t)
            except _Unfit:
                return None
            if merged != old:
                changed[k] = merged
        return None if changed and not can_widen else changed

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(k, to_arrow(t)) for k, t in self.types.items()])

    def to_table(self, rows: list[dict]) -> pa.Table:
        """Rows as a table of these columns (absent fields are null); cannot fail for admitted rows.

        An object that never had a field becomes null: Parquet cannot store a group
        without fields (docs/parquet.md, rule 4).
        """
        table = pa.Table.from_pylist(rows, schema=self.arrow_schema())
        if any(has_empty_struct(t) for t in self.types.values()):
            table = pa.table([empty_structs_to_null(c.combine_chunks()) for c in table.columns],
                             names=table.column_names)
        return table


# -- a table's schema across commits ------------------------------------------------------
#: Where a commit records the table's columns after it (its transaction's meta), so the next
#: writer can tell a compatible change from one that breaks every reader of the whole table.
SCHEMA_KEY = "schema"


def columns_json(columns) -> list[dict]:
    """``columns`` ((name, type, nullable) triples) as a commit records them."""
    return [{"name": n, "type": t, "nullable": bool(null)} for n, t, null in columns]


def recorded_columns(meta) -> list[tuple[str, str, bool]] | None:
    """The columns a transaction's meta records, or None (none recorded, or not in the shape written)."""
    cols = (meta or {}).get(SCHEMA_KEY) if hasattr(meta, "get") else None
    if not isinstance(cols, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                             and isinstance(c.get("type"), str) for c in cols):
        return None
    return [(c["name"], c["type"], c.get("nullable") is not False) for c in cols]


def evolve_columns(recorded, new, allow: bool = False, where: str = "the output") -> list[tuple[str, str, bool]]:
    """The table's columns after a write of ``new`` onto a table whose commits recorded ``recorded``.

    The rule Parquet readers merging a whole table impose (Spark's ``mergeSchema``,
    pyarrow's ``unify_schemas``, Hive, DuckDB): a column keeps its type, and a
    column is never dropped (older files still have it, newer ones would not);
    a new column must be nullable, since every row written before has no value
    for it. Nullability of an existing column may change (readers take the
    wider). ``allow``: commit a breaking change anyway; the result is then
    ``new`` as written, and readers of the whole table see both versions.
    Types are compared as spelled (Spark's ``simpleString``), so a widening
    (``int`` to ``bigint``) is a change too: not every reader widens.
    """
    new = [(n, t, bool(null)) for n, t, null in new]
    if recorded is None:
        return new
    old = {n: (t, null) for n, t, null in recorded}
    now = {n: (t, null) for n, t, null in new}
    problems = []
    for n, (t, _null) in old.items():
        if n not in now:
            problems.append(f"column {n!r} ({t}) is dropped")
        elif now[n][0] != t:
            problems.append(f"column {n!r} changes type from {t} to {now[n][0]}")
    for n, (t, null) in now.items():
        if n not in old and not null:
            problems.append(f"new column {n!r} ({t}) is not nullable (rows written before have no value for it; "
                            "make the expression nullable, e.g. CASE WHEN ... THEN ... END)")
    if problems and not allow:
        raise SchemaChangeError(
            f"{where}: {'; '.join(problems)}: refused before anything was written (every reader of the whole "
            "table would fail to merge the schemas); fix the SQL, or say schema_change = \"allow\" in [output]")
    if problems:
        return new
    out = [(n, t, null or now[n][1]) for n, t, null in recorded]  # recorded order; nullability widens
    return out + [(n, t, null) for n, t, null in new if n not in old]
