"""A secured local Hive stack: a Kerberized metastore and Spark Thrift Servers behind LDAP+TLS or Kerberos.

Why: the paths trib offers for secured clusters (``thrift://localhost:9083?auth=KERBEROS``, HiveServer2
with ``auth=KERBEROS`` or LDAP over TLS) are only proven against servers that really refuse a missing
ticket or a wrong password. Everything here is the same jars as the unsecured pair
(:mod:`tributary_read.services.hive`, whose launch helpers it reuses) plus Debian's MIT KDC and slapd,
all on 127.0.0.1, all private to one state directory ``DIR``:

* ``DIR/kdc``: realm ``TRIB.TEST`` (:mod:`.kdc`); the service principal ``hive/localhost@TRIB.TEST``
  and its keytab. Clients must dial ``localhost``, the principal's host: with ``127.0.0.1`` the KDC
  answers that ``hive/127.0.0.1`` is not in its database.
* ``DIR/hms``: the loopback metastore launcher with ``hive.metastore.sasl.enabled=true`` (Hive's own
  secure branch: SASL GSSAPI, delegation tokens), Derby in ``DIR/hms/metastore_db``, its warehouse
  ``DIR/hms/warehouse``, and a ``core-site.xml`` that turns Hadoop security on.
* ``DIR/krb-hs2``: a Thrift Server with ``hive.server2.authentication=KERBEROS`` in front of that
  metastore, logged in from the service keytab (``--principal/--keytab``).
* ``DIR/ldap-hs2``: a Thrift Server with ``hive.server2.authentication=LDAP`` against slapd (:mod:`.ldap`)
  and TLS (:mod:`.tls`: a keystore made by keytool at start). It keeps its own embedded Derby catalog:
  a LDAP front end needs no Kerberos behind it, and one JVM fewer starts faster. Its keystore password
  is in its private (0600) ``hive-site.xml``, never in argv.

The three JVMs start at once (the Kerberos server retries its metastore connection until the metastore
is up), so the stack is ready in about the time of its slowest JVM. Logs are in ``DIR/logs``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tributary_read.errors import MetastoreError, MissingDependencyError
from tributary_read.hive_udfs import build, registry
from tributary_read.services import kdc as kdc_mod
from tributary_read.services import ldap as ldap_mod
from tributary_read.services import tls
from tributary_read.services.hive import (HOST, _atomic_write, _hms_command, _hs2_command, _hs2_env, _is_ours,
                                          _java, _kill_group, _log4j2, _metastore_props, _port_open, _site_xml,
                                          _spark_home, _spawn, _wait, _write_conf, free_ports, load_state,
                                          save_state)

AUTH_MODES = ("ldap", "kerberos")
SERVICE = "hive"
_STATE = "secure.json"
_READY = "HiveThriftServer2 started"
#: Process markers in /proc/PID/cmdline: a recycled pid is never signalled.
_MARKERS = {"kdc": "krb5kdc", "ldap": "slapd", "hms": build.LAUNCHER_CLASS,
            "ldap_hs2": "HiveThriftServer2", "krb_hs2": "HiveThriftServer2"}
_KERBEROS_SITE = {"hadoop.security.authentication": "kerberos", "hadoop.security.authorization": "false"}
#: The metastore lets the Thrift Server's principal (short name ``hive``) act for its users, from loopback:
#: a Kerberos HiveServer2 with doAs asks the metastore a delegation token per session, for that user.
_PROXY_SITE = {f"hadoop.proxyuser.{SERVICE}.hosts": f"{HOST},localhost", f"hadoop.proxyuser.{SERVICE}.groups": "*"}


@dataclass(frozen=True)
class SecureHive:
    """What :func:`start` launched: addresses, principals and files, and the pids to stop."""

    dir: str
    realm: str
    krb5_conf: str
    kdc_port: int
    service_principal: str
    service_keytab: str
    hms_port: int
    kerberos_hs2_port: int | None = None
    ldap_hs2_port: int | None = None
    ldap_url: str | None = None
    ldap_base_dn: str | None = None
    ca_pem: str | None = None
    truststore: str | None = None
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def metastore_uri(self) -> str:
        """The client must dial ``localhost``: the service principal's host."""
        return f"thrift://localhost:{self.hms_port}?auth=KERBEROS"

    @property
    def logs(self) -> str:
        return str(Path(self.dir) / "logs")

    def kerberos_jdbc_url(self, db: str = "default") -> str:
        return f"jdbc:hive2://localhost:{self.kerberos_hs2_port}/{db};principal={self.service_principal}"

    def ldap_jdbc_url(self, db: str = "default") -> str:
        params = f";ssl=true;sslTrustStore={self.truststore};trustStorePassword={tls.TRUSTSTORE_PASSWORD}"
        return f"jdbc:hive2://localhost:{self.ldap_hs2_port}/{db}{params}"

    @property
    def auth(self) -> tuple[str, ...]:
        """The Thrift Servers' modes, in :data:`AUTH_MODES` order."""
        return tuple(a for a, port in (("ldap", self.ldap_hs2_port), ("kerberos", self.kerberos_hs2_port)) if port)

    def kdc(self) -> kdc_mod.Kdc:
        return kdc_mod.Kdc(str(Path(self.dir) / "kdc"), self.realm, self.kdc_port, self.pids.get("kdc", 0))

    def ldap(self) -> ldap_mod.Ldap:
        if self.ldap_url is None:
            raise MetastoreError(f"the secured stack in {self.dir} runs no LDAP server")
        return ldap_mod.Ldap(str(Path(self.dir) / "ldap"), int(self.ldap_url.rsplit(":", 1)[1]),
                             self.pids.get("ldap", 0))

    def client_env(self, ccache: str | os.PathLike | None = None) -> dict[str, str]:
        """For client subprocesses: the private krb5.conf (C and, via JAVA_TOOL_OPTIONS, Java) and a cache."""
        env = self.kdc().env(ccache)
        env["JAVA_TOOL_OPTIONS"] = f"-Djava.security.krb5.conf={self.krb5_conf}"
        return env


