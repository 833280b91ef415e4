"""A private OpenLDAP ``slapd`` on 127.0.0.1: the directory behind HiveServer2's LDAP authentication.

Why: ``hive.server2.authentication=LDAP`` makes HiveServer2 check each login by a simple bind as
``uid=USER,BASE_DN``; only a real directory proves what a client sees for a right and a wrong
password. slapd (Debian's ``slapd`` package) runs from a ``slapd.conf`` written here, with the
``mdb`` backend in ``DIR/data``, suffix ``dc=trib,dc=test`` and the core, cosine and inetOrgPerson
schemas, in the foreground (``-d 0``) in its own session, stopped by its pid.

Passwords never appear in any process's argv: the root password is stored in ``slapd.conf`` as a
salted SHA-1 hash, ``ldapadd`` reads the bind password from a 0600 file (``-y``) and the users'
LDIF (with their hashed ``userPassword``) from stdin.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tributary_read.errors import MetastoreError, MissingDependencyError
from tributary_read.services.hive import (HOST, _atomic_write, _kill_group, _port_open, _spawn, _wait, free_ports,
                                          load_state, save_state)
from tributary_read.services.tls import write_secret

SUFFIX = "dc=trib,dc=test"
PEOPLE = f"ou=people,{SUFFIX}"
ROOT_DN = f"cn=admin,{SUFFIX}"
SCHEMA_DIR = Path("/etc/ldap/schema")
MODULE_DIR = Path("/usr/lib/ldap")
SCHEMAS = ("core", "cosine", "inetorgperson")
BINARIES = ("slapd", "ldapadd", "ldapwhoami")
_STATE = "ldap.json"


def missing() -> str | None:
    """The first piece of an LDAP server absent here (a binary or a schema), else None."""
    for name in BINARIES:
        if _which(name) is None:
            return name
    for schema in SCHEMAS:
        if not (SCHEMA_DIR / f"{schema}.schema").is_file():
            return f"{SCHEMA_DIR / schema}.schema"
    return None


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")


def ssha(password: str) -> str:
    """``{SSHA}`` of ``password``: what slapd checks a bind against, without storing the password."""
    salt = secrets.token_bytes(8)
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password.encode() + salt).digest() + salt).decode()


@dataclass(frozen=True)
class Ldap:
    """A running slapd: its URL, base DN of the users, and the files to administer it."""

    dir: str
    port: int
    pid: int

    @property
    def url(self) -> str:
        return f"ldap://{HOST}:{self.port}"

    @property
    def base_dn(self) -> str:
        """HiveServer2's ``hive.server2.authentication.ldap.baseDN``: users are ``uid=NAME,`` + this."""
        return PEOPLE

    @property
    def root_password_file(self) -> str:
        return str(Path(self.dir) / "root.pw")

    def user_dn(self, uid: str) -> str:
        return f"uid={uid},{PEOPLE}"

    def add_user(self, uid: str, password: str) -> str:
        """Add ``uid`` under ``ou=people`` with ``password`` (hashed; sent on stdin); returns its DN."""
        dn = self.user_dn(uid)
        self.add_ldif(f"dn: {dn}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid}\nsn: {uid}\n"
                      f"userPassword: {ssha(password)}\n")
        return dn

    def add_ldif(self, ldif: str) -> None:
        cmd = [_which("ldapadd") or "ldapadd", "-x", "-H", self.url, "-D", ROOT_DN, "-y", self.root_password_file]
        proc = subprocess.run(cmd, input=ldif, capture_output=True, text=True, timeout=30)
        if proc.returncode:
            raise MetastoreError(f"ldapadd failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")

    def check_password(self, uid: str, password_file: str | os.PathLike) -> bool:
        """A simple bind as ``uid`` (``ldapwhoami -y``), as HiveServer2 will do it."""
        cmd = [_which("ldapwhoami") or "ldapwhoami", "-x", "-H", self.url, "-D", self.user_dn(uid),
               "-y", str(password_file)]
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0


def start(dir: str | os.PathLike, *, port: int | None = None, timeout: float = 30.0) -> Ldap:
    """Run slapd for ``dc=trib,dc=test`` on 127.0.0.1 with an empty ``ou=people``; return when it answers."""
    name = missing()
    if name is not None:
        raise MissingDependencyError(f"{name} not found: install slapd and ldap-utils")
    root = Path(dir).resolve()
    (root / "data").mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    port = port or free_ports(1)[0]
    fresh = not (root / "data" / "data.mdb").exists()
    if fresh or not (root / "root.pw").exists():
        write_secret(root / "root.pw", secrets.token_urlsafe(18))
    includes = "".join(f"include {SCHEMA_DIR / s}.schema\n" for s in SCHEMAS)
    _atomic_write(root / "slapd.conf", f"""{includes}modulepath {MODULE_DIR}
moduleload back_mdb
pidfile {root / 'slapd.pid'}
argsfile {root / 'slapd.args'}
database mdb
maxsize 67108864
suffix "{SUFFIX}"
rootdn "{ROOT_DN}"
rootpw {ssha((root / 'root.pw').read_text())}
directory {root / 'data'}
""")
    os.chmod(root / "slapd.conf", 0o600)
    deadline = time.monotonic() + timeout
    log = root / "slapd.log"
    proc = _spawn([_which("slapd") or "slapd", "-d", "0", "-f", str(root / "slapd.conf"),
                   "-h", f"ldap://{HOST}:{port}/"], root, log, os.environ.copy())
    ldap = Ldap(str(root), port, proc.pid)
    try:
        _wait(proc, log, "slapd", deadline, lambda: _port_open(port))
        if fresh:
            ldap.add_ldif(f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\no: trib\ndc: trib\n\n"
                          f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n")
    except BaseException:
        _kill_group(proc.pid, 5.0)
        raise
    save_state(root / _STATE, ldap)
    return ldap


def load(dir: str | os.PathLike) -> Ldap | None:
    return load_state(Path(dir) / _STATE, Ldap)


def stop(ldap: Ldap, timeout: float = 10.0) -> None:
    """SIGTERM slapd's process group (SIGKILL after ``timeout``); the directory stays in ``DIR/data``."""
    if ldap.pid:
        _kill_group(ldap.pid, timeout)
    (Path(ldap.dir) / _STATE).unlink(missing_ok=True)
