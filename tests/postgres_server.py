"""A throwaway PostgreSQL server for the tests: Debian's ``postgresql`` binaries, a cluster in a temporary
directory, trust authentication on 127.0.0.1 only, fsync off. Started once per test session
(``conftest.postgres_server``) and removed at its end.

PostgreSQL refuses to run as root, and the suite runs as root in CI: the cluster is then made and run as
the ``postgres`` user the package creates, in a directory that user owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass

#: The cluster's superuser (``initdb -U``); connections need no password (trust, loopback only).
USER = "trib"


def binaries() -> str | None:
    """The newest installed PostgreSQL's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


@dataclass
class PostgresServer:
    bin: str
    dir: str
    port: int
    run_as: str | None

    @property
    def uri(self) -> str:
        """A catalog URI as ``trib`` takes it."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [os.path.join(self.bin, args[0]), *args[1:]]
        if self.run_as:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=40"
        proc = self._run("pg_ctl", "-D", f"{self.dir}/data", "-o", opts, "-l", f"{self.dir}/log", "-w", "start")
        if proc.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {proc.stderr}\n{_tail(self.dir + '/log')}")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", f"{self.dir}/data", "-m", "fast", "-w", "stop")


def _tail(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()[-2000:]
    except OSError:
        return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start() -> PostgresServer:
    """A new cluster, started; raises RuntimeError when it cannot be (the caller skips)."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
    run_as = "postgres" if os.geteuid() == 0 else None
    d = tempfile.mkdtemp(prefix="trib-pg-")
    if run_as:
        pw = pwd.getpwnam(run_as)
        os.chown(d, pw.pw_uid, pw.pw_gid)
    server = PostgresServer(bin_dir, d, _free_port(), run_as)
    init = server._run("initdb", "-D", f"{d}/data", "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync")
    if init.returncode != 0:
        shutil.rmtree(d, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr}")
    server.start()
    return server


def remove(server: PostgresServer) -> None:
    server.stop()
    shutil.rmtree(server.dir, ignore_errors=True)