def missing(auth: tuple[str, ...] = AUTH_MODES) -> str | None:
    """What this machine lacks for ``auth``: a binary's name, else None (Java is checked at start)."""
    return kdc_mod.missing() or (ldap_mod.missing() if "ldap" in auth else None)


def start(dir: str | os.PathLike, *, auth: tuple[str, ...] = AUTH_MODES, hms_port: int | None = None,
          kerberos_hs2_port: int | None = None, ldap_hs2_port: int | None = None,
          timeout: float = 300.0) -> SecureHive:
    """Start the KDC, slapd (for ``ldap``), the SASL metastore and one Thrift Server per ``auth`` mode.

    Returns once every server listens and each Thrift Server logged that it started. On a failure or
    the timeout everything started is stopped and ``MetastoreError`` names the log and its telling line.
    """
    unknown = set(auth) - set(AUTH_MODES)
    if unknown or not auth:
        raise MetastoreError(f"unknown auth {sorted(unknown) or auth}; choose from {', '.join(AUTH_MODES)}")
    lacking = missing(auth)
    if lacking:
        raise MissingDependencyError(f"{lacking} not found: install krb5-kdc krb5-user"
                                     + (" slapd ldap-utils" if "ldap" in auth else ""))
    deadline = time.monotonic() + timeout
    root = Path(dir).resolve()
    current = load(root)
    if current is not None and current.auth == tuple(a for a in AUTH_MODES if a in auth) and running(current):
        return current
    if current is not None:
        stop(current)  # half-dead, or other modes: start afresh (the KDC and LDAP databases stay)
    logs, tmp = root / "logs", root / "tmp"
    for d in (logs, tmp):
        d.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    spark_home, java = _spark_home(), _java()
    ports = iter(free_ports(3))
    hms_port = hms_port or next(ports)
    krb_port = (kerberos_hs2_port or next(ports)) if "kerberos" in auth else None
    ldap_port = (ldap_hs2_port or next(ports)) if "ldap" in auth else None

    procs: dict[str, int] = {}
    try:
        kdc = kdc_mod.start(root / "kdc", timeout=max(5.0, deadline - time.monotonic()))
        procs["kdc"] = kdc.pid
        keytab = root / "kdc" / f"{SERVICE}.keytab"
        service = kdc_mod.service_principal(SERVICE, kdc.realm)
        if not keytab.exists():
            kdc.add_principal(service, keytab)
        ldap = keystore = None
        if "ldap" in auth:
            ldap = ldap_mod.start(root / "ldap", timeout=max(5.0, deadline - time.monotonic()))
            procs["ldap"] = ldap.pid
            keystore = tls.make_keystore(root / "tls", java)
        classes = build.launcher_classes(java, spark_home / "jars",
                                         deadline - time.monotonic(), MetastoreError)
        registry.jar_path(timeout=max(10.0, deadline - time.monotonic()))

        # All JVMs at once: each takes 15-40 s, mostly single-threaded class loading.
        hms = _start_metastore(root, kdc, service, keytab, hms_port, java, spark_home, classes)
        procs["hms"] = hms.pid
        waits = [(hms, logs / "hms.log", "the SASL metastore", lambda: _port_open(hms_port))]
        if krb_port is not None:
            p = _start_kerberos_hs2(root, kdc, service, keytab, hms_port, krb_port, spark_home)
            procs["krb_hs2"] = p.pid
            waits.append((p, logs / "krb-hs2.log", "the Kerberos Thrift Server",
                          _hs2_ready(krb_port, logs / "krb-hs2.log")))
        if ldap_port is not None and ldap is not None and keystore is not None:
            p = _start_ldap_hs2(root, ldap, keystore, ldap_port, spark_home)
            procs["ldap_hs2"] = p.pid
            waits.append((p, logs / "ldap-hs2.log", "the LDAP+TLS Thrift Server",
                          _hs2_ready(ldap_port, logs / "ldap-hs2.log")))
        for proc, log, what, ready in waits:
            _wait(proc, log, what, deadline, ready)
        stack = SecureHive(
            str(root), kdc.realm, kdc.krb5_conf, kdc.port, service, str(keytab), hms_port,
            kerberos_hs2_port=krb_port, ldap_hs2_port=ldap_port,
            ldap_url=ldap.url if ldap else None, ldap_base_dn=ldap.base_dn if ldap else None,
            ca_pem=keystore.ca_pem if keystore else None, truststore=keystore.truststore if keystore else None,
            pids=dict(procs))
        save_state(root / _STATE, stack)
        return stack
    except BaseException:
        _stop_pids(procs, 10.0)
        raise


