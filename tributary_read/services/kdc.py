"""A private MIT Kerberos KDC on 127.0.0.1, for the secured local Hive pair and its tests.

Why a real KDC: the Kerberos paths of trib (``thrift://…?auth=KERBEROS``, pyhive's ``auth=KERBEROS``)
can only be proven against real tickets. MIT's ``krb5kdc`` is a Debian package, starts in well under
a second and needs no root when every file it reads is named explicitly:

* ``DIR/krb5.conf`` (clients: ``KRB5_CONFIG``; Java: ``-Djava.security.krb5.conf``, since Java never
  reads ``KRB5_CONFIG``) and ``DIR/kdc.conf`` (``KRB5_KDC_PROFILE``) are written here, never the
  machine's ``/etc/krb5.conf``. No DNS: ``dns_canonicalize_hostname``/``rdns`` are off, so the host in a
  service principal is exactly the name the client dials (``localhost``: ``hive/localhost@TRIB.TEST``).
* ``udp_preference_limit = 1``: TCP only, the one protocol Java and C agree on with a loopback KDC.
* ``clockskew`` is small (5 s): an expired ticket is refused almost at once by the KDC, by C clients
  and by Java servers alike, so an expiry test waits one ticket life, not five minutes more.
* The master password goes to ``kdb5_util`` on stdin, never in argv; principals get random keys and
  keytabs (``-randkey`` + ``ktadd``), so no password exists at all for them.

The KDC runs in the foreground (``krb5kdc -n``) in its own session and is stopped by its pid.
"""

from __future__ import annotations

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

REALM = "TRIB.TEST"
#: The service principal of the secured metastore and Thrift Server: its host is what clients dial.
SERVICE_HOST = "localhost"
CLOCKSKEW_S = 5
_STATE = "kdc.json"
#: The binaries a KDC needs; ``missing()`` names the first one absent.
BINARIES = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")


def principal(name: str, realm: str = REALM) -> str:
    """``name@REALM`` unless ``name`` already has a realm."""
    return name if "@" in name else f"{name}@{realm}"


def service_principal(service: str = "hive", realm: str = REALM) -> str:
    return f"{service}/{SERVICE_HOST}@{realm}"


def missing() -> str | None:
    """The first Kerberos binary not found (on PATH or in /usr/sbin), else None."""
    for name in BINARIES:
        if _which(name) is None:
            return name
    return None


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")


@dataclass(frozen=True)
class Kdc:
    """A running KDC: its files, port and pid, and the operations clients of it need."""

    dir: str
    realm: str
    port: int
    pid: int

    @property
    def krb5_conf(self) -> str:
        return str(Path(self.dir) / "krb5.conf")

    @property
    def kdc_conf(self) -> str:
        return str(Path(self.dir) / "kdc.conf")

    @property
    def log(self) -> str:
        return str(Path(self.dir) / "kdc.log")

    def env(self, ccache: str | os.PathLike | None = None) -> dict[str, str]:
        """Variables for a C client (kinit, python-kerberos): this realm's krb5.conf, and a private cache."""
        out = {"KRB5_CONFIG": self.krb5_conf, "KRB5_KDC_PROFILE": self.kdc_conf}
        if ccache is not None:
            out["KRB5CCNAME"] = f"FILE:{ccache}"
        return out

    def java_opts(self) -> list[str]:
        """JVM flags: Java reads krb5.conf from this property only (``/etc/krb5.conf`` otherwise)."""
        return [f"-Djava.security.krb5.conf={self.krb5_conf}"]

    def add_principal(self, name: str, keytab: str | os.PathLike, *, maxlife: str | None = None) -> str:
        """Create ``name`` with a random key and export it to ``keytab``; returns the full principal.

        ``maxlife`` (kadmin syntax, e.g. ``"1 minute"``) caps every ticket issued to it.
        """
        full = principal(name, self.realm)
        life = f' -maxlife "{maxlife}"' if maxlife else ""
        self._kadmin(f"addprinc -randkey{life} {full}\nktadd -k {Path(keytab).resolve()} {full}\n")
        return full

    def kinit(self, name: str, keytab: str | os.PathLike, ccache: str | os.PathLike) -> None:
        """Get ``name``'s ticket from its keytab into ``ccache`` (a file), as a user's ``kinit -kt`` would."""
        cmd = [_which("kinit") or "kinit", "-kt", str(keytab), principal(name, self.realm)]
        proc = subprocess.run(cmd, env={**os.environ, **self.env(ccache)}, capture_output=True, text=True,
                              timeout=30)
        if proc.returncode:
            raise MetastoreError(f"kinit {name} failed: {(proc.stderr or proc.stdout).strip()}")

    def _kadmin(self, commands: str) -> str:
        proc = subprocess.run([_which("kadmin.local") or "kadmin.local", "-r", self.realm], input=commands,
                              env={**os.environ, **self.env()}, capture_output=True, text=True, timeout=60,
                              start_new_session=True)
        errors = [ln for ln in proc.stderr.splitlines() if "while" in ln or "rror" in ln]
        if proc.returncode or errors:
            raise MetastoreError(f"kadmin.local failed: {(errors or [proc.stderr.strip()])[0]}")
        return proc.stdout


