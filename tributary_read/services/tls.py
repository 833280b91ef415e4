"""A throwaway TLS identity for the local HiveServer2: made at runtime by the JDK's ``keytool``.

Why at runtime: a key committed to the repository is a key everyone has; one made per stack dir is
nobody's. Why keytool: HiveServer2 reads a Java keystore anyway, and the JDK is already required,
so no openssl and nothing downloaded. The certificate is self-signed for ``CN=localhost`` with the
subject alternative names ``dns:localhost`` and ``ip:127.0.0.1``, so a client that checks host names
accepts either address. Three files come out:

* ``keystore.p12`` (PKCS12) for the server, its password in the 0600 file ``keystore.pw`` and handed to
  keytool with ``-storepass:file``, never in argv;
* ``ca.pem``, the certificate (``keytool -exportcert -rfc``): the CA file of Python and C clients;
* ``truststore.p12`` for Java clients (beeline's ``sslTrustStore``). Its password sits in JDBC URLs,
  i.e. in argv, which is why it is a separate store holding only the public certificate: that password
  guards nothing secret (:data:`TRUSTSTORE_PASSWORD`).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tributary_read.errors import MetastoreError, MissingDependencyError

ALIAS = "localhost"
#: The truststore's password: public by design (see the module docstring).
TRUSTSTORE_PASSWORD = "trib-public"


@dataclass(frozen=True)
class Keystore:
    keystore: str
    password_file: str
    ca_pem: str
    truststore: str

    @property
    def password(self) -> str:
        """The keystore's password, for a server config file (never for argv)."""
        return Path(self.password_file).read_text()

    def jdbc_params(self) -> str:
        """The part of a ``jdbc:hive2://`` URL that makes a Java client trust this certificate."""
        return f";ssl=true;sslTrustStore={self.truststore};trustStorePassword={TRUSTSTORE_PASSWORD}"


def keytool(java: str) -> str:
    """The ``keytool`` beside ``java`` (the same JDK), else the one on PATH."""
    exe = Path(java).resolve().with_name("keytool")
    if os.access(exe, os.X_OK):
        return str(exe)
    import shutil

    found = shutil.which("keytool")
    if not found:
        raise MissingDependencyError("keytool not found: install a full JDK 17 or set JAVA_HOME")
    return found


def make_keystore(dir: str | os.PathLike, java: str, *, validity_days: int = 30) -> Keystore:
    """Create (once) the keystore, CA PEM and truststore in ``dir``; an existing set is reused."""
    root = Path(dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    out = Keystore(str(root / "keystore.p12"), str(root / "keystore.pw"), str(root / "ca.pem"),
                   str(root / "truststore.p12"))
    if all(Path(p).is_file() for p in (out.keystore, out.password_file, out.ca_pem, out.truststore)):
        return out
    for p in (out.keystore, out.ca_pem, out.truststore):
        Path(p).unlink(missing_ok=True)
    tool = keytool(java)
    write_secret(out.password_file, secrets.token_urlsafe(18))
    public = write_secret(root / "truststore.pw", TRUSTSTORE_PASSWORD)
    store = ["-keystore", out.keystore, "-storetype", "PKCS12", "-storepass:file", out.password_file]
    _run([tool, "-genkeypair", "-alias", ALIAS, "-keyalg", "RSA", "-keysize", "2048",
          "-validity", str(validity_days), "-dname", "CN=localhost",
          "-ext", "SAN=dns:localhost,ip:127.0.0.1", *store, "-keypass:file", out.password_file])
    _run([tool, "-exportcert", "-rfc", "-alias", ALIAS, *store, "-file", out.ca_pem])
    _run([tool, "-importcert", "-noprompt", "-alias", ALIAS, "-file", out.ca_pem, "-keystore", out.truststore,
          "-storetype", "PKCS12", "-storepass:file", str(public)])
    return out


def write_secret(path: str | os.PathLike, value: str) -> Path:
    """``value`` in a new 0600 file, no trailing newline: keytool ``:file``, ``ldapadd -y`` and beeline ``-w``
    read it whole, and a file keeps a secret out of every argv."""
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value)
    return p


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode:
        raise MetastoreError(f"keytool {cmd[1]} failed: {(proc.stderr or proc.stdout).strip()[:300]}")
