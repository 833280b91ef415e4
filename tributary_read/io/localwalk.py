"""Listing a local directory without following symbolic links.

pyarrow's ``LocalFileSystem`` stats through links when it lists: through
``ROOT/latest -> 2020_06_24/23`` it returns a partition twice (and ``clean``
would delete its committed files as orphans), through a link to another table
it returns that table, and a loop (``ROOT/x -> ROOT``) multiplies the listing
~40 times per loop, two loops exponentially. It also fails a whole listing on
one name that is not valid UTF-8. :func:`walk` lists one directory at a time
with pyarrow (fast, GIL released), checks only the directories it is about to
descend into (one lstat per directory, not per file), and falls back to
``os.scandir`` for a directory holding an undecodable name.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pafs

from tributary_read.io.storage import BAD_NAME_REASON, LINK_REASON, Storage, Unlisted


def walk(storage: Storage, base: str, recursive: bool) -> tuple[list[pafs.FileInfo], list[Unlisted]]:
    """Entries under ``base`` (absolute, in ``storage.fs``) and the ones left out, with why."""
    DIR = pafs.FileType.Directory
    islink = os.path.islink
    out: list[pafs.FileInfo] = []
    unlisted: list[Unlisted] = []
    stack = [base]
    while stack:
        cur = stack.pop()
        try:
            infos = storage.fs.get_file_info(pafs.FileSelector(cur, recursive=False, allow_not_found=True))
            for i in infos:
                i.path  # noqa: B018 - pyarrow decodes names lazily: fail here, not in a caller
        except UnicodeDecodeError:
            infos, bad = _scandir(storage, cur)
            unlisted.extend(bad)
        except (OSError, pa.ArrowException) as e:
            raise storage._wrap("cannot list", storage._rel(cur), e) from e
        for i in infos:
            if i.type == DIR:
                if islink(i.path):
                    unlisted.append(Unlisted(storage._rel(i.path), LINK_REASON, True))
                    continue
                if recursive:
                    stack.append(i.path)
            out.append(i)
    return out, unlisted


def _scandir(storage: Storage, cur: str) -> tuple[list[pafs.FileInfo], list[Unlisted]]:
    """One directory the careful way: lstat only, names checked, links and bad names reported."""
    out: list[pafs.FileInfo] = []
    unlisted: list[Unlisted] = []
    try:
        it = os.scandir(cur)
    except FileNotFoundError:
        return out, unlisted
    except OSError as e:
        raise storage._wrap("cannot list", storage._rel(cur), e) from e
    with it:
        for e in it:
            is_dir = e.is_dir(follow_symlinks=False)
            try:
                e.path.encode("utf-8")
            except UnicodeEncodeError:
                shown = os.fsencode(e.path).decode("utf-8", "backslashreplace")
                unlisted.append(Unlisted(storage._rel(shown), BAD_NAME_REASON, is_dir))
                continue
            if e.is_symlink():
                unlisted.append(Unlisted(storage._rel(e.path), LINK_REASON, e.is_dir()))
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed since the directory was read
            if is_dir:
                out.append(pafs.FileInfo(e.path, pafs.FileType.Directory, mtime_ns=st.st_mtime_ns))
            else:
                out.append(pafs.FileInfo(e.path, pafs.FileType.File, mtime_ns=st.st_mtime_ns, size=st.st_size))
    return out, unlisted