def start(dir: str | os.PathLike, *, realm: str = REALM, port: int | None = None, timeout: float = 30.0) -> Kdc:
    """Create the realm's database in ``dir`` (once) and run ``krb5kdc`` on 127.0.0.1; return when it listens."""
    name = missing()
    if name is not None:
        raise MissingDependencyError(f"{name} not found: install krb5-kdc and krb5-user")
    root = Path(dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)  # keytabs and the stash live here
    port = port or free_ports(1)[0]
    _write_conf(root, realm, port)
    kdc = Kdc(str(root), realm, port, 0)
    if not (root / "principal").exists():
        master = secrets.token_urlsafe(24)
        proc = subprocess.run([_which("kdb5_util") or "kdb5_util", "create", "-s", "-r", realm],
                              input=f"{master}\n{master}\n", env={**os.environ, **kdc.env()},
                              capture_output=True, text=True, timeout=60, start_new_session=True)  # no tty: stdin
        if proc.returncode:
            raise MetastoreError(f"kdb5_util create failed: {proc.stderr.strip()}")
    deadline = time.monotonic() + timeout
    proc_kdc = _spawn([_which("krb5kdc") or "krb5kdc", "-n", "-r", realm], root, root / "krb5kdc.out",
                      {**os.environ, **kdc.env()})
    kdc = Kdc(str(root), realm, port, proc_kdc.pid)
    try:
        _wait(proc_kdc, root / "krb5kdc.out", "the KDC", deadline, lambda: _port_open(port))
    except BaseException:
        _kill_group(proc_kdc.pid, 5.0)
        raise
    save_state(root / _STATE, kdc)
    return kdc


def load(dir: str | os.PathLike) -> Kdc | None:
    """The KDC last started in ``dir`` (alive or not), or None."""
    return load_state(Path(dir) / _STATE, Kdc)


def stop(kdc: Kdc, timeout: float = 10.0) -> None:
    """SIGTERM the KDC's process group (SIGKILL after ``timeout``); its database stays for a restart."""
    if kdc.pid:
        _kill_group(kdc.pid, timeout)
    (Path(kdc.dir) / _STATE).unlink(missing_ok=True)


def _write_conf(root: Path, realm: str, port: int) -> None:
    _atomic_write(root / "krb5.conf", f"""[libdefaults]
 default_realm = {realm}
 dns_lookup_realm = false
 dns_lookup_kdc = false
 dns_canonicalize_hostname = false
 rdns = false
 udp_preference_limit = 1
 clockskew = {CLOCKSKEW_S}
 default_ccache_name = FILE:{root / 'ccache'}
 forwardable = false
[realms]
 {realm} = {{
  kdc = {HOST}:{port}
 }}
[domain_realm]
 localhost = {realm}
""")
    _atomic_write(root / "kdc.conf", f"""[kdcdefaults]
 kdc_listen = {HOST}:{port}
 kdc_tcp_listen = {HOST}:{port}
[realms]
 {realm} = {{
  database_name = {root / 'principal'}
  key_stash_file = {root / 'stash'}
  acl_file = {root / 'kadm5.acl'}
  kdc_listen = {HOST}:{port}
  kdc_tcp_listen = {HOST}:{port}
  max_life = 10h
  max_renewable_life = 1d
  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
 }}
[logging]
 kdc = FILE:{root / 'kdc.log'}
""")
    (root / "kadm5.acl").touch()