def load(dir: str | os.PathLike) -> SecureHive | None:
    """The stack last started in ``dir`` (alive or not), or None."""
    return load_state(Path(dir) / _STATE, SecureHive)


def stop(stack: SecureHive | str | os.PathLike, timeout: float = 30.0) -> None:
    """Stop every process of the stack (Thrift Servers first, the KDC last); state files stay for logs."""
    current = stack if isinstance(stack, SecureHive) else load(stack)
    if current is None:
        return
    _stop_pids(current.pids, timeout)
    (Path(current.dir) / _STATE).unlink(missing_ok=True)


def running(stack: SecureHive) -> bool:
    """Every process of ``stack`` is alive and still ours."""
    return bool(stack.pids) and all(_is_ours(pid, _MARKERS[name]) for name, pid in stack.pids.items())


def status(stack: SecureHive) -> dict[str, dict]:
    """Per process: pid, port (where it serves one) and alive (still ours AND its port accepting TCP)."""
    ports = {"kdc": stack.kdc_port, "hms": stack.hms_port, "krb_hs2": stack.kerberos_hs2_port,
             "ldap_hs2": stack.ldap_hs2_port,
             "ldap": int(stack.ldap_url.rsplit(":", 1)[1].strip("/")) if stack.ldap_url else None}
    out = {}
    for name, pid in stack.pids.items():
        port = ports.get(name)
        out[name] = {"pid": pid, "port": port,
                     "alive": _is_ours(pid, _MARKERS[name]) and (port is None or _port_open(port))}
    return out


def _stop_pids(pids: dict[str, int], timeout: float) -> None:
    for name in ("krb_hs2", "ldap_hs2", "hms", "ldap", "kdc"):  # clients of the others first
        pid = pids.get(name)
        if pid and _is_ours(pid, _MARKERS[name]):
            _kill_group(pid, timeout)


def _hs2_ready(port: int, log: Path):
    """A Thrift Server is ready when its port is open and its log says it started (this run's part)."""
    def ready() -> bool:
        if not _port_open(port):
            return False
        try:
            text = log.read_text(errors="replace")
        except OSError:
            return False
        return _READY in text[text.rfind("\n==== "):]
    return ready


