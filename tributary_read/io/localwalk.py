"""Listing a local directory without following symbolic links, and without pyarrow.

pyarrow's ``LocalFileSystem`` stats through links when it lists: through
``ROOT/latest -> 2020_06_24/23`` it returns a partition twice (and ``clean``
would delete its committed files as orphans), through a link to another table
it returns that table, and a loop (``ROOT/x -> ROOT``) multiplies the listing
~40 times per loop, two loops exponentially. It also fails a whole listing on
one name that is not valid UTF-8.

:func:`walk` lists one directory at a time with ``os.scandir`` on an open
directory descriptor, so each entry costs one ``fstatat(dirfd, name)``, the
same system call ``find`` makes, instead of a lookup of the whole path; the
entry types come free from ``getdents``, so links and undecodable names are
found without extra calls. It returns :class:`LocalEntry` tuples, which read
like pyarrow's ``FileInfo`` (``path``, ``type``, ``size``, ``mtime_ns``,
``base_name``) but cost a fraction to make and need no pyarrow: a ``trib
files`` of a local table never imports it (~70 ms of a process's start).
The listing is stat-bound and ``os.stat`` releases the GIL, so callers list
several directories concurrently.
"""

from __future__ import annotations

import os
import stat as _stat
from typing import NamedTuple

from tributary_read.io.storage import BAD_NAME_REASON, COMPACTED_MARK, LINK_REASON, Storage, Unlisted

#: Flink's ``_NAME.valid-length`` sidecar (tributary_read.read.visibility): kept by a windowed
#: listing whatever its own mtime, since it caps a file that may match.
VALID_LENGTH_SUFFIX = ".valid-length"

#: pyarrow's ``FileType`` values (an IntEnum), so entries of both kinds compare alike.
UNKNOWN, FILE, DIRECTORY = 1, 2, 3


class LocalEntry(NamedTuple):
    """One listed entry; ``path`` is absolute, ``size`` None for directories (as pyarrow's)."""

    path: str
    type: int
    size: int | None
    mtime_ns: int

    @property
    def base_name(self) -> str:
        return self.path.rpartition("/")[2]


#: ``base`` itself may be a link (a table root often is); below it nothing is followed.
_OPEN_BASE = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_OPEN_SUB = _OPEN_BASE | getattr(os, "O_NOFOLLOW", 0)
_S_ISDIR, _S_ISREG = _stat.S_ISDIR, _stat.S_ISREG
_S_IFMT, _S_IFREG, _S_IFDIR, _S_IFLNK = 0o170000, _stat.S_IFREG, _stat.S_IFDIR, _stat.S_IFLNK


class Entries(list):
    """A listing's entries; ``seen``: how many it looked at (more when a window left files out);
    ``links``: the paths of the linked files among them, so nobody stats every file to find them."""

    seen = 0
    links: list[str] = []


def walk(storage: Storage, base: str, recursive: bool,
         mtime_ns: tuple[int, int] | None = None) -> tuple[Entries, list[Unlisted]]:
    """Entries under ``base`` (absolute) and the ones left out, with why.

    A linked directory is reported, never entered. A linked file is returned
    with its target's size and mtime, as pyarrow returns it, for the caller to
    report (:meth:`Storage.links`); a dangling link is left out, as pyarrow
    leaves it. With ``mtime_ns=(lo, hi)``, regular files whose mtime lies
    outside [lo, hi] are counted in ``seen`` but not returned, except
    ``*.valid-length`` sidecars (see :meth:`Storage.list_infos`).
    """
    out = Entries()
    unlisted: list[Unlisted] = []
    append = out.append
    new = tuple.__new__
    windowed = mtime_ns is not None
    lo, hi = mtime_ns if mtime_ns is not None else (0, 0)
    IFMT, IFREG, SIDECAR, MARK = _S_IFMT, _S_IFREG, VALID_LENGTH_SUFFIX, COMPACTED_MARK  # locals: the loop runs 10^5 times
    seen = 0
    links: list[str] = []
    stack = [base]
    while stack:
        cur = stack.pop()
        try:
            fd = os.open(cur, _OPEN_BASE if cur is base else _OPEN_SUB)
        except FileNotFoundError:
            continue  # a missing directory lists as empty (removed since its parent was read)
        except NotADirectoryError:
            if cur != base:
                continue  # replaced since its parent was read
            raise storage._wrap("cannot list", storage._rel(cur), NotADirectoryError(f"not a directory: {cur}"))
        except OSError as e:
            if e.errno == 40 and cur != base:  # ELOOP: replaced by a link since its parent was read
                unlisted.append(Unlisted(storage._rel(cur), LINK_REASON, True))
                continue
            raise storage._wrap("cannot list", storage._rel(cur), e) from e
        prefix = cur.rstrip("/") + "/"
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)  # fstatat(fd, name): find's call
                    except FileNotFoundError:
                        continue  # removed since the directory was read
                    m = st.st_mtime_ns
                    kind = st.st_mode & IFMT
                    name = entry.name
                    if (windowed and kind == IFREG and not lo <= m <= hi and name.isascii()
                            and not name.endswith(SIDECAR) and MARK not in name):
                        seen += 1  # a window's common case: a file outside it makes no entry
                        continue
                    if not name.isascii():
                        try:
                            name.encode("utf-8")
                        except UnicodeEncodeError:
                            shown = os.fsencode(prefix + name).decode("utf-8", "backslashreplace")
                            unlisted.append(Unlisted(storage._rel(shown), BAD_NAME_REASON, kind == _S_IFDIR))
                            continue
                    if kind == IFREG:
                        if windowed and not lo <= m <= hi and not name.endswith(SIDECAR) and MARK not in name:
                            seen += 1
                            continue
                        # tuple.__new__: no Python frame per entry
                        append(new(LocalEntry, (prefix + name, FILE, st.st_size, m)))
                    elif kind == _S_IFDIR:
                        path = prefix + name
                        append(new(LocalEntry, (path, DIRECTORY, None, m)))
                        if recursive:
                            stack.append(path)
                    elif kind == _S_IFLNK:
                        _link(storage, prefix + name, append, unlisted, links)
                    else:
                        append(new(LocalEntry, (prefix + name, UNKNOWN, None, m)))
        except OSError as e:
            raise storage._wrap("cannot list", storage._rel(cur), e) from e
        finally:
            os.close(fd)
    out.seen = seen + len(out)
    out.links = links
    return out, unlisted


def _link(storage: Storage, path: str, append, unlisted: list[Unlisted], links: list[str]) -> None:
    """A symbolic link: a linked directory is reported here, a linked file returned for the caller to report."""
    try:
        st = os.stat(path)
    except OSError:
        return  # dangling (or a loop): nothing to read through it
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        unlisted.append(Unlisted(storage._rel(shown), BAD_NAME_REASON, _S_ISDIR(st.st_mode)))
        return
    if _S_ISDIR(st.st_mode):
        unlisted.append(Unlisted(storage._rel(path), LINK_REASON, True))
    elif _S_ISREG(st.st_mode):
        append(LocalEntry(path, FILE, st.st_size, st.st_mtime_ns))
        links.append(path)
    else:
        append(LocalEntry(path, UNKNOWN, None, st.st_mtime_ns))
        links.append(path)
