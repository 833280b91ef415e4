"""HDFS storage: data through libhdfs (pyarrow), commits through WebHDFS.

Kept in its own module because its commit point needs its own client
(the ``hdfs`` extra); see :class:`HdfsStorage` and docs/manifest.md.
"""

from __future__ import annotations

import posixpath
from typing import Mapping
from urllib.parse import ParseResult

import pyarrow as pa
import pyarrow.fs as pafs

from tributary_read.errors import StorageError, missing_extra
from tributary_read.io.arrow import ArrowStorage
from tributary_read.io.storage import Capabilities, publish_exclusive, staged_name


class HdfsStorage(ArrowStorage):
    """HDFS through libhdfs; commits through WebHDFS (the ``hdfs`` extra).

    The commit point must be exclusive at the NameNode. pyarrow's
    ``HadoopFileSystem.move`` is not: when the target exists it deletes it and
    renames again (POSIX emulation), so two committers could both "win". Commits
    therefore go through WebHDFS: ``CREATE`` a unique temp file, then ``RENAME``
    it to the commit's name. WebHDFS RENAME is the NameNode's
    ``FileSystem.rename(src, dst)``, which refuses (answers false) when ``dst``
    exists, atomically under the namespace lock; the file appears complete or
    not at all. Nothing on the commit path calls pyarrow's move.
    """

    #: Real directories with mtimes; a rename never replaces (see :meth:`Storage.replace`).
    capabilities = Capabilities(real_directories=True, remote=True, atomic_replace=False, hadoop_scheme="hdfs")

    def __init__(self, host: str, port: int, path: str, options: Mapping[str, str]):
        kw: dict = {"host": host or "default", "port": port or 0}
        if options.get("user"):
            kw["user"] = options["user"]
        if options.get("kerb_ticket"):
            kw["kerb_ticket"] = options["kerb_ticket"]
        extra = {k[len("conf.") :]: v for k, v in options.items() if k.startswith("conf.")}
        if options.get("kerberos_principal"):
            extra["hadoop.security.authentication"] = "kerberos"
            extra.setdefault("dfs.namenode.kerberos.principal", options["kerberos_principal"])
        if extra:
            kw["extra_conf"] = extra
        try:
            fs = pafs.HadoopFileSystem(**kw)
        except (OSError, pa.ArrowException) as e:
            raise StorageError(f"cannot connect to HDFS {host}:{port}: {str(e).splitlines()[0]}") from e
        authority = f"{host}:{port}" if port else host
        super().__init__(fs, path or "/", f"hdfs://{authority}{path}")
        self.options = dict(options)
        self.webhdfs_url = options.get("webhdfs_url") or f"http://{host if host != 'default' else 'localhost'}:9870"
        self._webhdfs = None

    def webhdfs(self):
        """The WebHDFS client of the commit path (Kerberos when a principal or ticket is set)."""
        if self._webhdfs is None:
            try:
                if self.options.get("kerberos_principal") or self.options.get("kerb_ticket"):
                    from hdfs.ext.kerberos import KerberosClient

                    self._webhdfs = KerberosClient(self.webhdfs_url)
                else:
                    from hdfs import InsecureClient

                    self._webhdfs = InsecureClient(self.webhdfs_url, user=self.options.get("user"))
            except ImportError:
                raise missing_extra("hdfs", "hdfs") from None
        return self._webhdfs

    def create_if_absent(self, rel: str, data: bytes) -> bool:
        client = self.webhdfs()  # raises the missing-extra error without the hdfs package
        from hdfs.util import HdfsError
        target = self.abspath(rel)
        parent = posixpath.dirname(target)

        def stage(payload: bytes) -> str:
            tmp = posixpath.join(parent, staged_name())
            client.write(tmp, data=payload, overwrite=False)
            return tmp

        def publish(tmp: str) -> bool:
            # The hdfs client raises HdfsError when the NameNode answers false:
            # the target exists, or some other refusal. The read-back tells which.
            client.rename(tmp, target)
            return True

        def read_back() -> bytes:
            if client.status(target, strict=False) is None:
                raise FileNotFoundError(rel)
            with client.read(target) as r:
                return r.read()

        try:
            return publish_exclusive(data, stage=stage, publish=publish, read_back=read_back,
                                     discard=lambda tmp: client.delete(tmp))
        except (HdfsError, OSError) as e:
            raise self._wrap("cannot commit", rel, e) from e


def open_hdfs(u: ParseResult, options: Mapping[str, str]) -> HdfsStorage:
    """The registry's factory for ``hdfs://`` and ``viewfs://`` URIs."""
    return HdfsStorage(u.hostname or "default", u.port or 0, u.path, options)
