"""Partition columns as Catalyst expressions: each row's partition values from its file's path.

Spark discovers partitions only in ``key=value`` directories, and only below a
base path it lists itself; trib's layouts are any template
(``{yyyy}_{MM}_{dd}/{HH}`` -> ``dt=2024010105``) and reads name files one by
one. So the values are computed per row from the file path, with the layout's
own rules (:attr:`Layout.directory_fields`, :attr:`Layout.partition_parts`):
one plan, whatever the number of partitions, never one DataFrame per
partition unioned (which dies at thousands of partitions).

Only the ``depth`` directories right before the file name are looked at: the
root above them may hold anything, and the file name may be URI-encoded
(``_metadata.file_path`` spells a space ``%20``) without moving a token, because
every layout segment has a fixed width and holds no character a URI encodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tributary_read.spark import require_pyspark

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column

    from tributary_read.table.layout import Layout


def partition_columns(layout: Layout, path_col: str | Column) -> list[Column]:
    """One string column per partition key of ``layout``, computed from ``path_col``.

    ``path_col`` is a column name or a Column holding each row's file path (a
    URI such as ``_metadata.file_path``). A path that does not end in the
    layout's directories fails the query with its path, rather than yielding a
    NULL partition: a FileSet's files all lie in layout directories, so such a
    path means the files and the layout do not belong together.
    """
    require_pyspark()
    from pyspark.sql import functions as F

    path = F.col(path_col) if isinstance(path_col, str) else path_col
    regex, offsets = layout.directory_fields
    # "2024_01_01/05/part-0.txt": the layout's directories and the file name.
    tail = F.substring_index(path, "/", -(layout.depth + 1))
    fits = tail.rlike(f"^{regex}/[^/]+$")
    failure = F.raise_error(F.concat(
        F.lit(f"trib: file is not in a directory of layout {layout.directory!r}: "), path))
    cols = []
    for key, parts in layout.partition_parts.items():
        pieces = [F.lit(p) if isinstance(p, str) else F.substring(tail, offsets[p[0]][0] + 1, offsets[p[0]][1])
                  for p in parts]
        value = pieces[0] if len(pieces) == 1 else F.concat(*pieces)
        cols.append(F.when(fits, value).otherwise(failure).alias(key))
    return cols