def _start_metastore(root: Path, kdc: kdc_mod.Kdc, service: str, keytab: Path, port: int, java: str,
                     spark_home: Path, classes: Path):
    home = root / "hms"
    conf = home / "conf"
    (conf / "spark").mkdir(parents=True, exist_ok=True)
    (home / "warehouse").mkdir(parents=True, exist_ok=True)
    _write_conf(home, conf, {"hive.metastore.sasl.enabled": "true",
                             "hive.metastore.kerberos.principal": service,
                             "hive.metastore.kerberos.keytab.file": str(keytab)})
    _atomic_write(conf / "core-site.xml", _site_xml({**_KERBEROS_SITE, **_PROXY_SITE}))
    cmd = _hms_command(java, spark_home, classes, conf, root / "tmp", root / "logs" / "derby.log", port,
                       java_opts=tuple(kdc.java_opts()))
    return _spawn(cmd, root, root / "logs" / "hms.log", {**os.environ, **kdc.env()})


def _start_kerberos_hs2(root: Path, kdc: kdc_mod.Kdc, service: str, keytab: Path, hms_port: int, port: int,
                        spark_home: Path):
    home = root / "krb-hs2"
    tmp = root / "tmp" / "krb-hs2"
    for d in (home / "conf", home / "hadoop", tmp / "scratch"):
        d.mkdir(parents=True, exist_ok=True)
    _atomic_write(home / "conf" / "log4j2.properties", _log4j2("org.apache.spark.sql.hive.thriftserver"))
    _atomic_write(home / "hadoop" / "core-site.xml", _site_xml(_KERBEROS_SITE))
    krb5 = kdc.java_opts()[0]
    cmd = _hs2_command(
        spark_home, port, root / "hms" / "warehouse", tmp, root / "logs" / "derby-krb-hs2.log",
        name="trib-hs2-kerberos", submit=("--principal", service, "--keytab", str(keytab)),
        conf={"spark.hadoop.hive.metastore.uris": f"thrift://localhost:{hms_port}",
              "spark.hadoop.hive.metastore.sasl.enabled": "true",
              "spark.hadoop.hive.metastore.kerberos.principal": service,
              # The metastore may still be starting: retry (1 s apart) rather than die.
              "spark.hadoop.hive.metastore.connect.retries": "60",
              # Without it every query that scans files fails: "Can't get Master Kerberos principal
              # for use as renewer" (Hadoop's token cache asks YARN's principal even in local mode).
              "spark.hadoop.yarn.resourcemanager.principal": kdc_mod.service_principal("yarn", kdc.realm)},
        java_opts=(krb5,),
        hiveconf={"hive.server2.authentication": "KERBEROS",
                  "hive.server2.authentication.kerberos.principal": service,
                  "hive.server2.authentication.kerberos.keytab": str(keytab),
                  # The Spark Thrift Server runs every query in its own JVM as its login user anyway; with
                  # doAs each session's metastore client would run as a keytab-less proxy user and fail
                  # ("Failed to find any Kerberos tgt", then a dropped delegation token).
                  "hive.server2.enable.doAs": "false"})
    env = _hs2_env(spark_home, home / "conf", {"HADOOP_CONF_DIR": str(home / "hadoop"), "SPARK_SUBMIT_OPTS": krb5,
                                               **kdc.env()})
    return _spawn(cmd, root, root / "logs" / "krb-hs2.log", env)


def _start_ldap_hs2(root: Path, ldap: ldap_mod.Ldap, keystore: tls.Keystore, port: int, spark_home: Path):
    home = root / "ldap-hs2"
    conf = home / "conf"
    tmp = root / "tmp" / "ldap-hs2"
    for d in (conf, home / "warehouse", tmp / "scratch"):
        d.mkdir(parents=True, exist_ok=True)
    site = conf / "hive-site.xml"  # SPARK_CONF_DIR is on the server's classpath: HiveConf reads this
    site.unlink(missing_ok=True)
    tls.write_secret(site, _site_xml({  # 0600 from its first byte: it holds the keystore password
        **_metastore_props(home, conf),
        "hive.server2.authentication": "LDAP",
        "hive.server2.authentication.ldap.url": ldap.url,
        "hive.server2.authentication.ldap.baseDN": ldap.base_dn,
        "hive.server2.use.SSL": "true",
        "hive.server2.keystore.path": keystore.keystore,
        "hive.server2.keystore.password": keystore.password}))
    _atomic_write(conf / "log4j2.properties", _log4j2("org.apache.spark.sql.hive.thriftserver"))
    cmd = _hs2_command(spark_home, port, home / "warehouse", tmp, root / "logs" / "derby-ldap-hs2.log",
                       name="trib-hs2-ldap")
    return _spawn(cmd, root, root / "logs" / "ldap-hs2.log", _hs2_env(spark_home, conf))

